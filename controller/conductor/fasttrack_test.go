package conductor

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/controller/state"
	"github.com/anvil-metal/anvil/controller/store"
	"github.com/anvil-metal/anvil/controller/store/sqlite"
	"github.com/anvil-metal/anvil/controller/store/storetest"
	"github.com/anvil-metal/anvil/protocol"
)

// TestFastTrackDecision: the one function that decides between the
// running agent and a full boot, with the reason either way.
func TestFastTrackDecision(t *testing.T) {
	now := time.Date(2026, 11, 29, 4, 0, 0, 0, time.UTC)
	on := FastTrackConfig{Enabled: true, Timeout: 300 * time.Second}
	idle := func(mut func(n *store.Node)) *store.Node {
		n := storetest.NewNode("")
		n.Interfaces.Deploy = "direct"
		n.ProvisionState, n.PowerState = string(state.Available), strp(PowerOn)
		n.DriverInfo = map[string]any{}
		a := &n.Operation.Agent
		a.Token, a.BootID, a.LastHeartbeat = "tok-1", "boot-1", now.Add(-10*time.Second)
		a.FastTrack = &store.FastTrack{Since: now.Add(-time.Hour), BootID: "boot-1", TokenSum: tokenSum("tok-1")}
		if mut != nil {
			mut(n)
		}
		return n
	}
	for _, tc := range []struct {
		name string
		n    *store.Node
		cfg  FastTrackConfig
		want bool
		why  string
	}{
		{"running agent", idle(nil), on, true, "the agent of boot boot-1 is running (last heartbeat 10s ago)"},
		{"flag off", idle(nil), FastTrackConfig{Timeout: time.Minute}, false, "fast track is off (--fast-track)"},
		{"node override off", idle(func(n *store.Node) { n.DriverInfo["fast_track"] = false }), on, false, "driver_info.fast_track is off for this node"},
		{"node override on, flag off", idle(func(n *store.Node) { n.DriverInfo["fast_track"] = "true" }), FastTrackConfig{Timeout: time.Minute}, true, "is running"},
		{"node override string off", idle(func(n *store.Node) { n.DriverInfo["fast_track"] = "no" }), on, false, "driver_info.fast_track is off"},
		{"heartbeat within timeout", idle(func(n *store.Node) { n.Operation.Agent.LastHeartbeat = now.Add(-299 * time.Second) }), on, true, "is running"},
		{"heartbeat gap beyond timeout", idle(func(n *store.Node) { n.Operation.Agent.LastHeartbeat = now.Add(-301 * time.Second) }), on, false,
			"the agent's last heartbeat was 5m1s ago, beyond the fast-track timeout of 5m0s"},
		{"never heartbeated", idle(func(n *store.Node) { n.Operation.Agent.LastHeartbeat = time.Time{} }), on, false, "never heartbeated"},
		{"boot id changed", idle(func(n *store.Node) { n.Operation.Agent.BootID = "boot-2" }), on, false, "the agent's boot changed (boot-2, the agent left running was boot boot-1)"},
		{"token changed (new claimant looked up)", idle(func(n *store.Node) { n.Operation.Agent.Token = "tok-2" }), on, false, "token is not the one issued"},
		{"token gone (reset)", idle(func(n *store.Node) { n.Operation.Agent.Token = "" }), on, false, "token is not the one issued"},
		{"powered off", idle(func(n *store.Node) { n.PowerState = strp(PowerOff) }), on, false, "the node is power off"},
		{"power unknown", idle(func(n *store.Node) { n.PowerState = nil }), on, false, "the node is (none)"},
		{"no agent left running", idle(func(n *store.Node) { n.Operation.Agent.FastTrack = nil }), on, false, "no agent was left running"},
		{"second claimant", idle(func(n *store.Node) { n.Operation.Agent.Alarm = &store.Claim{Via: "lookup"} }), on, false, "second claimant"},
		{"left the ramdisk", idle(func(n *store.Node) { n.Operation.Agent.LeftRamdisk = true }), on, false, "left the ramdisk"},
		{"not an agent node", idle(func(n *store.Node) { n.Interfaces.Deploy = "fake" }), on, false, "do not use the agent"},
		{"max idle unbounded", idle(nil), FastTrackConfig{Enabled: true, Timeout: time.Minute, MaxIdle: 0}, true, "is running"},
		{"max idle exceeded", idle(nil), FastTrackConfig{Enabled: true, Timeout: time.Minute, MaxIdle: 30 * time.Minute}, false,
			"idle in the ramdisk for 1h0m0s, beyond the maximum of 30m0s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, why := fastTrackDecision(tc.n, now, tc.cfg)
			assert.Equal(t, tc.want, got)
			assert.Contains(t, why, tc.why)
		})
	}
}

// powerLog is a scripted driver that records the power and boot-device
// actions the BMC would see.
type powerLog struct {
	*scriptDriver
	mu      sync.Mutex
	actions []string
}

func (d *powerLog) SetPower(_ context.Context, _ *store.Node, target string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.actions = append(d.actions, "power "+target)
	return nil
}

func (d *powerLog) SetBootDevice(_ context.Context, _ *store.Node, dev string, persistent bool) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.actions = append(d.actions, "boot device "+dev)
	return nil
}

// take returns the actions recorded since the last take.
func (d *powerLog) take() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := d.actions
	d.actions = nil
	return out
}

// testAgent plays the agent of one boot through the session service:
// it looks up once, heartbeats with its catalogue and reports every
// command it is given as succeeded on its next heartbeat.
type testAgent struct {
	t        *testing.T
	c        *Conductor
	node     string
	boot     string
	token    string
	finished *protocol.CommandStatus
	ran      map[string]bool
}

var testCatalogue = &protocol.StepCatalogue{Fingerprint: "fp-1",
	Clean: []protocol.Step{{Interface: "deploy", Step: "erase_devices_metadata", Priority: 99}}}

func (a *testAgent) lookup() error {
	lr, err := a.c.Lookup(context.Background(), LookupRequest{NodeUUID: a.node, BootID: a.boot, Address: "127.0.0.1"})
	if err == nil {
		a.token = lr.Config.AgentToken
	}
	return err
}

func (a *testAgent) beat() error {
	hb := &protocol.Heartbeat{AgentToken: a.token, AgentVersion: "test", BootID: a.boot, Fingerprint: "fp-1", Steps: testCatalogue, Command: a.finished}
	resp, err := a.c.Heartbeat(context.Background(), a.node, "127.0.0.1", hb)
	if err != nil {
		return err
	}
	// Like the agent, it reports a finished command until the controller
	// acknowledges it, and never runs a command id twice.
	if resp.Ack != "" && a.finished != nil && resp.Ack == a.finished.ID {
		a.finished = nil
	}
	if a.ran == nil {
		a.ran = map[string]bool{}
	}
	if cmd := resp.Command; cmd != nil && !a.ran[cmd.ID] {
		a.ran[cmd.ID] = true
		result := []byte(`{}`)
		if cmd.Name == protocol.CmdInventory { // the disk guard's check
			result = []byte(`{"disks":[{"name":"/dev/vda","size":10737418240,"model":"test","vendor":"t","serial":"S1","rotational":false,"read_only":false,"removable":false}]}`)
		}
		a.finished = &protocol.CommandStatus{ID: cmd.ID, Name: cmd.Name, State: protocol.CommandSucceeded, StartedAt: time.Now(), Result: result}
	}
	return nil
}

// until heartbeats (looking up first when it has no token) until the
// node is in want.
func (a *testAgent) until(e *env, want state.State) *store.Node {
	a.t.Helper()
	var n *store.Node
	ok := assert.Eventually(a.t, func() bool {
		if a.token == "" {
			_ = a.lookup()
		} else {
			_ = a.beat()
		}
		var err error
		n, err = e.st.GetNode(context.Background(), a.node)
		require.NoError(a.t, err)
		return n.ProvisionState == string(want) && e.c.Idle()
	}, 5*time.Second, 5*time.Millisecond, "node never reached %s", want)
	if !ok {
		a.t.Fatalf("%s (last error %v), lookup %v, heartbeat %v; history:\n%s", n.ProvisionState, deref(n.LastError), a.lookup(), a.beat(), historyText(a.t, e.st, a.node))
	}
	return n
}

func historyText(t *testing.T, st store.Store, id string) string {
	var lines []string
	for _, ev := range historyOf(t, st, id) {
		lines = append(lines, ev.Event)
	}
	return strings.Join(lines, "\n")
}

func fastTrackNode(t *testing.T, e *env) string {
	n := storetest.NewNode("")
	n.Driver, n.ProvisionState = "script", string(state.Manageable)
	n.Interfaces.Deploy = "direct"
	n.InstanceInfo = map[string]any{"image_source": "http://127.0.0.1/disk.raw", "image_checksum": "sha256:ab"}
	require.NoError(t, e.st.CreateNode(context.Background(), n))
	return n.UUID
}

// provide leaves the agent of the cleaning running; active then starts
// on it: no reboot, no network boot, and the deploy is timed.
func TestFastTrackProvideThenDeploy(t *testing.T) {
	drv := &powerLog{scriptDriver: &scriptDriver{}}
	var timed atomic.Value
	e := start(t, drv, Config{FastTrack: FastTrackConfig{Enabled: true}, DeployTimed: func(path string, boot, steps time.Duration) {
		timed.Store(path)
	}}, nil)
	ctx := context.Background()
	id := fastTrackNode(t, e)
	require.NoError(t, e.c.Provision(ctx, id, ProvisionRequest{Target: "provide"}))
	agent := &testAgent{t: t, c: e.c, node: id, boot: "boot-1"}
	n := agent.until(e, state.Available)
	assert.Equal(t, []string{"boot device pxe", "power rebooting"}, drv.take(), "the first boot is a full one")
	assert.Equal(t, PowerOn, deref(n.PowerState), "the node stays on in the ramdisk")
	require.NotNil(t, n.Operation.Agent.FastTrack)
	assert.Equal(t, "boot-1", n.Operation.Agent.FastTrack.BootID)
	assert.False(t, n.Operation.Agent.Booted)
	assert.Contains(t, n.InternalInfo(), "agent_fast_track")
	h := historyText(t, e.st, id)
	assert.Contains(t, h, "cleaning: full boot, not fast track: no agent was left running")
	assert.Contains(t, h, "cleaning done: the agent of boot boot-1 stays running (fast track)")

	// idle: the agent keeps heartbeating with its token, and is told nothing
	require.NoError(t, agent.beat())
	assert.Nil(t, agent.finished, "no command while idle")

	require.NoError(t, e.c.Provision(ctx, id, ProvisionRequest{Target: "active"}))
	n = agent.until(e, state.Active)
	assert.Equal(t, []string{"boot device disk", "power power off", "power power on"}, drv.take(),
		"no reboot and no network boot: only the instance's boot after the image is written")
	assert.Nil(t, n.Operation.Agent.FastTrack)
	assert.Empty(t, n.Operation.Agent.Token, "the deploy tears the agent down")
	assert.Nil(t, n.Operation.DeployTiming)
	h = historyText(t, e.st, id)
	assert.Contains(t, h, "deploy: fast track, no power action and no network boot: the agent of boot boot-1 is running")
	assert.Regexp(t, `active [0-9.]+m?s after it was requested: boot [0-9.]+m?s \(fast track\), steps [0-9.]+m?s`, h)
	assert.Equal(t, pathFastTrack, timed.Load())
}

// An agent that booted again (a new boot id) looks up: fast track ends
// there, the node is powered off, and the deploy takes the full path.
func TestFastTrackNewBootTakesTheFullPath(t *testing.T) {
	drv := &powerLog{scriptDriver: &scriptDriver{}}
	e := start(t, drv, Config{FastTrack: FastTrackConfig{Enabled: true}}, nil)
	ctx := context.Background()
	id := fastTrackNode(t, e)
	require.NoError(t, e.c.Provision(ctx, id, ProvisionRequest{Target: "provide"}))
	(&testAgent{t: t, c: e.c, node: id, boot: "boot-1"}).until(e, state.Available)
	drv.take()

	restarted := &testAgent{t: t, c: e.c, node: id, boot: "boot-2"}
	err := restarted.lookup()
	assert.Equal(t, CodeNotFound, codeOf(t, err), "a resting node answers no lookup")
	require.Eventually(t, func() bool {
		n, err := e.st.GetNode(ctx, id)
		require.NoError(t, err)
		return deref(n.PowerState) == PowerOff && n.TargetPowerState == nil && e.c.Idle()
	}, 5*time.Second, 5*time.Millisecond)
	assert.Equal(t, []string{"power power off"}, drv.take(), "powered off as without fast track")
	n, err := e.st.GetNode(ctx, id)
	require.NoError(t, err)
	assert.Nil(t, n.Operation.Agent.FastTrack)
	assert.Empty(t, n.Operation.Agent.Token, "the kept agent's token died")
	assert.Contains(t, historyText(t, e.st, id), "fast track ends: a lookup from 127.0.0.1 (boot boot-2) while the agent of boot boot-1 was kept running")

	// the old agent's token no longer works
	err = (&testAgent{t: t, c: e.c, node: id, boot: "boot-1", token: "stale"}).beat()
	assert.Equal(t, CodeUnauthorized, codeOf(t, err))

	require.NoError(t, e.c.Provision(ctx, id, ProvisionRequest{Target: "active"}))
	restarted.token = ""
	restarted.until(e, state.Active)
	assert.Equal(t, []string{"boot device pxe", "power rebooting", "boot device disk", "power power off", "power power on"}, drv.take())
	h := historyText(t, e.st, id)
	assert.Contains(t, h, "deploy: full boot, not fast track: no agent was left running")
	assert.Regexp(t, `boot [0-9.]+m?s \(full boot\)`, h)
}

// power off ends fast track; power sync neither powers an idle node back
// nor fights one that is on.
func TestFastTrackPowerOffEndsIt(t *testing.T) {
	drv := &powerLog{scriptDriver: &scriptDriver{}}
	e := start(t, drv, Config{FastTrack: FastTrackConfig{Enabled: true}}, nil)
	ctx := context.Background()
	id := fastTrackNode(t, e)
	require.NoError(t, e.c.Provision(ctx, id, ProvisionRequest{Target: "provide"}))
	agent := &testAgent{t: t, c: e.c, node: id, boot: "boot-1"}
	agent.until(e, state.Available)
	drv.take()
	require.NoError(t, e.c.SetPower(ctx, id, PowerOff))
	require.Eventually(t, func() bool {
		n, err := e.st.GetNode(ctx, id)
		require.NoError(t, err)
		return deref(n.PowerState) == PowerOff && e.c.Idle()
	}, 5*time.Second, 5*time.Millisecond)
	n, err := e.st.GetNode(ctx, id)
	require.NoError(t, err)
	assert.Nil(t, n.Operation.Agent.FastTrack)
	assert.Contains(t, historyText(t, e.st, id), "fast track ends: power action power off requested")
	assert.Equal(t, CodeUnauthorized, codeOf(t, agent.beat()), "its agent is no longer trusted")
}

// The idle check ends fast track for an agent gone silent beyond the
// timeout, and for a node idle beyond --fast-track-max-idle: powered off.
func TestFastTrackIdleChecks(t *testing.T) {
	for _, tc := range []struct {
		name    string
		cfg     FastTrackConfig
		beating bool
		why     string
	}{
		{"silent agent", FastTrackConfig{Enabled: true, Timeout: time.Minute}, false, "the agent's last heartbeat was"},
		{"max idle", FastTrackConfig{Enabled: true, Timeout: time.Hour, MaxIdle: 10 * time.Minute}, true, "beyond the maximum of 10m0s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var skew atomic.Int64
			now := func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }
			drv := &powerLog{scriptDriver: &scriptDriver{}}
			e := start(t, drv, Config{FastTrack: tc.cfg, Now: now, CheckInterval: 20 * time.Millisecond}, nil)
			ctx := context.Background()
			id := fastTrackNode(t, e)
			require.NoError(t, e.c.Provision(ctx, id, ProvisionRequest{Target: "provide"}))
			agent := &testAgent{t: t, c: e.c, node: id, boot: "boot-1"}
			agent.until(e, state.Available)
			drv.take()
			skew.Store(int64(30 * time.Minute))
			if tc.beating {
				require.NoError(t, agent.beat())
			}
			require.Eventually(t, func() bool {
				n, err := e.st.GetNode(ctx, id)
				require.NoError(t, err)
				return deref(n.PowerState) == PowerOff && n.Operation.Agent.FastTrack == nil && e.c.Idle()
			}, 5*time.Second, 5*time.Millisecond)
			assert.Equal(t, []string{"power power off"}, drv.take())
			assert.Contains(t, historyText(t, e.st, id), tc.why)
		})
	}
}

// Without fast track nothing changes: the node leaves the ramdisk
// powered off, and the history says nothing of fast track.
func TestFastTrackOffKeepsTodaysPath(t *testing.T) {
	drv := &powerLog{scriptDriver: &scriptDriver{}}
	e := start(t, drv, Config{}, nil)
	ctx := context.Background()
	id := fastTrackNode(t, e)
	require.NoError(t, e.c.Provision(ctx, id, ProvisionRequest{Target: "provide"}))
	n := (&testAgent{t: t, c: e.c, node: id, boot: "boot-1"}).until(e, state.Available)
	assert.Equal(t, PowerOff, deref(n.PowerState))
	assert.Nil(t, n.Operation.Agent.FastTrack)
	assert.NotContains(t, historyText(t, e.st, id), "fast track")
	assert.Equal(t, []string{"boot device pxe", "power rebooting", "power power off"}, drv.take())
}

// Inspection leaves its agent running too; the next inspection, a
// manual cleaning and provide all start on it with no power action.
func TestFastTrackInspectionCleaningProvide(t *testing.T) {
	drv := &powerLog{scriptDriver: &scriptDriver{}}
	e := start(t, drv, Config{FastTrack: FastTrackConfig{Enabled: true}}, nil)
	ctx := context.Background()
	id := fastTrackNode(t, e)
	_, err := store.MutateNode(ctx, e.st, id, func(m *store.Node) error {
		m.Interfaces.Inspect = "agent"
		return nil
	})
	require.NoError(t, err)
	agent := &testAgent{t: t, c: e.c, node: id, boot: "boot-1"}
	require.NoError(t, e.c.Provision(ctx, id, ProvisionRequest{Target: "inspect"}))
	n := agent.until(e, state.Manageable)
	assert.Equal(t, []string{"boot device pxe", "power rebooting"}, drv.take())
	require.NotNil(t, n.Operation.Agent.FastTrack, "inspection leaves the agent running")
	assert.Equal(t, PowerOn, deref(n.PowerState))

	require.NoError(t, e.c.Provision(ctx, id, ProvisionRequest{Target: "inspect"}))
	agent.until(e, state.Manageable)
	require.NoError(t, e.c.Provision(ctx, id, ProvisionRequest{Target: "clean",
		CleanSteps: []protocol.Step{{Interface: "deploy", Step: "erase_devices_metadata"}}}))
	agent.until(e, state.Manageable)
	require.NoError(t, e.c.Provision(ctx, id, ProvisionRequest{Target: "provide"}))
	n = agent.until(e, state.Available)
	assert.Empty(t, drv.take(), "no power action and no boot device after the first boot")
	assert.Equal(t, "boot-1", n.Operation.Agent.FastTrack.BootID, "one boot served them all")
	h := historyText(t, e.st, id)
	assert.Contains(t, h, "inspection: fast track, no power action and no network boot")
	assert.Contains(t, h, "cleaning: fast track, no power action and no network boot")
	assert.Contains(t, h, "inspection done: the agent of boot boot-1 stays running")
	assert.Equal(t, 3, strings.Count(h, "fast track, no power action"), "inspection, manual cleaning, automated cleaning")
}

// Power sync does not fight fast track: a node kept on in the ramdisk is
// expected on, and one the BMC reports off is recorded off (its fast
// track ends), never powered back on.
func TestPowerSyncLeavesFastTrackAlone(t *testing.T) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, ":memory:")
	require.NoError(t, err)
	defer st.Close()
	stub := &bmcStub{actual: map[string]string{}, fail: map[string]bool{}, reads: map[string]int{}}
	c := New(st, Config{Host: "c1", FastTrack: FastTrackConfig{Enabled: true}}, stub)
	mk := func(actual string) string {
		n := storetest.NewNode("")
		n.Driver, n.ProvisionState, n.PowerState = "stub", string(state.Available), strp(PowerOn)
		n.Interfaces.Deploy = "direct"
		a := &n.Operation.Agent
		a.Token, a.BootID, a.LastHeartbeat = "tok", "boot-1", time.Now()
		a.FastTrack = &store.FastTrack{Since: time.Now(), BootID: "boot-1", TokenSum: tokenSum("tok")}
		require.NoError(t, st.CreateNode(ctx, n))
		stub.actual[n.UUID] = actual
		return n.UUID
	}
	on, off := mk(PowerOn), mk(PowerOff)
	cfg := PowerSyncConfig{Ticks: 1, MaxFailures: 3, Enforce: true}
	c.powerSyncTick(ctx, &powerSync{failures: map[string]int{}, next: map[string]time.Time{}}, cfg)
	assert.Empty(t, stub.sets, "no power action on either")
	n, err := st.GetNode(ctx, on)
	require.NoError(t, err)
	assert.NotNil(t, n.Operation.Agent.FastTrack, "on as expected: nothing changes")
	n, err = st.GetNode(ctx, off)
	require.NoError(t, err)
	assert.Equal(t, PowerOff, deref(n.PowerState))
	assert.Nil(t, n.Operation.Agent.FastTrack)
	assert.Empty(t, n.Operation.Agent.Token)
	assert.Contains(t, historyText(t, st, off), "fast track ends: the node's power changed outside the controller")
}
