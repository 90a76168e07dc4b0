package api

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/bmc"
	"github.com/anvil-metal/anvil/controller/simagent"
)

const v95 = "1.95"

// powerCommands are the BMC's power commands among calls.
func powerCommands(calls []bmc.FakeCall) []string {
	var out []string
	for _, c := range calls {
		if strings.HasPrefix(c.Command, "set_power ") {
			out = append(out, strings.TrimPrefix(c.Command, "set_power "))
		}
	}
	return out
}

// TestDisablePowerOffFlows: a node with disable_power_off goes through
// inspection, cleaning, deploy, servicing and tear-down with reboots where the flows
// power off other nodes; the BMC never gets a power-off, and the API
// refuses one with Ironic's error. The same flows on a node without the
// flag do power it off (the control).
func TestDisablePowerOffFlows(t *testing.T) {
	for _, flag := range []bool{true, false} {
		t.Run(map[bool]string{true: "disable_power_off", false: "control"}[flag], func(t *testing.T) {
			e, f := newBMCAgentEnv(t)
			id := e.agentNode("dpo", map[string]any{"instance_info": map[string]any{"image_source": "http://127.0.0.1:8080/img.raw",
				"image_checksum": "sha256:" + strings.Repeat("ab", 32)}})
			r := e.do("PATCH", "/v1/nodes/dpo", v95, []map[string]any{{"op": "replace", "path": "/disable_power_off", "value": flag}})
			require.Equal(t, 200, r.status, "%s", r.body)
			assert.Equal(t, flag, r.json(t)["disable_power_off"])
			start := len(f.Calls(id))

			for _, target := range []string{"power off", "soft power off"} {
				r := e.do("PUT", "/v1/nodes/dpo/states/power", v95, map[string]any{"target": target})
				if flag {
					require.Equal(t, 409, r.status, "%s", r.body)
					assert.Equal(t, "Failed to set node power state to "+target+".", r.fault(t))
				} else {
					require.Equal(t, 202, r.status, "%s", r.body)
					require.Eventually(t, func() bool {
						n := e.do("GET", "/v1/nodes/dpo", v95, nil).json(t)
						return n["target_power_state"] == nil && n["reservation"] == nil
					}, 5*time.Second, 5*time.Millisecond)
				}
			}

			a := simagent.New(e.srv.URL, mac1)
			require.Equal(t, 202, e.provision("dpo", "inspect", nil).status)
			e.drive(a, "dpo", "manageable", nil)
			a.Boot()
			require.Equal(t, 202, e.provision("dpo", "provide", nil).status)
			e.drive(a, "dpo", "available", nil)
			a.Boot()
			require.Equal(t, 202, e.provision("dpo", "active", nil).status)
			n := e.drive(a, "dpo", "active", nil)
			assert.Equal(t, "power on", n["power_state"])
			// servicing with an in-band step boots the agent on the active
			// node and the instance again after it (1.87)
			a.Boot()
			r = e.do("PUT", "/v1/nodes/dpo/states/provision", "1.95", map[string]any{"target": "service",
				"service_steps": []map[string]any{{"interface": "deploy", "step": "burnin_cpu", "args": map[string]any{}}}})
			require.Equal(t, 202, r.status, "%s", r.body)
			n = e.drive(a, "dpo", "active", nil)
			assert.Nil(t, n["last_error"])
			assert.Equal(t, "power on", n["power_state"])
			a.Boot()
			require.Equal(t, 202, e.provision("dpo", "deleted", nil).status)
			n = e.drive(a, "dpo", "available", nil)

			cmds := powerCommands(f.Calls(id)[start:])
			t.Log(cmds)
			if flag {
				assert.NotContains(t, cmds, "off", "never powered off: %v", cmds)
				assert.NotContains(t, cmds, "soft", "never shut down: %v", cmds)
				assert.Equal(t, "power on", n["power_state"])
				assert.Equal(t, bmc.PowerOn, f.State(id).Power)
				// inspection end, cleaning end (twice), the boot into the
				// instance, the service's boots and the tear-down reboot
				// instead
				assert.GreaterOrEqual(t, strings.Count(strings.Join(cmds, " "), "reset"), 6, "%v", cmds)
			} else {
				assert.Contains(t, cmds, "off", "the control is powered off: %v", cmds)
				assert.Equal(t, "power off", n["power_state"])
			}
		})
	}
}

// TestDisablePowerOffVersions: the field is absent below 1.95 and refused
// there on create and PATCH (406), as Ironic's newer fields are.
func TestDisablePowerOffVersions(t *testing.T) {
	e := newEnv(t)
	e.createNode("d1", nil)
	assert.NotContains(t, e.do("GET", "/v1/nodes/d1", "1.94", nil).json(t), "disable_power_off")
	got := e.do("GET", "/v1/nodes/d1", v95, nil).json(t)
	assert.Equal(t, false, got["disable_power_off"])
	assert.NotContains(t, got, "health", "health is 1.109")

	r := e.do("POST", "/v1/nodes", "1.94", map[string]any{"driver": "fake-hardware", "disable_power_off": true})
	assert.Equal(t, 406, r.status, "%s", r.body)
	r = e.do("PATCH", "/v1/nodes/d1", "1.94", []map[string]any{{"op": "replace", "path": "/disable_power_off", "value": true}})
	assert.Equal(t, 406, r.status, "%s", r.body)
	r = e.do("GET", "/v1/nodes/d1?fields=disable_power_off", "1.94", nil)
	assert.Equal(t, 406, r.status, "%s", r.body)

	r = e.do("POST", "/v1/nodes", v95, map[string]any{"driver": "fake-hardware", "name": "d2", "disable_power_off": "True"})
	require.Equal(t, 201, r.status, "%s", r.body)
	assert.Equal(t, true, r.json(t)["disable_power_off"], "Ironic's string spelling of a boolean")
	r = e.do("POST", "/v1/nodes", v95, map[string]any{"driver": "fake-hardware", "disable_power_off": "maybe"})
	assert.Equal(t, 400, r.status, "%s", r.body)
	r = e.do("GET", "/v1/nodes/d2?fields=disable_power_off", v95, nil)
	require.Equal(t, 200, r.status)
	assert.Equal(t, true, r.json(t)["disable_power_off"])
}

// TestDisablePowerOffCleanFailure: a failed cleaning tears the agent down
// with a reboot out of the ramdisk instead of the power-off (the worker's
// scheduled power action), and the node stays powered.
func TestDisablePowerOffCleanFailure(t *testing.T) {
	e, f := newBMCAgentEnv(t)
	id := e.agentNode("dpf", nil)
	r := e.do("PATCH", "/v1/nodes/dpf", v95, []map[string]any{{"op": "replace", "path": "/disable_power_off", "value": true}})
	require.Equal(t, 200, r.status, "%s", r.body)
	a := simagent.New(e.srv.URL, mac1)
	a.Outcomes["deploy.erase_devices"] = simagent.Outcome{Fail: "Failed to erase /dev/nvme0n1"}
	require.Equal(t, 202, e.provision("dpf", "provide", nil).status)
	n := e.drive(a, "dpf", "clean failed", nil)
	assert.Contains(t, n["last_error"], "Failed to erase /dev/nvme0n1")
	assert.Equal(t, "power on", n["power_state"], "rebooted out of the ramdisk, not powered off")
	cmds := powerCommands(f.Calls(id))
	assert.NotContains(t, cmds, "off", "%v", cmds)
	assert.Equal(t, "reset", cmds[len(cmds)-1], "the tear-down's reboot: %v", cmds)
	assert.Contains(t, historyText(e, "dpf"), "power action succeeded: rebooting")
}
