package conductor

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/controller/state"
	"github.com/anvil-metal/anvil/controller/store"
	"github.com/anvil-metal/anvil/controller/store/storetest"
	"github.com/anvil-metal/anvil/protocol"
)

// durabilityStore records, per node write, whether it was marked volatile.
type durabilityStore struct {
	store.Store
	mu       sync.Mutex
	volatile []bool
}

func (s *durabilityStore) UpdateNode(ctx context.Context, n *store.Node, events ...*store.Event) error {
	s.mu.Lock()
	s.volatile = append(s.volatile, store.IsVolatile(ctx))
	s.mu.Unlock()
	return s.Store.UpdateNode(ctx, n, events...)
}

func (s *durabilityStore) last() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.volatile[len(s.volatile)-1]
}

// Heartbeats that only move last-seen and progress may skip the fsync; any
// heartbeat that changes what the controller acts on may not.
func TestHeartbeatDurability(t *testing.T) {
	ctx := context.Background()
	st := &durabilityStore{Store: openSQLite(t)}
	c := New(st, Config{Host: "c1"}, &scriptDriver{})
	n := storetest.NewNode("hb")
	n.Driver, n.ProvisionState = "script", string(state.CleanWait)
	n.Operation.Agent.Token, n.Operation.Agent.BootID = "tok", "boot-1"
	require.NoError(t, st.Store.CreateNode(ctx, n))
	steps := &protocol.StepCatalogue{Fingerprint: "fp", Clean: twoSteps(true)}
	cmd := func(state string, pct float64) *protocol.CommandStatus {
		return &protocol.CommandStatus{ID: "cmd-1", Name: "execute_clean_step", State: state, StartedAt: time.Now().UTC(),
			Progress: &protocol.Progress{Percent: pct}}
	}
	for _, tc := range []struct {
		name     string
		hb       protocol.Heartbeat
		volatile bool
	}{
		{"first heartbeat with the catalogue", protocol.Heartbeat{Steps: steps, Fingerprint: "fp"}, false},
		{"nothing new", protocol.Heartbeat{Fingerprint: "fp"}, true},
		{"a command starts", protocol.Heartbeat{Fingerprint: "fp", Command: cmd(protocol.CommandRunning, 0)}, false},
		{"progress only", protocol.Heartbeat{Fingerprint: "fp", Command: cmd(protocol.CommandRunning, 40)}, true},
		{"more progress", protocol.Heartbeat{Fingerprint: "fp", Command: cmd(protocol.CommandRunning, 80)}, true},
		{"the command finishes", protocol.Heartbeat{Fingerprint: "fp", Command: cmd(protocol.CommandSucceeded, 100)}, false},
		{"a new agent version", protocol.Heartbeat{Fingerprint: "fp", AgentVersion: "2.0"}, false},
	} {
		hb := tc.hb
		hb.AgentToken, hb.BootID = "tok", "boot-1"
		_, err := c.Heartbeat(ctx, n.UUID, &hb)
		require.NoError(t, err, tc.name)
		assert.Equal(t, tc.volatile, st.last(), tc.name)
	}
	got, err := st.GetNode(ctx, n.UUID)
	require.NoError(t, err)
	assert.False(t, got.Operation.Agent.LastHeartbeat.IsZero(), "volatile or not, every heartbeat is recorded")
}
