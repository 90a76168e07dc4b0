package api

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/controller/simagent"
)

// BenchmarkHeartbeat measures heartbeats handled per second: nodes waiting
// in clean wait, each with a simulated agent that looked up, all
// heartbeating in parallel over real HTTP into a file-backed store.
func BenchmarkHeartbeat(b *testing.B) {
	const nodes = 500
	cc := agentConfig()
	cc.Agent.SilenceTimeout = time.Hour
	cc.CheckInterval = time.Hour
	t := &testing.T{}
	e := newEnvWith(t, cc, b.TempDir()+"/anvil.db")
	b.Cleanup(e.stop)
	e.t = t
	agents := make([]*simagent.Agent, nodes)
	ctx := context.Background()
	for i := range agents {
		mac := fmt.Sprintf("52:54:01:00:%02x:%02x", i>>8, i&0xff)
		name := fmt.Sprintf("hb-%04d", i)
		n := e.createNode(name, map[string]any{"deploy_interface": "direct"})
		require.Equal(b, 201, e.do("POST", "/v1/ports", latest, map[string]any{"address": mac, "node_uuid": n["uuid"]}).status)
		require.Equal(b, 202, e.provision(name, "manage", nil).status)
		e.waitState(name, "manageable")
		require.Equal(b, 202, e.provision(name, "provide", nil).status)
		e.waitState(name, "clean wait") // rebooted into the ramdisk: now the agent boots
		a := simagent.New(e.srv.URL, mac)
		a.Outcomes["deploy.erase_devices_metadata"] = simagent.Outcome{Release: make(chan struct{})} // stays running
		agents[i] = a
	}
	for _, a := range agents {
		require.Eventually(b, func() bool { return a.Lookup(ctx) == nil }, 10*time.Second, 10*time.Millisecond)
		_, err := a.Heartbeat(ctx)
		require.NoError(b, err)
	}
	var next atomic.Int64
	b.ResetTimer()
	start := time.Now()
	// Many agents heartbeat at once, as in a fleet: 2 goroutines per core
	// would measure one round trip at a time, not the controller.
	b.SetParallelism(32)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			a := agents[int(next.Add(1))%nodes]
			if _, err := a.Heartbeat(ctx); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "heartbeats/s")
}
