package api

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/bmc"
	"github.com/anvil-metal/anvil/controller/conductor"
	"github.com/anvil-metal/anvil/controller/simagent"
)

// newBMCAgentEnv is newBIOSEnv with agent timings: in-band steps run
// through the simulated agent.
func newBMCAgentEnv(t *testing.T) (*testEnv, *bmc.Fake) {
	t.Helper()
	cc := agentConfig()
	cc.Host, cc.AutomatedClean = "test-host", true
	cc.Firmware = conductor.FirmwareConfig{TaskTimeout: 5 * time.Second, StallTimeout: 5 * time.Second, OfflineTimeout: 5 * time.Second,
		VerifyTimeout: 5 * time.Second, ActivationSettle: 50 * time.Millisecond, GoneGrace: 100 * time.Millisecond}
	return newBMCEnv(t, cc)
}

// TestOutOfBandStepsThenAnAgentStep: a bios step and a firmware update
// reboot an agent node out of its ramdisk; the agent steps after them run
// because the node boots the ramdisk again, as Ironic does.
func TestOutOfBandStepsThenAnAgentStep(t *testing.T) {
	e, f := newBMCAgentEnv(t)
	id := e.agentNode("oob1", nil)
	f.SetFirmwareImage("http://images.test/bios.bin", bmc.FakeFirmwareImage{Component: "bios", Version: "2.0.0"})
	steps := map[string]any{"clean_steps": []any{
		map[string]any{"interface": "bios", "step": "apply_configuration", "args": map[string]any{"settings": []any{map[string]any{"name": "LogicalProc", "value": "Disabled"}}}},
		map[string]any{"interface": "firmware", "step": "update", "args": map[string]any{"settings": []any{map[string]any{"component": "bios", "url": "http://images.test/bios.bin"}}}},
		map[string]any{"interface": "deploy", "step": "erase_devices_metadata"},
	}}
	r := e.provision("oob1", "clean", steps)
	require.Equal(t, 202, r.status, "%s", r.body)
	a := simagent.New(e.srv.URL, mac1)
	n := e.drive(a, "oob1", "manageable", nil)
	assert.Nil(t, n["last_error"])
	assert.Equal(t, "Disabled", f.BIOS(id).Current["LogicalProc"])
	active, _ := f.FirmwareVersions(id)
	assert.Equal(t, "2.0.0", active["bios"])
	assert.Contains(t, a.Ran(), "deploy.erase_devices_metadata", "the agent step ran after both")
	hist := historyText(e, "oob1")
	assert.Contains(t, hist, "step bios.apply_configuration reboots the node out of the agent ramdisk: the agent's token is revoked")
	assert.Contains(t, hist, "step bios.apply_configuration rebooted the node out of the agent ramdisk; booting the ramdisk again")
	assert.Contains(t, hist, "step firmware.update rebooted the node out of the agent ramdisk; booting the ramdisk again")
	assert.Contains(t, hist, "clean step firmware.update finished: firmware updated: bios 1.0.0 → 2.0.0")

	bios := e.do("GET", "/v1/nodes/oob1/bios/LogicalProc", latest, nil)
	require.Equal(t, 200, bios.status)
	assert.Equal(t, "Disabled", bios.json(t)["LogicalProc"].(map[string]any)["value"], "the cache refreshed after the step")
}
