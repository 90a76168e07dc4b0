package conductor

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/controller/state"
	"github.com/anvil-metal/anvil/controller/store"
	"github.com/anvil-metal/anvil/controller/store/storetest"
	"github.com/anvil-metal/anvil/protocol"
)

// bootingNode is sessionNode whose boot the controller started with a
// nonce delivered by via ("" for none), as bootRamdisk stores it.
func bootingNode(t *testing.T, st store.Store, mac, via string) *store.Node {
	t.Helper()
	n := sessionNode(t, st, mac)
	got, err := store.MutateNode(context.Background(), st, n.UUID, func(m *store.Node) error {
		newBoot(&m.Operation.Agent, via, time.Now())
		return nil
	})
	require.NoError(t, err)
	return got
}

func agentOf(t *testing.T, st store.Store, id string) store.AgentSession {
	t.Helper()
	n, err := st.GetNode(context.Background(), id)
	require.NoError(t, err)
	return n.Operation.Agent
}

func codeOf(t *testing.T, err error) Code {
	t.Helper()
	var ce *Error
	require.ErrorAs(t, err, &ce)
	return ce.Code
}

func historyOf(t *testing.T, st store.Store, id string) []*store.Event {
	t.Helper()
	events, err := st.ListEvents(context.Background(), id, 0)
	require.NoError(t, err)
	return events
}

// Without a boot path of the controller's (no nonce), the first lookup of
// the boot gets the token; the same agent asking again gets none (it
// holds it). Anybody else with a claim on the boot — a lookup from another
// boot or address, the token from elsewhere — is a second claimant: the
// controller cannot tell which of the two is the machine, so the token is
// revoked at once and the operation is marked to stop.
func TestSecondClaimantEndsTheBootsTrust(t *testing.T) {
	agent := LookupRequest{MACs: []string{"52:54:00:00:00:01"}, BootID: "boot-1", Address: "10.0.0.5"}
	for _, tc := range []struct {
		name  string
		claim func(s *sessions, n *store.Node, token string) error
		via   string
	}{
		{"lookup from another boot", func(s *sessions, n *store.Node, _ string) error {
			_, err := s.Lookup(context.Background(), LookupRequest{NodeUUID: n.UUID, BootID: "boot-2", Address: "10.0.0.5"})
			return err
		}, "lookup"},
		{"lookup from another address", func(s *sessions, _ *store.Node, _ string) error {
			_, err := s.Lookup(context.Background(), LookupRequest{MACs: agent.MACs, BootID: "boot-1", Address: "10.0.0.66"})
			return err
		}, "lookup"},
		{"the token from another boot", func(s *sessions, n *store.Node, token string) error {
			_, err := s.Heartbeat(context.Background(), n.UUID, "10.0.0.66", &protocol.Heartbeat{AgentToken: token, BootID: "boot-x"})
			return err
		}, "heartbeat"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			st := openSQLite(t)
			s, kicked := newSessions(st)
			n := sessionNode(t, st, "52:54:00:00:00:01")

			first, err := s.Lookup(ctx, agent)
			require.NoError(t, err)
			token := first.Config.AgentToken
			require.NotEmpty(t, token)
			_, err = s.Heartbeat(ctx, n.UUID, agent.Address, &protocol.Heartbeat{AgentToken: token, BootID: agent.BootID})
			require.NoError(t, err)
			_, err = s.Lookup(ctx, agent)
			assert.Equal(t, CodeConflict, codeOf(t, err), "the agent of this boot holds its token and used it; it is not handed out twice")
			assert.NotErrorIs(t, err, ErrSecondClaimant)

			err = tc.claim(s, n, token)
			assert.ErrorIs(t, err, ErrSecondClaimant)
			assert.Equal(t, CodeForbidden, codeOf(t, err))
			assert.NotContains(t, err.Error(), n.UUID, "a stranger learns nothing about the node")
			a := agentOf(t, st, n.UUID)
			assert.Empty(t, a.Token, "revoked at once: neither party can act any more")
			require.NotNil(t, a.Alarm)
			assert.Equal(t, tc.via, a.Alarm.Via)
			assert.Equal(t, "10.0.0.5", a.Alarm.HolderAddress)
			assert.Contains(t, *kicked, n.UUID, "the engine is woken to stop the operation")

			_, err = s.Heartbeat(ctx, n.UUID, "10.0.0.5", &protocol.Heartbeat{AgentToken: token, BootID: "boot-1"})
			assert.Equal(t, CodeUnauthorized, codeOf(t, err), "the first claimant's token is dead too")
			_, err = s.Lookup(ctx, LookupRequest{MACs: agent.MACs, BootID: "boot-9", Address: "10.0.0.7"})
			assert.ErrorIs(t, err, ErrNotTrusted, "nobody gets a token while the operation stops")
			errors := 0
			for _, e := range historyOf(t, st, n.UUID) {
				if e.Severity == "ERROR" {
					errors++
					assert.Contains(t, e.Event, "SECURITY: second agent claimant: "+tc.via)
				}
			}
			assert.Equal(t, 1, errors, "the alarm is in the history once")
		})
	}
}

// A boot whose script the controller serves has a nonce from the moment
// the controller starts it: a lookup without it gets nothing, however
// early, and a stranger polling costs the node a bounded history. The
// script carries the nonce to one address (again to the same one, a
// firmware retry); a fetch from elsewhere, or after the agent looked up,
// stops the operation.
func TestNetbootNonce(t *testing.T) {
	ctx := context.Background()
	st := openSQLite(t)
	s, _ := newSessions(st)
	n := bootingNode(t, st, "52:54:00:00:00:04", store.NonceNetboot)
	require.NotEmpty(t, n.Operation.Agent.BootNonce, "minted when the boot starts, before any fetch")
	before := n.Revision

	for i := range 200 { // a stranger polling lookup before the node fetched its script
		_, err := s.Lookup(ctx, LookupRequest{MACs: []string{"52:54:00:00:00:04"}, BootID: "stranger", Address: "10.0.0.66", Nonce: []string{"", "guess"}[i%2]})
		require.ErrorIs(t, err, ErrNotTrusted)
		assert.NotErrorIs(t, err, ErrSecondClaimant, "a request without the secret does not stop the operation")
	}
	got, err := st.GetNode(ctx, n.UUID)
	require.NoError(t, err)
	assert.Equal(t, before, got.Revision, "refused lookups write nothing to the node")
	assert.Empty(t, got.Operation.Agent.Token)
	assert.Len(t, historyOf(t, st, n.UUID), refusalBudget.Burst, "the history holds the budget's burst, not 200 lines")

	nonce, err := s.BootNonce(ctx, n.UUID, BootFetch{Via: "ipxe", Address: "10.0.0.5"})
	require.NoError(t, err)
	assert.Equal(t, n.Operation.Agent.BootNonce, nonce)
	again, err := s.BootNonce(ctx, n.UUID, BootFetch{Via: "ipxe", Address: "10.0.0.5"})
	require.NoError(t, err)
	assert.Equal(t, nonce, again, "the same address fetching again (a firmware retry) gets the same nonce")
	lr, err := s.Lookup(ctx, LookupRequest{NodeUUID: n.UUID, BootID: "b", Address: "10.0.0.5", Nonce: nonce})
	require.NoError(t, err)
	assert.NotEmpty(t, lr.Config.AgentToken)

	_, err = s.BootNonce(ctx, n.UUID, BootFetch{Via: "ipxe", Address: "10.0.0.5"})
	assert.ErrorIs(t, err, ErrNotTrusted, "the same address after the lookup gets nothing (over TFTP one forged datagram would do): refused, nothing stops")
	require.Nil(t, agentOf(t, st, n.UUID).Alarm)
	_, err = s.BootNonce(ctx, n.UUID, BootFetch{Via: "ipxe", Address: "10.0.0.66"})
	assert.ErrorIs(t, err, ErrSecondClaimant, "another address after the lookup: the machine booted again, or somebody else")
	require.NotNil(t, agentOf(t, st, n.UUID).Alarm)

	t.Run("a second address before the lookup", func(t *testing.T) {
		n := bootingNode(t, st, "52:54:00:00:00:05", store.NonceNetboot)
		_, err := s.BootNonce(ctx, n.UUID, BootFetch{Via: "ipxe", Address: "10.0.0.66"})
		require.NoError(t, err, "the stranger came first")
		_, err = s.BootNonce(ctx, n.UUID, BootFetch{Via: "ipxe", Address: "10.0.0.5"})
		assert.ErrorIs(t, err, ErrSecondClaimant, "the machine's own fetch exposes it")
		a := agentOf(t, st, n.UUID)
		assert.Equal(t, "10.0.0.66", a.Alarm.HolderAddress)
		_, err = s.Lookup(ctx, LookupRequest{NodeUUID: n.UUID, BootID: "s", Address: "10.0.0.66", Nonce: a.BootNonce})
		assert.ErrorIs(t, err, ErrNotTrusted, "the stranger's nonce gets nothing now")
	})
	t.Run("the nonce used twice", func(t *testing.T) {
		n := bootingNode(t, st, "52:54:00:00:00:06", store.NonceNetboot)
		nonce := n.Operation.Agent.BootNonce
		_, err := s.Lookup(ctx, LookupRequest{NodeUUID: n.UUID, BootID: "a", Address: "10.0.0.5", Nonce: nonce})
		require.NoError(t, err)
		_, err = s.Lookup(ctx, LookupRequest{NodeUUID: n.UUID, BootID: "x", Address: "10.0.0.9", Nonce: nonce})
		assert.ErrorIs(t, err, ErrSecondClaimant)
	})
}

// fakeLeases is the DHCP lease table of a full-mode boot service.
type fakeLeases map[string]string

func (f fakeLeases) LeasedTo(_ context.Context, macs []string, _ time.Time) ([]netip.Addr, error) {
	var out []netip.Addr
	for _, m := range macs {
		if ip, ok := f[m]; ok {
			out = append(out, netip.MustParseAddr(ip))
		}
	}
	return out, nil
}

// With the controller's own DHCP server giving addresses, the script's
// nonce goes only to an address leased to the node's ports: a stranger
// elsewhere on the network, before or after the node's firmware got its
// lease, is refused without stopping anything.
func TestNetbootNonceBoundToTheLease(t *testing.T) {
	ctx := context.Background()
	st := openSQLite(t)
	s, _ := newSessions(st)
	s.cfg.Leases = fakeLeases{"52:54:00:00:00:07": "10.0.0.107"}
	n := bootingNode(t, st, "52:54:00:00:00:07", store.NonceNetboot)
	_, err := s.BootNonce(ctx, n.UUID, BootFetch{Via: "ipxe", Address: "10.0.0.66"})
	assert.ErrorIs(t, err, ErrNotTrusted)
	assert.Nil(t, agentOf(t, st, n.UUID).Alarm)
	assert.Contains(t, historyOf(t, st, n.UUID)[0].Event, "the boot service leased the node's port 10.0.0.107, not 10.0.0.66")
	nonce, err := s.BootNonce(ctx, n.UUID, BootFetch{Via: "grub", Address: "10.0.0.107"})
	require.NoError(t, err)
	assert.NotEmpty(t, nonce)

	// Before the node's firmware got its address, nobody gets the nonce:
	// a stranger fetching the script first learns nothing.
	unleased := bootingNode(t, st, "52:54:00:00:00:08", store.NonceNetboot)
	_, err = s.BootNonce(ctx, unleased.UUID, BootFetch{Via: "ipxe", Address: "10.0.0.66"})
	assert.ErrorIs(t, err, ErrNotTrusted)
	assert.Contains(t, historyOf(t, st, unleased.UUID)[0].Event, "the boot service has leased no address to the node's ports")
	s.cfg.Leases = fakeLeases{"52:54:00:00:00:07": "10.0.0.107", "52:54:00:00:00:08": "10.0.0.108"}
	nonce, err = s.BootNonce(ctx, unleased.UUID, BootFetch{Via: "ipxe", Address: "10.0.0.108"})
	require.NoError(t, err, "once the firmware has its lease")
	assert.NotEmpty(t, nonce)
	assert.Nil(t, agentOf(t, st, unleased.UUID).Alarm, "the stranger's refused fetch made it no claimant")
}

// A virtual-media boot's nonce travels in the ISO, which the BMC fetches
// as often as it likes; the iPXE script of such a node carries none.
func TestVirtualMediaNonce(t *testing.T) {
	ctx := context.Background()
	st := openSQLite(t)
	s, _ := newSessions(st)
	n := bootingNode(t, st, "52:54:00:00:00:09", store.NonceVirtualMedia)
	for range 3 {
		nonce, err := s.BootNonce(ctx, n.UUID, BootFetch{Via: "vmedia", Address: "10.1.0.7"})
		require.NoError(t, err)
		assert.Equal(t, n.Operation.Agent.BootNonce, nonce)
	}
	_, err := s.BootNonce(ctx, n.UUID, BootFetch{Via: "ipxe", Address: "10.0.0.66"})
	assert.ErrorIs(t, err, ErrNotTrusted)
	_, err = s.Lookup(ctx, LookupRequest{NodeUUID: n.UUID, BootID: "b", Address: "10.0.0.5"})
	assert.ErrorIs(t, err, ErrNotTrusted, "the nonce is required from the start")
	lr, err := s.Lookup(ctx, LookupRequest{NodeUUID: n.UUID, BootID: "b", Address: "10.0.0.5", Nonce: n.Operation.Agent.BootNonce})
	require.NoError(t, err)
	assert.NotEmpty(t, lr.Config.AgentToken)
}

// Refusals to unauthenticated callers name no node and no state.
func TestLookupRefusalsSayNothingAboutTheNode(t *testing.T) {
	ctx := context.Background()
	st := openSQLite(t)
	s, _ := newSessions(st)
	booting := bootingNode(t, st, "52:54:00:00:00:02", store.NonceNetboot)
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
		{"network-booted node with another nonce", nil, booting.UUID, "guess", CodeForbidden},
		{"node not expecting an agent", nil, resting.UUID, "", CodeNotFound},
		{"node the controller has not booted yet", nil, unbooted.UUID, "", CodeNotFound},
		{"no such node", nil, "00000000-0000-0000-0000-000000000000", "", CodeNotFound},
	} {
		_, err := s.Lookup(ctx, LookupRequest{MACs: tc.macs, NodeUUID: tc.node, BootID: "boot", Nonce: tc.nonce})
		assert.Equal(t, tc.code, codeOf(t, err), tc.name)
		for _, secret := range []string{booting.UUID, resting.UUID, unbooted.UUID, "available", "cleaning", "clean wait"} {
			assert.NotContains(t, err.Error(), secret, tc.name)
		}
	}
	assert.Empty(t, agentOf(t, st, booting.UUID).Token, "no refused lookup got a token")
}

// The engine stops an operation whose boot had a second claimant: failed,
// in maintenance with the alarm as the reason, the agent torn down and
// the node powered off; the claim stays on the node.
func TestSecurityStop(t *testing.T) {
	drv := &scriptDriver{}
	e := start(t, drv, Config{}, nil)
	ctx := context.Background()
	n := storetest.NewNode("")
	n.Driver, n.ProvisionState = "script", string(state.CleanWait)
	n.PowerState = strp(PowerOn)
	n.Operation.Agent = store.AgentSession{Token: "t", BootID: "b", Address: "10.0.0.5",
		Await: &store.Await{Reason: "boot", Since: time.Now()}}
	require.NoError(t, e.st.CreateNode(ctx, n))
	cl := &store.Claim{At: time.Now(), Via: "lookup", Address: "10.0.0.66", BootID: "x", HolderAddress: "10.0.0.5", HolderBootID: "b"}
	_, err := store.MutateNode(ctx, e.st, n.UUID, func(m *store.Node) error {
		m.Operation.Agent.Alarm = cl
		m.Operation.Agent.AddClaim(*cl)
		return nil
	})
	require.NoError(t, err)
	e.c.Kick(n.UUID)

	got := e.wait(t, n.UUID, state.CleanFailed)
	require.NotNil(t, got.LastError)
	assert.Contains(t, *got.LastError, "SECURITY ALARM in clean wait: second agent claimant: lookup from 10.0.0.66 (boot x) after this boot's secret went to 10.0.0.5 (boot b)")
	assert.True(t, got.Maintenance)
	assert.Equal(t, got.LastError, got.MaintenanceReason)
	assert.Equal(t, PowerOff, deref(got.PowerState), "powered off")
	a := got.Operation.Agent
	assert.Empty(t, a.Token)
	assert.Nil(t, a.Alarm, "handled")
	require.Len(t, a.Claims, 1, "kept on the node for the operator")
}

// Issue #30, finding 2, replayed on the controller's clock: a refused
// stranger looking up every 10 ms for 61 s (6,100 lookups) adds the
// budget's burst and one line a minute to the node's history, and the
// rest is counted.
func TestRefusedStrangerForAMinute(t *testing.T) {
	ctx := context.Background()
	st := openSQLite(t)
	now := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	cfg := Config{Host: "s", Now: func() time.Time { return now }}
	cfg.defaults()
	suppressed := 0
	cfg.Suppressed = func(what string, n int) {
		assert.Equal(t, "agent", what)
		suppressed += n
	}
	s := newSessionService(&core{cfg: cfg, st: st, drivers: map[string]Driver{}, log: cfg.Logger}, func(string) {})
	n := bootingNode(t, st, "52:54:00:00:00:0a", store.NonceNetboot)
	for range 6100 {
		_, err := s.Lookup(ctx, LookupRequest{MACs: []string{"52:54:00:00:00:0a"}, BootID: "stranger", Address: "10.0.0.66"})
		require.ErrorIs(t, err, ErrNotTrusted)
		now = now.Add(10 * time.Millisecond)
	}
	events := historyOf(t, st, n.UUID)
	assert.Len(t, events, refusalBudget.Burst+1, "a burst, then one a minute")
	assert.Contains(t, events[len(events)-1].Event, "more refusals since the last recorded one were not recorded")
	assert.Equal(t, 6100-len(events), suppressed, "everything left out is counted")
}

// The same machine seen over IPv4 and as an IPv4-mapped IPv6 address is
// one address: its retry gets the nonce again, no alarm.
func TestBootNonceAddressesCompareCanonically(t *testing.T) {
	ctx := context.Background()
	st := openSQLite(t)
	s, _ := newSessions(st)
	n := bootingNode(t, st, "52:54:00:00:00:0b", store.NonceNetboot)
	first, err := s.BootNonce(ctx, n.UUID, BootFetch{Via: "ipxe", Address: "10.0.0.5"})
	require.NoError(t, err)
	again, err := s.BootNonce(ctx, n.UUID, BootFetch{Via: "ipxe", Address: "::ffff:10.0.0.5"})
	require.NoError(t, err)
	assert.Equal(t, first, again)
	assert.Nil(t, agentOf(t, st, n.UUID).Alarm)
}

// Issue #30 review: an alarm raised while the worker is finishing the
// operation (the impostor reported the last step done; the worker is
// powering the node off) wins: the finishing transition is stale, and the
// operation stops instead of ending in available.
func TestAlarmBeatsAFinishingTransition(t *testing.T) {
	e := start(t, &scriptDriver{}, Config{}, nil)
	ctx := context.Background()
	n := storetest.NewNode("")
	n.Driver, n.ProvisionState = "script", string(state.CleanWait)
	cl := store.Claim{At: time.Now(), Via: "boot ipxe", Address: "10.0.0.5", HolderAddress: "10.0.0.66"}
	n.Operation.Agent = store.AgentSession{Booted: true, Alarm: &cl, Claims: []store.Claim{cl}}
	require.NoError(t, e.st.CreateNode(ctx, n))

	_, err := e.c.engine.transition(ctx, n.UUID, state.CleanWait, state.EvResume, nil)
	require.ErrorIs(t, err, errStale, "no transition but the security stop while an alarm stands")
	got := e.wait(t, n.UUID, state.CleanFailed)
	assert.Contains(t, *got.LastError, "SECURITY ALARM in clean wait")
	assert.Nil(t, got.Operation.Agent.Alarm)
}

// Issue #30 review: without a nonce, a step that asks for a reboot must
// not turn the agent of the ending boot into the new boot's token holder
// (it looks up again the moment its heartbeat is refused), which would
// make the rebooted node's own agent a second claimant.
func TestPreviousBootsAgentIsNoClaimant(t *testing.T) {
	ctx := context.Background()
	st := openSQLite(t)
	s, _ := newSessions(st)
	n := bootingNode(t, st, "52:54:00:00:00:0c", "")
	old := LookupRequest{MACs: []string{"52:54:00:00:00:0c"}, BootID: "boot-1", Address: "10.0.0.5"}
	_, err := s.Lookup(ctx, old)
	require.NoError(t, err)
	_, err = store.MutateNode(ctx, st, n.UUID, func(m *store.Node) error { // the controller reboots the node
		newBoot(&m.Operation.Agent, "", time.Now())
		return nil
	})
	require.NoError(t, err)
	_, err = s.Lookup(ctx, old)
	assert.ErrorIs(t, err, ErrNotTrusted, "the dying agent gets nothing")
	lr, err := s.Lookup(ctx, LookupRequest{MACs: old.MACs, BootID: "boot-2", Address: "10.0.0.5"})
	require.NoError(t, err, "the new boot's agent is the first of its boot")
	assert.NotEmpty(t, lr.Config.AgentToken)
	assert.Nil(t, agentOf(t, st, n.UUID).Alarm)
}

// An operator's token reset of a node booting from virtual media keeps the
// nonce: the ISO the BMC serves holds it, and is made once per boot.
func TestResetKeepsTheVirtualMediaNonce(t *testing.T) {
	ctx := context.Background()
	st := openSQLite(t)
	s, _ := newSessions(st)
	n := bootingNode(t, st, "52:54:00:00:00:0d", store.NonceVirtualMedia)
	n.Interfaces.Boot = BootVirtualMedia
	_, err := store.MutateNode(ctx, st, n.UUID, func(m *store.Node) error { m.Interfaces.Boot = BootVirtualMedia; return nil })
	require.NoError(t, err)
	nonce := n.Operation.Agent.BootNonce
	require.NoError(t, s.ResetAgentToken(ctx, n.UUID))
	assert.Equal(t, nonce, agentOf(t, st, n.UUID).BootNonce)
	_, err = s.Lookup(ctx, LookupRequest{NodeUUID: n.UUID, BootID: "b", Address: "10.0.0.5", Nonce: nonce})
	require.NoError(t, err)
}

// The agent of this boot that moves (a NIC failover, a new DHCP address,
// a dual-stack URL) is still its agent: the move is recorded, nothing
// stops.
func TestAgentThatMovesKeepsItsSession(t *testing.T) {
	ctx := context.Background()
	st := openSQLite(t)
	s, _ := newSessions(st)
	n := sessionNode(t, st, "52:54:00:00:00:0e")
	lr, err := s.Lookup(ctx, LookupRequest{MACs: []string{"52:54:00:00:00:0e"}, BootID: "boot-1", Address: "10.0.0.5"})
	require.NoError(t, err)
	_, err = s.Heartbeat(ctx, n.UUID, "10.0.0.6", &protocol.Heartbeat{AgentToken: lr.Config.AgentToken, BootID: "boot-1", AgentVersion: "1"})
	require.NoError(t, err)
	a := agentOf(t, st, n.UUID)
	assert.Nil(t, a.Alarm)
	assert.Equal(t, "10.0.0.6", a.Address)
	assert.Contains(t, historyOf(t, st, n.UUID)[len(historyOf(t, st, n.UUID))-1].Event, "now heartbeats from 10.0.0.6 (it looked up from 10.0.0.5)")
}

// An operator's reboot of a node whose ramdisk is up starts a new boot:
// the agent that comes back is not a claimant of the old one.
func TestOperatorRebootStartsANewBoot(t *testing.T) {
	e := start(t, &scriptDriver{}, Config{}, nil)
	ctx := context.Background()
	n := storetest.NewNode("")
	n.Driver, n.ProvisionState = "script", string(state.DeployWait)
	n.Operation.Agent = store.AgentSession{Booted: true, Token: "t", BootID: "boot-1", Address: "10.0.0.5"}
	require.NoError(t, e.st.CreateNode(ctx, n))
	require.NoError(t, e.c.SetPower(ctx, n.UUID, Rebooting))
	a := agentOf(t, e.st, n.UUID)
	assert.Empty(t, a.Token)
	assert.Equal(t, "boot-1", a.PreviousBootID)
	lr, err := e.c.Lookup(ctx, LookupRequest{NodeUUID: n.UUID, BootID: "boot-2", Address: "10.0.0.5"})
	require.NoError(t, err, "the rebooted node's agent is the first of its boot")
	assert.NotEmpty(t, lr.Config.AgentToken)
}

// A refused lookup that names the node by its name is recorded in that
// node's history (under its UUID), not under the name.
func TestRefusalByNameGoesToTheNodesHistory(t *testing.T) {
	ctx := context.Background()
	st := openSQLite(t)
	s, _ := newSessions(st)
	n := bootingNode(t, st, "52:54:00:00:00:0f", store.NonceNetboot)
	_, err := store.MutateNode(ctx, st, n.UUID, func(m *store.Node) error { m.Name = strp("named-node"); return nil })
	require.NoError(t, err)
	_, err = s.Lookup(ctx, LookupRequest{NodeUUID: "named-node", BootID: "b", Address: "10.0.0.66"})
	require.ErrorIs(t, err, ErrNotTrusted)
	events := historyOf(t, st, n.UUID)
	require.NotEmpty(t, events)
	assert.Contains(t, events[len(events)-1].Event, "lookup from 10.0.0.66 (boot b) refused")
	byName, err := st.ListEvents(ctx, "named-node", 0)
	require.NoError(t, err)
	assert.Empty(t, byName)
}

// A node a driver step rebooted out of its ramdisk answers no lookup: a
// ramdisk that comes up by itself (a server booting from the network
// first) neither gets a token nor raises an alarm, and the old agent's
// token is dead; the controller's own boot of the ramdisk opens it again.
func TestLeftRamdiskAnswersNoLookup(t *testing.T) {
	ctx := context.Background()
	st := openSQLite(t)
	s, _ := newSessions(st)
	n := storetest.NewNode("")
	n.Driver, n.ProvisionState = "script", string(state.Cleaning)
	n.Operation.Agent = store.AgentSession{Token: "old-token", BootID: "boot-1", Address: "10.0.0.5", Booted: true}
	leaveRamdisk(&n.Operation.Agent, time.Now())
	require.NoError(t, st.CreateNode(ctx, n))

	_, err := s.Lookup(ctx, LookupRequest{NodeUUID: n.UUID, BootID: "boot-2", Address: "10.0.0.5"})
	assert.Equal(t, CodeNotFound, codeOf(t, err), "quietly: nothing expects an agent")
	a := agentOf(t, st, n.UUID)
	assert.Empty(t, a.Token)
	assert.Nil(t, a.Alarm, "not a second claimant")
	assert.Equal(t, "boot-1", a.PreviousBootID)
	assert.True(t, a.Booted, "the operation's end still tears the ramdisk boot down")
	_, err = s.Heartbeat(ctx, n.UUID, "10.0.0.5", &protocol.Heartbeat{AgentToken: "old-token", BootID: "boot-1", Fingerprint: "fp"})
	require.Error(t, err, "the old agent's token is revoked")

	// The controller boots the ramdisk again (bootRamdisk): its first
	// write keeps the stray ramdisk refused until the node is reset ...
	_, err = store.MutateNode(ctx, st, n.UUID, func(m *store.Node) error {
		left := m.Operation.Agent.LeftRamdisk
		newBoot(&m.Operation.Agent, "", time.Now())
		m.Operation.Agent.LeftRamdisk = left
		return nil
	})
	require.NoError(t, err)
	_, err = s.Lookup(ctx, LookupRequest{NodeUUID: n.UUID, BootID: "boot-2", Address: "10.0.0.5"})
	assert.Equal(t, CodeNotFound, codeOf(t, err), "the stray ramdisk, before the reset")
	assert.Empty(t, agentOf(t, st, n.UUID).Token)
	// ... and once the node was reset (awaitBoot), the new boot's agent
	// looks up (without a nonce, as this node boots: the first lookup)
	_, err = store.MutateNode(ctx, st, n.UUID, func(m *store.Node) error {
		awaitBoot(m, &store.Await{Reason: "boot", Since: time.Now()})
		return nil
	})
	require.NoError(t, err)
	lr, err := s.Lookup(ctx, LookupRequest{NodeUUID: n.UUID, BootID: "boot-3", Address: "10.0.0.5"})
	require.NoError(t, err)
	assert.NotEmpty(t, lr.Config.AgentToken)
}

// TestLookupAnswerLostIsLookedUpAgain: a controller killed between the
// write that issues the token and its answer (#38's soak and the SIGKILL
// test found nodes stuck in clean wait this way) leaves an agent without a
// token. Its next lookup, same boot, address and nonce, before any
// heartbeat, gets a new token and the first is void; should the first turn
// up after all, its heartbeat is a second claimant. After a heartbeat with
// the token it is never issued again, and without a nonce never twice.
func TestLookupAnswerLostIsLookedUpAgain(t *testing.T) {
	ctx := context.Background()
	st := openSQLite(t)
	s, _ := newSessions(st)
	n := bootingNode(t, st, "52:54:00:00:00:01", store.NonceNetboot)
	agent := LookupRequest{MACs: []string{"52:54:00:00:00:01"}, BootID: "boot-1", Address: "10.0.0.5", Nonce: n.Operation.Agent.BootNonce}

	lost, err := s.Lookup(ctx, agent)
	require.NoError(t, err)
	again, err := s.Lookup(ctx, agent)
	require.NoError(t, err, "the answer to the first lookup never arrived")
	token := again.Config.AgentToken
	require.NotEmpty(t, token)
	assert.NotEqual(t, lost.Config.AgentToken, token, "a new token")
	assert.Equal(t, token, agentOf(t, st, n.UUID).Token)

	_, err = s.Heartbeat(ctx, n.UUID, agent.Address, &protocol.Heartbeat{AgentToken: token, BootID: agent.BootID})
	require.NoError(t, err)
	_, err = s.Lookup(ctx, agent)
	assert.Equal(t, CodeConflict, codeOf(t, err), "used: never issued again")
	assert.Equal(t, token, agentOf(t, st, n.UUID).Token, "the agent keeps its token")

	_, err = s.Heartbeat(ctx, n.UUID, agent.Address, &protocol.Heartbeat{AgentToken: lost.Config.AgentToken, BootID: agent.BootID})
	assert.ErrorIs(t, err, ErrSecondClaimant, "the void token turned up: two parties hold this boot's secret")
	a := agentOf(t, st, n.UUID)
	assert.Empty(t, a.Token, "revoked")
	require.NotNil(t, a.Alarm)

	// without a nonce, boot id and address are all a stranger needs: no
	// second token
	plain := sessionNode(t, st, "52:54:00:00:00:02")
	bare := LookupRequest{MACs: []string{"52:54:00:00:00:02"}, BootID: "boot-9", Address: "10.0.0.9"}
	_, err = s.Lookup(ctx, bare)
	require.NoError(t, err)
	_, err = s.Lookup(ctx, bare)
	assert.Equal(t, CodeConflict, codeOf(t, err))
	assert.Empty(t, agentOf(t, st, plain.UUID).VoidTokenSum)
}
