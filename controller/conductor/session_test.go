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
	return &sessions{core: &core{cfg: cfg, st: st, drivers: map[string]Driver{}, log: cfg.Logger},
		kick: func(id string) { kicked = append(kicked, id) }}, &kicked
}

// The token goes to the first lookup of the boot; the same agent asking
// again gets none (it holds it), anybody else is a second claimant:
// refused and recorded, by lookup or with the token from elsewhere.
func TestLookupTokenOncePerBoot(t *testing.T) {
	ctx := context.Background()
	st := openSQLite(t)
	s, _ := newSessions(st)
	n := sessionNode(t, st, "52:54:00:00:00:01")
	agent := LookupRequest{MACs: []string{"52:54:00:00:00:01"}, BootID: "boot-1", Address: "10.0.0.5"}

	first, err := s.Lookup(ctx, agent)
	require.NoError(t, err)
	assert.Equal(t, n.UUID, first.Node.UUID)
	token := first.Config.AgentToken
	require.NotEmpty(t, token)
	_, err = s.Lookup(ctx, agent)
	var ce *Error
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, CodeConflict, ce.Code, "the agent of this boot holds its token; it is not handed out twice")
	assert.NotErrorIs(t, err, ErrSecondClaimant)

	for _, other := range []LookupRequest{
		{NodeUUID: n.UUID, BootID: "boot-2", Address: "10.0.0.5"},
		{MACs: agent.MACs, BootID: "boot-1", Address: "10.0.0.66"},
		{MACs: agent.MACs, Address: "10.0.0.66"},
	} {
		_, err := s.Lookup(ctx, other)
		require.ErrorAs(t, err, &ce)
		assert.Equal(t, CodeForbidden, ce.Code)
		assert.ErrorIs(t, err, ErrSecondClaimant)
	}
	_, err = s.Heartbeat(ctx, n.UUID, "10.0.0.5", &protocol.Heartbeat{AgentToken: "forged", BootID: "boot-1"})
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, CodeUnauthorized, ce.Code)
	_, err = s.Heartbeat(ctx, n.UUID, "10.0.0.66", &protocol.Heartbeat{AgentToken: token, BootID: "boot-1"})
	assert.ErrorIs(t, err, ErrSecondClaimant, "the token used from another address")
	resp, err := s.Heartbeat(ctx, n.UUID, "10.0.0.5", &protocol.Heartbeat{AgentToken: token, BootID: "boot-1"})
	require.NoError(t, err)
	assert.True(t, resp.SendSteps, "no catalogue cached yet")

	got, err := st.GetNode(ctx, n.UUID)
	require.NoError(t, err)
	a := got.Operation.Agent
	assert.Equal(t, token, a.Token, "the real agent keeps its token")
	assert.Equal(t, "boot-1", a.BootID)
	require.Len(t, a.Claims, 4)
	assert.Equal(t, store.Claim{At: a.Claims[3].At, Via: "heartbeat", Address: "10.0.0.66", BootID: "boot-1",
		HolderAddress: "10.0.0.5", HolderBootID: "boot-1"}, a.Claims[3])
	events, err := st.ListEvents(ctx, n.UUID, 0)
	require.NoError(t, err)
	warnings := 0
	for _, e := range events {
		if e.Severity == "WARNING" {
			warnings++
			assert.Contains(t, e.Event, "held by 10.0.0.5 (boot boot-1)")
		}
	}
	assert.Equal(t, 4, warnings, "each refused claimant is in the history with both addresses")

	// An operator reset (the node was rebooted by hand) lets the next
	// lookup have a token, and is recorded.
	require.NoError(t, s.ResetAgentToken(ctx, n.UUID))
	fresh, err := s.Lookup(ctx, LookupRequest{NodeUUID: n.UUID, BootID: "boot-3", Address: "10.0.0.5"})
	require.NoError(t, err)
	assert.NotEmpty(t, fresh.Config.AgentToken)
	assert.NotEqual(t, token, fresh.Config.AgentToken)
	_, err = s.Heartbeat(ctx, n.UUID, "10.0.0.5", &protocol.Heartbeat{AgentToken: token, BootID: "boot-1"})
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, CodeUnauthorized, ce.Code, "the old token is dead")
}

// The iPXE script carries a nonce once per controller-initiated boot; the
// lookup that presents it uses it up.
func TestBootNonceIsSingleUse(t *testing.T) {
	ctx := context.Background()
	st := openSQLite(t)
	s, _ := newSessions(st)
	n := sessionNode(t, st, "52:54:00:00:00:04")
	nonce, err := s.BootNonce(ctx, n.UUID)
	require.NoError(t, err)
	require.NotEmpty(t, nonce)
	second, err := s.BootNonce(ctx, n.UUID)
	require.NoError(t, err)
	assert.Empty(t, second, "a second fetch of the script gets no nonce")

	_, err = s.Lookup(ctx, LookupRequest{NodeUUID: n.UUID, BootID: "b", Address: "10.0.0.9"})
	var ce *Error
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, CodeForbidden, ce.Code, "no nonce")
	lr, err := s.Lookup(ctx, LookupRequest{NodeUUID: n.UUID, BootID: "b", Address: "10.0.0.5", Nonce: nonce})
	require.NoError(t, err)
	assert.NotEmpty(t, lr.Config.AgentToken)
	_, err = s.Lookup(ctx, LookupRequest{NodeUUID: n.UUID, BootID: "x", Address: "10.0.0.9", Nonce: nonce})
	assert.ErrorIs(t, err, ErrSecondClaimant, "the nonce used twice")
	got, err := st.GetNode(ctx, n.UUID)
	require.NoError(t, err)
	assert.Empty(t, got.Operation.Agent.BootNonce, "used up")
}

func TestLookupRefusals(t *testing.T) {
	ctx := context.Background()
	st := openSQLite(t)
	s, _ := newSessions(st)
	n := sessionNode(t, st, "52:54:00:00:00:02")
	_, err := s.BootNonce(ctx, n.UUID)
	require.NoError(t, err)
	resting := storetest.NewNode("")
	resting.Driver, resting.ProvisionState = "script", string(state.Available)
	require.NoError(t, st.CreateNode(ctx, resting))
	unbooted := storetest.NewNode("")
	unbooted.Driver, unbooted.ProvisionState = "script", string(state.Cleaning)
	require.NoError(t, st.CreateNode(ctx, unbooted))

	for _, tc := range []struct {
		name        string
		macs        []string
		node, nonce string
		code        Code
	}{
		{"unknown MAC", []string{"52:54:00:99:99:99"}, "", "", CodeNotFound},
		{"no valid MAC", []string{"nonsense"}, "", "", CodeInvalid},
		{"network-booted node without its nonce", []string{"52:54:00:00:00:02"}, "", "", CodeForbidden},
		{"network-booted node with another nonce", nil, n.UUID, "guess", CodeForbidden},
		{"node not expecting an agent", nil, resting.UUID, "", CodeNotFound},
		{"node the controller has not booted yet", nil, unbooted.UUID, "", CodeNotFound},
	} {
		_, err := s.Lookup(ctx, LookupRequest{MACs: tc.macs, NodeUUID: tc.node, BootID: "boot", Nonce: tc.nonce})
		var ce *Error
		require.ErrorAs(t, err, &ce, tc.name)
		assert.Equal(t, tc.code, ce.Code, tc.name)
	}
	got, err := st.GetNode(ctx, n.UUID)
	require.NoError(t, err)
	assert.Empty(t, got.Operation.Agent.Token, "no refused lookup got a token")
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
