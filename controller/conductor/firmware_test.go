package conductor

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/bmc"
	"github.com/anvil-metal/anvil/controller/state"
	"github.com/anvil-metal/anvil/controller/store"
	"github.com/anvil-metal/anvil/controller/store/storetest"
	"github.com/anvil-metal/anvil/protocol"
)

// fwConfig polls quickly and gives up quickly.
func fwConfig() Config {
	return Config{CheckInterval: 10 * time.Millisecond, Firmware: FirmwareConfig{TaskTimeout: 5 * time.Second,
		StallTimeout: 300 * time.Millisecond, OfflineTimeout: 2 * time.Second, VerifyTimeout: 500 * time.Millisecond,
		ActivationSettle: 30 * time.Millisecond, GoneGrace: 100 * time.Millisecond}}
}

func updateStep(settings ...map[string]any) protocol.Step {
	var list []any
	for _, s := range settings {
		list = append(list, s)
	}
	return protocol.Step{Interface: "firmware", Step: "update", Args: map[string]any{"settings": list}}
}

func fwSetting(component, url string) map[string]any {
	return map[string]any{"component": component, "url": url}
}

func firmwareCache(t *testing.T, st store.Store, id string) map[string]store.FirmwareComponent {
	t.Helper()
	list, err := st.ListFirmwareComponents(context.Background(), id)
	require.NoError(t, err)
	out := map[string]store.FirmwareComponent{}
	for _, c := range list {
		out[c.Component] = c
	}
	return out
}

func TestFirmwareUpdateBMCThenBIOS(t *testing.T) {
	e := startBIOS(t, bmc.HardwareFake, fwConfig())
	id := e.node(t)
	e.f.SetFirmwareImage("http://images.test/bios-2.bin", bmc.FakeFirmwareImage{Component: "bios", Version: "2.0.0"})
	e.f.SetFirmwareImage("http://images.test/bmc-3.bin", bmc.FakeFirmwareImage{Component: "bmc", Version: "3.0.0"})
	e.f.SetFirmwareKnobs(id, bmc.FakeFirmwareKnobs{PollsToComplete: 3})
	// the cache before: filled when the node was managed (here: by hand)
	require.NoError(t, e.clean(t, id, protocol.Step{Interface: "firmware", Step: "verify", Args: map[string]any{"baseline": map[string]any{"bmc": "1.0.0"}}}))
	e.wait(t, id, state.Manageable)
	assert.Equal(t, "1.0.0", firmwareCache(t, e.st, id)["bios"].CurrentVersion)

	require.NoError(t, e.clean(t, id, updateStep(fwSetting("bios", "http://images.test/bios-2.bin"), fwSetting("bmc", "http://images.test/bmc-3.bin"))))
	n := e.wait(t, id, state.Manageable)
	require.Nil(t, n.LastError)
	assert.Nil(t, n.Operation.Firmware, "the record goes with its step")

	active, staged := e.f.FirmwareVersions(id)
	assert.Equal(t, "2.0.0", active["bios"])
	assert.Equal(t, "3.0.0", active["bmc"])
	assert.Empty(t, staged)
	assert.Equal(t, bmc.PowerOff, e.f.State(id).Power, "powered on to activate the BIOS image, and off again as found")

	var updates []string
	for _, c := range commands(e.f, id) {
		if c == "update_firmware" || c == "set_power on" || c == "set_power off" {
			updates = append(updates, c)
		}
	}
	assert.Equal(t, []string{"update_firmware", "update_firmware", "set_power on", "set_power off"}, updates,
		"one request per component; a boot after the BIOS only")

	cache := firmwareCache(t, e.st, id)
	assert.Equal(t, "1.0.0", cache["bmc"].InitialVersion)
	assert.Equal(t, "3.0.0", cache["bmc"].CurrentVersion)
	require.NotNil(t, cache["bmc"].LastVersionFlashed)
	assert.Equal(t, "3.0.0", *cache["bmc"].LastVersionFlashed)
	assert.Equal(t, "2.0.0", cache["bios"].CurrentVersion)
	assert.Nil(t, cache["nic:NIC.1"].LastVersionFlashed, "not flashed")

	h := history(t, e.st, id)
	assert.Regexp(t, `(?s)firmware update of bmc from \S+ requested.*firmware of bmc updated: 1.0.0 → 3.0.0.*firmware update of bios from \S+ requested.*rebooting the node to activate the bios firmware.*firmware of bios updated: 1.0.0 → 2.0.0`, h)
	assert.Contains(t, h, "clean step firmware.update finished: firmware updated: bmc 1.0.0 → 3.0.0, bios 1.0.0 → 2.0.0")
}

func TestFirmwareUpdateFailures(t *testing.T) {
	tests := []struct {
		name    string
		image   bmc.FakeFirmwareImage
		url     string
		knobs   bmc.FakeFirmwareKnobs
		version string
		wantErr string
	}{
		{name: "the BMC's task fails (corrupt image)", url: "http://images.test/bad.bin", image: bmc.FakeFirmwareImage{Component: "bmc", Version: "9", Fail: "Image checksum mismatch."},
			wantErr: "the BMC's update of bmc failed (task /fake/"},
		{name: "the BMC cannot download", url: "http://images.test/missing.bin",
			wantErr: "Unable to download the image from http://images.test/missing.bin"},
		{name: "a stalled task", url: "http://images.test/bmc.bin", image: bmc.FakeFirmwareImage{Component: "bmc", Version: "2"}, knobs: bmc.FakeFirmwareKnobs{StallTasks: true},
			wantErr: "stalled: task /fake/"},
		{name: "a purged task and no new version", url: "http://images.test/same.bin", image: bmc.FakeFirmwareImage{Component: "bmc", Version: "1.0.0"}, knobs: bmc.FakeFirmwareKnobs{PurgeTasks: true},
			wantErr: "reads 1.0.0 500ms after the update, expected a version other than 1.0.0 (the BMC dropped its task"},
		{name: "a version other than asked", url: "http://images.test/bmc.bin", image: bmc.FakeFirmwareImage{Component: "bmc", Version: "2"}, version: "2.1",
			wantErr: "component bmc reads 2 500ms after the update, expected 2.1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := startBIOS(t, bmc.HardwareFake, fwConfig())
			id := e.node(t)
			if tt.image.Component != "" {
				e.f.SetFirmwareImage(tt.url, tt.image)
			}
			e.f.SetFirmwareKnobs(id, tt.knobs)
			s := fwSetting("bmc", tt.url)
			if tt.version != "" {
				s["version"] = tt.version
			}
			require.NoError(t, e.clean(t, id, updateStep(s)))
			n := e.wait(t, id, state.CleanFailed)
			require.NotNil(t, n.LastError)
			assert.Contains(t, *n.LastError, "Clean step firmware.update failed")
			assert.Contains(t, *n.LastError, tt.wantErr)
			assert.Nil(t, n.Operation.Firmware)
		})
	}
}

func TestFirmwareUpdateVanishedTaskWithANewVersionSucceeds(t *testing.T) {
	e := startBIOS(t, bmc.HardwareFake, fwConfig())
	id := e.node(t)
	e.f.SetFirmwareImage("http://images.test/bmc.bin", bmc.FakeFirmwareImage{Component: "bmc", Version: "2"})
	e.f.SetFirmwareKnobs(id, bmc.FakeFirmwareKnobs{PurgeTasks: true})
	require.NoError(t, e.clean(t, id, updateStep(fwSetting("bmc", "http://images.test/bmc.bin"))))
	n := e.wait(t, id, state.Manageable)
	require.Nil(t, n.LastError)
	assert.Contains(t, history(t, e.st, id), "vanished before it was seen to end (the BMC purged it); the version read back decides")
	assert.Contains(t, history(t, e.st, id), "firmware of bmc updated: 1.0.0 → 2")
}

func TestFirmwareUpdateResumesAfterARestart(t *testing.T) {
	cfg := fwConfig()
	cfg.Firmware.StallTimeout = time.Minute
	e := startBIOS(t, bmc.HardwareFake, cfg)
	id := e.node(t)
	e.f.SetFirmwareImage("http://images.test/bmc.bin", bmc.FakeFirmwareImage{Component: "bmc", Version: "2"})
	e.f.SetFirmwareKnobs(id, bmc.FakeFirmwareKnobs{StallTasks: true})
	require.NoError(t, e.clean(t, id, updateStep(fwSetting("bmc", "http://images.test/bmc.bin"))))
	require.Eventually(t, func() bool {
		n, err := e.st.GetNode(context.Background(), id)
		require.NoError(t, err)
		return n.Operation.Firmware != nil && n.Operation.Firmware.Items[0].Phase == store.FirmwareFlashing
	}, 5*time.Second, 5*time.Millisecond)
	e.stop()

	// a new controller on the same database watches the same task
	e.f.SetFirmwareKnobs(id, bmc.FakeFirmwareKnobs{})
	e2 := startBIOSOn(t, bmc.HardwareFake, cfg, e.st, e.f)
	n := e2.wait(t, id, state.Manageable)
	require.Nil(t, n.LastError)
	count := 0
	for _, c := range commands(e.f, id) {
		if c == "update_firmware" {
			count++
		}
	}
	assert.Equal(t, 1, count, "the flash is never requested twice")
	active, _ := e.f.FirmwareVersions(id)
	assert.Equal(t, "2", active["bmc"])
}

func TestFirmwareStepsRefusedBeforeAnythingRuns(t *testing.T) {
	e := startBIOS(t, bmc.HardwareFake, fwConfig())
	id := e.node(t)
	tests := []struct {
		name    string
		step    protocol.Step
		wantErr string
	}{
		{"unknown component", updateStep(fwSetting("raid", "http://x.test/a")), `component "raid" is not bios, bmc or nic:<id>`},
		{"not a URL", updateStep(fwSetting("bmc", "file:///etc/passwd")), "is not an http or https URL"},
		{"twice the same", updateStep(fwSetting("bmc", "http://x.test/a"), fwSetting("bmc", "http://x.test/b")), "component bmc twice"},
		{"bad checksum", updateStep(map[string]any{"component": "bios", "url": "http://x.test/a", "checksum": "md5:abc"}), "checksum"},
		{"unknown key", updateStep(map[string]any{"component": "bios", "url": "http://x.test/a", "force": true}), `unknown key "force"`},
		{"no baseline", protocol.Step{Interface: "firmware", Step: "verify"}, "no firmware baseline"},
		{"bad baseline", protocol.Step{Interface: "firmware", Step: "verify", Args: map[string]any{"baseline": map[string]any{"bmc": 2.0}}}, "bmc must be a version"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := e.clean(t, id, tt.step)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.wantErr)
			n, gerr := e.st.GetNode(context.Background(), id)
			require.NoError(t, gerr)
			assert.Equal(t, string(state.Manageable), n.ProvisionState, "nothing ran")
		})
	}
	assert.NotContains(t, commands(e.f, id), "update_firmware")

	off := &store.Node{UUID: "n1", Interfaces: store.Interfaces{Firmware: "no-firmware"}}
	assert.Empty(t, keysOf(e.drv.CleanSteps(off)), "no firmware steps with no-firmware, as in Ironic")
	err := e.drv.CheckStepArgs(context.Background(), off, []protocol.Step{updateStep(fwSetting("bmc", "http://x.test/a"))})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "has firmware_interface no-firmware (set it to redfish")

	ipmi := NewBMCDriver(bmc.HardwareIPMI, nil, nil)
	err = ipmi.CheckStepArgs(context.Background(), &store.Node{}, []protocol.Step{updateStep(fwSetting("bmc", "http://x.test/a"))})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "firmware updates are not supported by the ipmi driver")
}

func TestFirmwareVerifyBaselineFailsAutomatedCleaning(t *testing.T) {
	e := startBIOS(t, bmc.HardwareFake, fwConfig())
	id := e.node(t)
	_, err := store.MutateNode(context.Background(), e.st, id, func(m *store.Node) error {
		m.Properties = map[string]any{"firmware_baseline": `{"bmc": ["2.0", "2.1"], "bios": "1.0.0"}`}
		return nil
	})
	require.NoError(t, err)
	var verify protocol.Step
	for _, s := range e.drv.CleanSteps(&store.Node{Properties: map[string]any{"firmware_baseline": "{}"}}) {
		if s.Key() == "firmware.verify" {
			verify = s
		}
	}
	assert.Equal(t, 100, verify.Priority, "runs in automated cleaning when the node has a baseline")

	require.NoError(t, e.c.Provision(context.Background(), id, ProvisionRequest{Target: "provide"}))
	n := e.wait(t, id, state.CleanFailed)
	require.NotNil(t, n.LastError)
	assert.Contains(t, *n.LastError, "firmware.verify")
	assert.Contains(t, *n.LastError, "bmc runs 1.0.0, the baseline allows 2.0 or 2.1")
	assert.NotContains(t, *n.LastError, "bios runs")
}

func keysOf(steps []protocol.Step) []string {
	var out []string
	for _, s := range steps {
		if s.Interface == protocol.InterfaceFirmware {
			out = append(out, s.Key())
		}
	}
	return out
}

// A BMC that stops answering after its own update (longer than the BMC
// client's retries) is waited for; one away longer than OfflineTimeout
// fails the step, saying so.
func TestFirmwareUpdateWaitsForABMCThatRestarts(t *testing.T) {
	for _, tc := range []struct {
		name    string
		offline time.Duration
		wantErr string
	}{
		{name: "back within the bound", offline: 600 * time.Millisecond},
		{name: "away too long", offline: 10 * time.Second, wantErr: "the BMC has not answered for"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := fwConfig()
			cfg.Firmware.OfflineTimeout, cfg.Firmware.VerifyTimeout = 1500*time.Millisecond, 5*time.Second
			st := openSQLite(t)
			f := bmc.NewFake()
			e := startBIOSOnWith(t, bmc.HardwareFake, cfg, st, f, bmc.RetryPolicy{Attempts: 2, Initial: 10 * time.Millisecond, Max: 10 * time.Millisecond, MaxElapsed: 50 * time.Millisecond})
			id := e.node(t)
			f.SetFirmwareImage("http://images.test/bmc.bin", bmc.FakeFirmwareImage{Component: "bmc", Version: "2"})
			f.SetFirmwareKnobs(id, bmc.FakeFirmwareKnobs{OfflineAfterBMCUpdate: tc.offline})
			require.NoError(t, e.clean(t, id, updateStep(fwSetting("bmc", "http://images.test/bmc.bin"))))
			if tc.wantErr == "" {
				n := e.wait(t, id, state.Manageable)
				require.Nil(t, n.LastError)
				assert.Contains(t, history(t, e.st, id), "firmware of bmc updated: 1.0.0 → 2")
				return
			}
			n := e.wait(t, id, state.CleanFailed)
			require.NotNil(t, n.LastError)
			assert.Contains(t, *n.LastError, tc.wantErr)
			assert.Contains(t, *n.LastError, "during the update of bmc")
		})
	}
}

// The update request is sent once: a busy answer (nothing started) is
// asked again next round; an answer lost after the BMC took it, or a
// request half sent when the controller stopped, fails the step rather
// than risk a second flash.
func TestFirmwareUpdateRequestIsNeverSentTwice(t *testing.T) {
	t.Run("busy, then accepted", func(t *testing.T) {
		e := startBIOS(t, bmc.HardwareFake, fwConfig())
		id := e.node(t)
		e.f.SetFirmwareImage("http://images.test/bmc.bin", bmc.FakeFirmwareImage{Component: "bmc", Version: "2"})
		e.f.SetFirmwareKnobs(id, bmc.FakeFirmwareKnobs{BusyUpdates: 2})
		require.NoError(t, e.clean(t, id, updateStep(fwSetting("bmc", "http://images.test/bmc.bin"))))
		require.Nil(t, e.wait(t, id, state.Manageable).LastError)
		assert.Equal(t, 3, count(commands(e.f, id), "update_firmware"), "two busy answers, then the one that started the task")
	})
	t.Run("answer lost", func(t *testing.T) {
		e := startBIOS(t, bmc.HardwareFake, fwConfig())
		id := e.node(t)
		e.f.SetFirmwareImage("http://images.test/bmc.bin", bmc.FakeFirmwareImage{Component: "bmc", Version: "2"})
		e.f.SetFirmwareKnobs(id, bmc.FakeFirmwareKnobs{LostUpdateAnswers: 1})
		require.NoError(t, e.clean(t, id, updateStep(fwSetting("bmc", "http://images.test/bmc.bin"))))
		n := e.wait(t, id, state.CleanFailed)
		require.NotNil(t, n.LastError)
		assert.Contains(t, *n.LastError, "it may have started the flash, so it is not asked again")
		assert.Contains(t, *n.LastError, "the node was left powered as it was")
		assert.Equal(t, 1, count(commands(e.f, id), "update_firmware"))
	})
	t.Run("half sent when the controller stopped", func(t *testing.T) {
		e := startBIOS(t, bmc.HardwareFake, fwConfig())
		id := e.node(t)
		e.f.SetFirmwareImage("http://images.test/bmc.bin", bmc.FakeFirmwareImage{Component: "bmc", Version: "2"})
		e.f.SetFirmwareKnobs(id, bmc.FakeFirmwareKnobs{StallTasks: true})
		require.NoError(t, e.clean(t, id, updateStep(fwSetting("bmc", "http://images.test/bmc.bin"))))
		require.Eventually(t, func() bool {
			n, err := e.st.GetNode(context.Background(), id)
			require.NoError(t, err)
			return n.Operation.Firmware != nil && n.Operation.Firmware.Items[0].Phase == store.FirmwareFlashing
		}, 5*time.Second, 5*time.Millisecond)
		e.stop()
		// as if the controller had died between the marker and the answer
		_, err := store.MutateNode(context.Background(), e.st, id, func(m *store.Node) error {
			m.Operation.Firmware.Items[0].Phase, m.Operation.Firmware.Items[0].Task = store.FirmwareRequesting, ""
			return nil
		})
		require.NoError(t, err)
		e2 := startBIOSOn(t, bmc.HardwareFake, fwConfig(), e.st, e.f)
		n := e2.wait(t, id, state.CleanFailed)
		require.NotNil(t, n.LastError)
		assert.Contains(t, *n.LastError, "whether the BMC started is unknown, so it is not asked again")
		assert.Equal(t, 1, count(commands(e.f, id), "update_firmware"))
	})
}

func count(list []string, s string) int {
	n := 0
	for _, x := range list {
		if x == s {
			n++
		}
	}
	return n
}

// A firmware failure while the BMC may still be flashing leaves the
// node's power alone; any other failure tears the agent down (power off).
func TestFirmwareFailureWhileFlashingKeepsThePower(t *testing.T) {
	for _, tc := range []struct {
		name      string
		err       error
		wantPower bool
	}{
		{"flashing", flashing(errors.New("task stalled")), false},
		{"ended", errors.New("task failed"), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := start(t, &scriptDriver{}, Config{}, nil)
			ctx := context.Background()
			n := storetest.NewNode("")
			n.Driver, n.ProvisionState = "script", string(state.CleanWait)
			n.Interfaces.Deploy = "direct"
			fw := protocol.Step{Interface: "firmware", Step: "update"}
			n.Operation.Clean = &store.StepPlan{Steps: []protocol.Step{fw}}
			n.CleanStep = stepToMap(fw)
			n.Operation.Agent = store.AgentSession{Token: "t", BootID: "b", Booted: true}
			require.NoError(t, e.st.CreateNode(ctx, n))
			e.stop() // the step's end alone, no worker acting on the node
			require.NoError(t, e.c.CompleteAsyncStep(ctx, n.UUID, "firmware.update", tc.err))
			got, err := e.st.GetNode(ctx, n.UUID)
			require.NoError(t, err)
			assert.Equal(t, string(state.CleanFailed), got.ProvisionState)
			assert.Equal(t, tc.wantPower, got.TargetPowerState != nil, "power-off asked: %v", got.TargetPowerState)
			assert.Empty(t, got.Operation.Agent.Token, "the agent's token dies either way")
		})
	}
}
