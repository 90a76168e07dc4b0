package conductor

import (
	"bytes"
	"context"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/bmc"
	"github.com/anvil-metal/anvil/bmc/vbmc"
	"github.com/anvil-metal/anvil/controller/state"
	"github.com/anvil-metal/anvil/controller/store"
	"github.com/anvil-metal/anvil/controller/store/sqlite"
	"github.com/anvil-metal/anvil/controller/store/storetest"
	"github.com/anvil-metal/anvil/protocol"
)

// biosEnv runs a BMCDriver of type hw over the bmc package's fake (which
// has a Redfish-like BIOS with a registry for fake-hardware targets).
type biosEnv struct {
	*env
	f   *bmc.Fake
	drv *BMCDriver
}

func startBIOS(t *testing.T, hw string, cfgs ...Config) *biosEnv {
	t.Helper()
	cfg := Config{}
	if len(cfgs) > 0 {
		cfg = cfgs[0]
	}
	st, err := sqlite.Open(context.Background(), ":memory:")
	require.NoError(t, err)
	t.Cleanup(func() { st.Close() })
	return startBIOSOn(t, hw, cfg, st, bmc.NewFake())
}

// startBIOSOn is startBIOS on an existing store and fake BMC (a restart).
func startBIOSOn(t *testing.T, hw string, cfg Config, st store.Store, f *bmc.Fake) *biosEnv {
	t.Helper()
	return startBIOSOnWith(t, hw, cfg, st, f, bmc.RetryPolicy{})
}

// startBIOSOnWith is startBIOSOn with the BMC client's retry policy (zero:
// its default).
func startBIOSOnWith(t *testing.T, hw string, cfg Config, st store.Store, f *bmc.Fake, retry bmc.RetryPolicy) *biosEnv {
	t.Helper()
	m := bmc.New(bmc.Config{Fake: f, MinInterval: -1, VerifyTimeout: 2 * time.Second, PollInterval: 5 * time.Millisecond, Retry: retry})
	note := func(ctx context.Context, node, sev, msg string) {
		_ = st.AppendEvent(ctx, &store.Event{UUID: node + msg + time.Now().String(), NodeUUID: node, CreatedAt: time.Now(), Severity: sev, EventType: "bmc", Event: msg})
	}
	drv := NewBMCDriver(hw, m, note)
	drv.BIOSApplyTimeout, drv.BIOSPollInterval = 200*time.Millisecond, 10*time.Millisecond
	return &biosEnv{env: start(t, drv, cfg, st), f: f, drv: drv}
}

// node is a manageable node of the driver, deployed without the agent so
// that manual cleaning runs the out-of-band steps at once.
func (e *biosEnv) node(t *testing.T) string {
	t.Helper()
	n := storetest.NewNode("")
	n.Driver, n.ProvisionState = e.drv.Name(), string(state.Manageable)
	n.Interfaces.Deploy = "fake"
	require.NoError(t, e.st.CreateNode(context.Background(), n))
	return n.UUID
}

func applyStep(settings ...[2]any) protocol.Step {
	var list []any
	for _, s := range settings {
		list = append(list, map[string]any{"name": s[0], "value": s[1]})
	}
	return protocol.Step{Interface: "bios", Step: "apply_configuration", Args: map[string]any{"settings": list}}
}

func (e *biosEnv) clean(t *testing.T, id string, steps ...protocol.Step) error {
	t.Helper()
	return e.c.Provision(context.Background(), id, ProvisionRequest{Target: "clean", CleanSteps: steps})
}

func commands(f *bmc.Fake, id string) []string {
	var out []string
	for _, c := range f.Calls(id) {
		out = append(out, c.Command)
	}
	return out
}

func history(t *testing.T, st store.Store, id string) string {
	t.Helper()
	events, err := st.ListEvents(context.Background(), id, 0)
	require.NoError(t, err)
	var texts []string
	for _, e := range events {
		texts = append(texts, e.Event)
	}
	return strings.Join(texts, "\n")
}

func TestBMCDriverOffersBIOSStepsExceptOnIPMI(t *testing.T) {
	n := storetest.NewNode("")
	red := NewBMCDriver(bmc.HardwareRedfish, nil, nil)
	var keys []string
	for _, s := range red.CleanSteps(n) {
		keys = append(keys, s.Key())
		assert.Zero(t, s.Priority, "manual only by default, as Ironic's")
	}
	assert.Equal(t, []string{"bios.apply_configuration", "bios.factory_reset", "firmware.update", "firmware.verify"}, keys)
	assert.True(t, red.CleanSteps(n)[0].ArgsInfo["settings"].Required)
	assert.Len(t, red.DeploySteps(n), 2, "the bios steps; firmware steps are clean steps only, as Ironic's")
	assert.NoError(t, red.Validate(n)["bios"])
	off := *n
	off.Interfaces.BIOS = "no-bios"
	keys = nil
	for _, s := range red.CleanSteps(&off) {
		keys = append(keys, s.Key())
	}
	assert.Equal(t, []string{"firmware.update", "firmware.verify"}, keys, "no bios steps with no-bios, as in Ironic")
	assert.Error(t, red.Validate(&off)["bios"])
	err := red.CheckStepArgs(context.Background(), &off, []protocol.Step{{Interface: "bios", Step: "factory_reset"}})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "has bios_interface no-bios (set it to redfish")
	ipmi := NewBMCDriver(bmc.HardwareIPMI, nil, nil)
	assert.Error(t, ipmi.Validate(n)["bios"])
	assert.Empty(t, ipmi.CleanSteps(n))
	assert.Empty(t, ipmi.DeploySteps(n))

	// agent nodes offer them as deploy steps too (templates, deploy_steps)
	n.Interfaces.Deploy = "direct"
	var deploy []string
	for _, s := range availableDeploySteps(n, red) {
		deploy = append(deploy, s.Key())
	}
	assert.Contains(t, deploy, "bios.apply_configuration")
	assert.Contains(t, deploy, "deploy.write_image")
}

func TestBIOSApplyConfiguration(t *testing.T) {
	e := startBIOS(t, bmc.HardwareFake)
	id := e.node(t)
	// JSON numbers arrive as float64; the cache shows strings, which may
	// be sent back as they are
	require.NoError(t, e.clean(t, id, applyStep([2]any{"ProcVirtualization", "Disabled"}, [2]any{"PxeDev1VlanId", float64(100)},
		[2]any{"QuietBoot", "True"}, [2]any{"AssetTag", "rack-7"})))
	n := e.wait(t, id, state.Manageable)
	require.Nil(t, n.LastError)

	cur := e.f.BIOS(id).Current
	assert.Equal(t, "Disabled", cur["ProcVirtualization"])
	assert.Equal(t, int64(100), cur["PxeDev1VlanId"])
	assert.Equal(t, true, cur["QuietBoot"])
	assert.Equal(t, "rack-7", cur["AssetTag"])
	assert.Empty(t, e.f.BIOS(id).Pending)
	assert.Equal(t, bmc.PowerOff, e.f.State(id).Power, "powered on to apply, and off again as it was found")
	assert.Contains(t, commands(e.f, id), "apply_bios")

	cache := biosValues(t, e.st, id)
	assert.Equal(t, "Disabled", cache["ProcVirtualization"], "cache refreshed")
	assert.Equal(t, "100", cache["PxeDev1VlanId"])
	assert.Equal(t, "1", cache["QuietBoot"], "as Ironic shows a boolean it stored")
	list, err := e.st.ListBIOSSettings(context.Background(), id)
	require.NoError(t, err)
	for _, s := range list {
		if s.Name == "PxeDev1VlanId" {
			assert.Equal(t, "Integer", s.AttributeType)
			require.NotNil(t, s.UpperBound)
			assert.Equal(t, 4094, *s.UpperBound)
			assert.True(t, *s.ResetRequired)
		}
		if s.Name == "SystemServiceTag" {
			assert.True(t, *s.ReadOnly)
			assert.True(t, *s.Unique)
		}
	}
	assert.Contains(t, history(t, e.st, id), "bios: BIOS settings applied and read back: AssetTag, ProcVirtualization, PxeDev1VlanId, QuietBoot")

	// a node that is on is rebooted and stays on
	e.f.SetState(id, bmc.FakeNodeState{Power: bmc.PowerOn, Boot: bmc.BootDisk})
	require.NoError(t, e.clean(t, id, applyStep([2]any{"LogicalProc", "Disabled"})))
	require.Nil(t, e.wait(t, id, state.Manageable).LastError)
	assert.Equal(t, "Disabled", e.f.BIOS(id).Current["LogicalProc"])
	assert.Equal(t, bmc.PowerOn, e.f.State(id).Power)
}

func TestBIOSApplyNothingToChange(t *testing.T) {
	e := startBIOS(t, bmc.HardwareFake)
	id := e.node(t)
	require.NoError(t, e.clean(t, id, applyStep([2]any{"ProcVirtualization", "Enabled"}, [2]any{"PxeDev1VlanId", "1"})))
	n := e.wait(t, id, state.Manageable)
	require.Nil(t, n.LastError)
	for _, c := range commands(e.f, id) {
		assert.NotEqual(t, "apply_bios", c, "no write")
		assert.False(t, strings.HasPrefix(c, "set_power"), "no reboot: %s", c)
	}
	assert.Contains(t, history(t, e.st, id), "bios: apply_configuration: nothing to change (2 setting(s) already as asked)")
}

func TestBIOSApplyIgnoredFailsNamingTheAttribute(t *testing.T) {
	e := startBIOS(t, bmc.HardwareFake)
	id := e.node(t)
	e.f.SetKnobs(id, bmc.FakeKnobs{IgnoreBIOS: true})
	require.NoError(t, e.clean(t, id, applyStep([2]any{"ProcVirtualization", "Disabled"})))
	n := e.wait(t, id, state.CleanFailed)
	require.NotNil(t, n.LastError)
	assert.Contains(t, *n.LastError, `ProcVirtualization: asked "Disabled", read back "Enabled"`)
	assert.Contains(t, *n.LastError, "bios.apply_configuration failed")
	assert.Equal(t, bmc.PowerOff, e.f.State(id).Power, "left off as found")
}

func TestBIOSFactoryReset(t *testing.T) {
	e := startBIOS(t, bmc.HardwareFake)
	id := e.node(t)
	e.f.SetBIOS(id, bmc.FakeBIOSRegistry(), map[string]any{"BootMode": "Bios", "ProcVirtualization": "Disabled", "LogicalProc": "Enabled",
		"SriovGlobalEnable": "Enabled", "PxeDev1VlanId": int64(7), "PowerCycleDelaySecs": int64(30), "AssetTag": "old", "QuietBoot": true,
		"SystemServiceTag": "SVC1234"})
	require.NoError(t, e.clean(t, id, protocol.Step{Interface: "bios", Step: "factory_reset"}))
	n := e.wait(t, id, state.Manageable)
	require.Nil(t, n.LastError)
	cur := e.f.BIOS(id).Current
	assert.Equal(t, "Uefi", cur["BootMode"])
	assert.Equal(t, int64(1), cur["PxeDev1VlanId"])
	assert.Equal(t, "Uefi", biosValues(t, e.st, id)["BootMode"], "cache refreshed")
	assert.Contains(t, commands(e.f, id), "reset_bios")

	// a BMC that ignores the reset: the step fails naming what stayed
	e.f.SetBIOS(id, bmc.FakeBIOSRegistry(), map[string]any{"BootMode": "Bios"})
	e.f.SetKnobs(id, bmc.FakeKnobs{IgnoreBIOS: true})
	require.NoError(t, e.clean(t, id, protocol.Step{Interface: "bios", Step: "factory_reset"}))
	n = e.wait(t, id, state.CleanFailed)
	assert.Contains(t, *n.LastError, `BootMode: asked "Uefi", read back "Bios"`)
}

func TestBIOSSettingsRefusedBeforeAnythingRuns(t *testing.T) {
	e := startBIOS(t, bmc.HardwareFake)
	id := e.node(t)
	before := len(e.f.Calls(id))
	for _, c := range []struct {
		step protocol.Step
		want string
	}{
		{applyStep([2]any{"SystemServiceTag", "X"}), "SystemServiceTag: read-only"},
		{applyStep([2]any{"NoSuchThing", "X"}), "NoSuchThing: unknown attribute"},
		{applyStep([2]any{"ProcVirtualization", "Maybe"}), "ProcVirtualization"},
		{applyStep([2]any{"PxeDev1VlanId", float64(5000)}), "PxeDev1VlanId"},
		{protocol.Step{Interface: "bios", Step: "apply_configuration", Args: map[string]any{"settings": "BootMode=Bios"}}, "must be a list"},
	} {
		err := e.clean(t, id, c.step)
		var ce *Error
		require.ErrorAs(t, err, &ce, c.want)
		assert.Equal(t, CodeInvalid, ce.Code)
		assert.Contains(t, ce.Msg, c.want)
		assert.Contains(t, ce.Msg, "Cannot clean node "+id)
	}
	n, err := e.st.GetNode(context.Background(), id)
	require.NoError(t, err)
	assert.Equal(t, string(state.Manageable), n.ProvisionState, "nothing ran")
	for _, c := range commands(e.f, id)[before:] {
		assert.NotEqual(t, "apply_bios", c)
		assert.False(t, strings.HasPrefix(c, "set_power"), c)
	}
	// the argsinfo check still names a missing argument
	err = e.clean(t, id, protocol.Step{Interface: "bios", Step: "apply_configuration"})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "missing required arguments: settings")
}

func TestBIOSStepsRefusedOnIPMI(t *testing.T) {
	e := startBIOS(t, bmc.HardwareIPMI)
	id := e.node(t)
	for _, s := range []protocol.Step{applyStep([2]any{"BootMode", "Bios"}), {Interface: "bios", Step: "factory_reset"}} {
		err := e.clean(t, id, s)
		var ce *Error
		require.ErrorAs(t, err, &ce)
		assert.Equal(t, CodeInvalid, ce.Code)
		assert.Contains(t, ce.Msg, "step "+s.Key()+": BIOS settings are not supported by the ipmi driver")
	}
	n, err := e.st.GetNode(context.Background(), id)
	require.NoError(t, err)
	assert.Equal(t, string(state.Manageable), n.ProvisionState)
	assert.Empty(t, e.f.Calls(id), "the BMC was not asked")

	// the cache is left alone, quietly
	_, err = e.drv.BIOSSettings(context.Background(), n)
	assert.ErrorIs(t, err, bmc.ErrUnsupported)
}

// TestRebootingStepBeforeAnAgentStep: a bios or firmware step reboots an
// agent node out of its ramdisk; when a later step needs the agent, the
// node boots the ramdisk again (agentNeededAfter), otherwise not.
func TestRebootingStepBeforeAnAgentStep(t *testing.T) {
	e := startBIOS(t, bmc.HardwareFake)
	erase := protocol.Step{Interface: "deploy", Step: "erase_devices_metadata"}
	bios := applyStep([2]any{"BootMode", "Bios"})
	fw := protocol.Step{Interface: "firmware", Step: "update"}
	verify := protocol.Step{Interface: "firmware", Step: "verify"}
	node := func(ps state.State, booted bool, idx int, plan ...protocol.Step) *store.Node {
		n := storetest.NewNode("")
		n.Driver, n.ProvisionState = e.drv.Name(), string(ps)
		n.Interfaces.Deploy = "direct"
		n.Operation.Agent.Booted = booted
		p := &store.StepPlan{Steps: plan, Index: idx}
		if ps == state.Cleaning || ps == state.CleanWait {
			n.Operation.Clean = p
		} else {
			n.Operation.Deploy = p
		}
		return n
	}
	writeImage := protocol.Step{Interface: "deploy", Step: "write_image"}
	deployDeploy := protocol.Step{Interface: "deploy", Step: "deploy"}
	tests := []struct {
		name string
		n    *store.Node
		kind string
		step protocol.Step
		want bool
	}{
		{"bios then an agent step", node(state.Cleaning, true, 0, bios, erase), "clean", bios, true},
		{"firmware then an agent step", node(state.CleanWait, true, 0, fw, erase), "clean", fw, true},
		{"bios last", node(state.Cleaning, true, 1, erase, bios), "clean", bios, false},
		{"bios then driver steps only", node(state.Cleaning, true, 0, bios, verify), "clean", bios, false},
		{"a step that does not reboot", node(state.Cleaning, true, 0, verify, erase), "clean", verify, false},
		{"no ramdisk running", node(state.Cleaning, false, 0, bios, erase), "clean", bios, false},
		{"deploy: bios between deploy and write_image", node(state.Deploying, true, 1, deployDeploy, bios, writeImage), "deploy", bios, true},
		{"deploy: bios before deploy.deploy", node(state.Deploying, false, 0, bios, deployDeploy, writeImage), "deploy", bios, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, agentNeededAfter(tt.n, e.drv, tt.kind, tt.step))
		})
	}
	n := node(state.Cleaning, true, 0, bios, erase)
	assert.False(t, agentNeededAfter(n, FakeDriver{}, "clean", bios), "a driver whose steps do not reboot")
	n.Interfaces.Deploy = "fake"
	assert.False(t, agentNeededAfter(n, e.drv, "clean", bios), "no agent")
}

// TestBIOSFactoryResetInAutomatedCleaning: given a priority by
// --clean-step-priority, factory_reset runs in automated cleaning.
func TestBIOSFactoryResetInAutomatedCleaning(t *testing.T) {
	e := startBIOS(t, bmc.HardwareFake, Config{AutomatedClean: true, PriorityOverrides: map[string]int{"bios.factory_reset": 5}})
	id := e.node(t)
	e.f.SetBIOS(id, bmc.FakeBIOSRegistry(), map[string]any{"BootMode": "Bios"})
	require.NoError(t, e.c.Provision(context.Background(), id, ProvisionRequest{Target: "provide"}))
	n := e.wait(t, id, state.Available)
	require.Nil(t, n.LastError)
	assert.Equal(t, "Uefi", e.f.BIOS(id).Current["BootMode"])
	assert.Contains(t, history(t, e.st, id), "clean step bios.factory_reset finished")
}

// TestBIOSCacheQuietOnIPMI: IPMI has no BIOS; caching on every manage
// neither warns nor touches the cache.
func TestBIOSCacheQuietOnIPMI(t *testing.T) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, ":memory:")
	require.NoError(t, err)
	defer st.Close()
	n := storetest.NewNode("")
	require.NoError(t, st.CreateNode(ctx, n))
	require.NoError(t, st.ReplaceBIOSSettings(ctx, n.UUID, []store.BIOSSetting{{Name: "Old", Value: "1"}}))
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo}))
	refreshBIOSAndFirmware(ctx, st, log, n, NewBMCDriver(bmc.HardwareIPMI, nil, nil))
	assert.Empty(t, buf.String())
	assert.Equal(t, map[string]string{"Old": "1"}, biosValues(t, st, n.UUID))
}

// TestRedfishBIOSStepsAgainstVBMC runs the bios steps through the real
// Redfish client against anvil's virtual BMC, whose BIOS applies pending
// settings at the next boot.
func TestRedfishBIOSStepsAgainstVBMC(t *testing.T) {
	ctx := context.Background()
	srv := vbmc.NewServer(nil, "admin", "password", vbmc.NewNode("node-1", vbmc.NewMemory()))
	hs := httptest.NewServer(srv.Handler())
	defer hs.Close()
	st, err := sqlite.Open(ctx, ":memory:")
	require.NoError(t, err)
	defer st.Close()
	m := bmc.New(bmc.Config{MinInterval: -1, VerifyTimeout: 5 * time.Second, PollInterval: 20 * time.Millisecond})
	drv := NewBMCDriver(bmc.HardwareRedfish, m, nil)
	drv.BIOSApplyTimeout, drv.BIOSPollInterval = 2*time.Second, 20*time.Millisecond
	e := start(t, drv, Config{}, st)

	n := storetest.NewNode("")
	n.Driver, n.Interfaces.Deploy = "redfish", "fake"
	n.DriverInfo = map[string]any{"redfish_address": hs.URL, "redfish_system_id": "/redfish/v1/Systems/node-1",
		"redfish_username": "admin", "redfish_password": "password"}
	require.NoError(t, st.CreateNode(ctx, n))
	require.NoError(t, e.c.Provision(ctx, n.UUID, ProvisionRequest{Target: "manage"}))
	e.wait(t, n.UUID, state.Manageable)
	assert.Equal(t, "Uefi", biosValues(t, st, n.UUID)["BootMode"], "cached on manage")
	assert.Equal(t, "1", biosValues(t, st, n.UUID)["WakeOnLan"])

	require.NoError(t, e.c.Provision(ctx, n.UUID, ProvisionRequest{Target: "clean", CleanSteps: []protocol.Step{
		applyStep([2]any{"BootMode", "Bios"}, [2]any{"PowerCycleDelaySecs", "45"}, [2]any{"AssetTag", "rack-7"})}}))
	got := e.wait(t, n.UUID, state.Manageable)
	require.Nil(t, got.LastError)
	cur := srv.Node("node-1").Bios().Current
	assert.Equal(t, "Bios", cur["BootMode"])
	assert.EqualValues(t, 45, cur["PowerCycleDelaySecs"])
	assert.Equal(t, "45", biosValues(t, st, n.UUID)["PowerCycleDelaySecs"], "cache refreshed")
	on, err := srv.Node("node-1").On(ctx)
	require.NoError(t, err)
	assert.False(t, on, "powered off again, as it was found")

	require.NoError(t, e.c.Provision(ctx, n.UUID, ProvisionRequest{Target: "clean", CleanSteps: []protocol.Step{
		{Interface: "bios", Step: "factory_reset"}}}))
	got = e.wait(t, n.UUID, state.Manageable)
	require.Nil(t, got.LastError)
	assert.Equal(t, "Uefi", srv.Node("node-1").Bios().Current["BootMode"])
	assert.Equal(t, "Uefi", biosValues(t, st, n.UUID)["BootMode"])
}

// TestBIOSDeployStepSettingsRefused: a deploy's deploy_steps are checked
// against the registry as a manual clean's are.
func TestBIOSDeployStepSettingsRefused(t *testing.T) {
	e := startBIOS(t, bmc.HardwareFake)
	id := e.node(t)
	_, err := store.MutateNode(context.Background(), e.st, id, func(m *store.Node) error {
		m.ProvisionState = string(state.Available)
		return nil
	})
	require.NoError(t, err)
	step := applyStep([2]any{"SystemServiceTag", "X"})
	step.Priority = 90
	err = e.c.Provision(context.Background(), id, ProvisionRequest{Target: "active", DeploySteps: []protocol.Step{step}})
	var ce *Error
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, CodeInvalid, ce.Code)
	assert.Contains(t, ce.Msg, "Cannot deploy node "+id+": step bios.apply_configuration: bmc: invalid BIOS settings: SystemServiceTag: read-only")
	n, err := e.st.GetNode(context.Background(), id)
	require.NoError(t, err)
	assert.Equal(t, string(state.Available), n.ProvisionState)
}

// TestBIOSToStorePendingValues: a pending value is kept beside the
// current one only where it differs, whether the BMC lists only the
// changes in Bios/Settings or every attribute.
func TestBIOSToStorePendingValues(t *testing.T) {
	cur := map[string]any{"ProcVirtualization": "Enabled", "PxeDev1VlanId": int64(0), "QuietBoot": false, "AdminPassword": nil}
	tests := []struct {
		name    string
		pending map[string]any
		want    map[string]string
	}{
		{"none", nil, map[string]string{}},
		{"changes only", map[string]any{"ProcVirtualization": "Disabled", "PxeDev1VlanId": float64(100)},
			map[string]string{"ProcVirtualization": "Disabled", "PxeDev1VlanId": "100"}},
		{"every attribute", map[string]any{"ProcVirtualization": "Enabled", "PxeDev1VlanId": int64(0), "QuietBoot": true, "AdminPassword": nil},
			map[string]string{"QuietBoot": "1"}},
		{"an attribute the BMC does not report as current", map[string]any{"Unknown": "x"}, map[string]string{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := map[string]string{}
			settings := biosToStore(bmc.BIOS{Current: cur, Pending: tt.pending})
			require.Len(t, settings, len(cur))
			for _, s := range settings {
				if s.PendingValue != nil {
					got[s.Name] = *s.PendingValue
				}
			}
			assert.Equal(t, tt.want, got)
		})
	}
}
