package conductor

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
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
		_, err := c.Heartbeat(ctx, n.UUID, "", &hb)
		require.NoError(t, err, tc.name)
		assert.Equal(t, tc.volatile, st.last(), tc.name)
	}
	got, err := st.GetNode(ctx, n.UUID)
	require.NoError(t, err)
	assert.False(t, got.Operation.Agent.LastHeartbeat.IsZero(), "volatile or not, every heartbeat is recorded")
}

// sessionNode stores a node in clean wait with a port for mac.
func sessionNode(t *testing.T, st store.Store, mac string) *store.Node {
	t.Helper()
	ctx := context.Background()
	n := storetest.NewNode("")
	n.Driver, n.ProvisionState = "script", string(state.CleanWait)
	n.Operation.Agent.Await = &store.Await{Reason: "boot", Since: time.Now()} // the controller booted it
	require.NoError(t, st.CreateNode(ctx, n))
	require.NoError(t, st.CreatePort(ctx, &store.Port{UUID: uuid.NewString(), Address: mac, NodeUUID: n.UUID, CreatedAt: time.Now()}))
	return n
}

// newSessions is the session service alone, with kicks recorded.
func newSessions(st store.Store) (*sessions, *[]string) {
	cfg := Config{Host: "s"}
	cfg.defaults()
	var kicked []string
	return newSessionService(&core{cfg: cfg, st: st, drivers: map[string]Driver{}, log: cfg.Logger},
		func(id string) { kicked = append(kicked, id) }), &kicked
}

// A command left for the agent is delivered by the next heartbeat, and its
// result wakes the node's worker.
func TestHeartbeatDeliversTheCommandAndReportsItsEnd(t *testing.T) {
	ctx := context.Background()
	st := openSQLite(t)
	s, kicked := newSessions(st)
	n := sessionNode(t, st, "52:54:00:00:00:03")
	lr, err := s.Lookup(ctx, LookupRequest{NodeUUID: n.UUID, BootID: "b"})
	require.NoError(t, err)
	step := protocol.Step{Interface: "deploy", Step: "erase_devices"}
	_, err = store.MutateNode(ctx, st, n.UUID, func(m *store.Node) error {
		m.Operation.Agent.Steps = &store.StepCache{Fingerprint: "fp"}
		m.Operation.Agent.Await, m.Operation.Agent.Booted = nil, true // the agent is back
		issueCommand(m, protocol.CmdExecuteCleanStep, &step, time.Now())
		return nil
	})
	require.NoError(t, err)
	hb := &protocol.Heartbeat{AgentToken: lr.Config.AgentToken, BootID: "b", Fingerprint: "fp"}
	resp, err := s.Heartbeat(ctx, n.UUID, "", hb)
	require.NoError(t, err)
	require.NotNil(t, resp.Command)
	assert.Equal(t, "erase_devices", resp.Command.Step.Step)

	hb.Command = &protocol.CommandStatus{ID: resp.Command.ID, Name: resp.Command.Name, State: protocol.CommandSucceeded}
	resp, err = s.Heartbeat(ctx, n.UUID, "", hb)
	require.NoError(t, err)
	assert.Equal(t, hb.Command.ID, resp.Ack)
	assert.Nil(t, resp.Command, "a finished command is not sent again")
	assert.Equal(t, []string{n.UUID}, *kicked, "the worker continues the node")
	got, err := st.GetNode(ctx, n.UUID)
	require.NoError(t, err)
	assert.Equal(t, protocol.CommandSucceeded, got.Operation.Agent.CommandStatus.State)
}
