package storetest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/controller/store"
)

// Bench measures the store calls the controller makes most: reading a
// node, a heartbeat-like update (with and without a history event), a
// sorted page of a 1000-node fleet, a plain node list and a lease
// acquisition. open must return an empty store.
func Bench(b *testing.B, open func(b *testing.B) store.Store) {
	ctx := context.Background()
	s := open(b)
	b.Cleanup(func() { s.Close() })
	var nodes []*store.Node
	for i := 0; i < 1000; i++ {
		n := NewNode(fmt.Sprintf("bench-%04d", i))
		n.DriverInfo = map[string]any{"ipmi_address": "192.0.2.1", "ipmi_password": "x"}
		n.Properties = map[string]any{"cpus": float64(8), "memory_mb": float64(16384)}
		require.NoError(b, s.CreateNode(ctx, n))
		nodes = append(nodes, n)
	}
	b.Run("GetNode", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			if _, err := s.GetNode(ctx, nodes[i%len(nodes)].UUID); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("UpdateNode", func(b *testing.B) {
		n := nodes[1]
		for i := 0; b.Loop(); i++ {
			n.Operation.Agent.LastHeartbeat = time.Now()
			if err := s.UpdateNode(store.Volatile(ctx), n); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("UpdateNodeEvent", func(b *testing.B) {
		n := nodes[2]
		for i := 0; b.Loop(); i++ {
			n.ProvisionState = []string{"manageable", "cleaning"}[i%2]
			e := &store.Event{UUID: uuid.NewString(), NodeUUID: n.UUID, CreatedAt: time.Now().UTC(), Severity: "INFO",
				EventType: "provisioning", Event: "bench"}
			if err := s.UpdateNode(ctx, n, e); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("ListNodesByName100", func(b *testing.B) {
		for b.Loop() {
			page, err := s.ListNodes(ctx, store.NodeFilter{}, store.Page{Limit: 100, SortKey: "name", Marker: nodes[500].UUID})
			if err != nil || len(page) != 100 {
				b.Fatal(len(page), err)
			}
		}
	})
	b.Run("ListNodeSummaries1000", func(b *testing.B) {
		for b.Loop() {
			page, err := s.ListNodeSummaries(ctx, store.NodeFilter{}, store.Page{})
			if err != nil || len(page) != 1000 {
				b.Fatal(len(page), err)
			}
		}
	})
	b.Run("AcquireLease", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			if _, _, err := s.AcquireLease(ctx, nodes[i%len(nodes)].UUID, "bench", time.Minute); err != nil {
				b.Fatal(err)
			}
		}
	})
}
