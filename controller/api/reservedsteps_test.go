package api

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/controller/simagent"
	"github.com/anvil-metal/anvil/controller/store"
)

// TestPowerStepsInCleaning: power_on, power_off and reboot are steps the
// conductor runs itself (Ironic 22.1). On an agent node a reboot followed
// by an in-band step boots the ramdisk again (a new session) and the agent
// step runs after it; a power_off at the end leaves the node off; with
// disable_power_off, power_off fails the clean with Ironic's error.
func TestPowerStepsInCleaning(t *testing.T) {
	e, f := newBMCAgentEnv(t)
	id := e.agentNode("ps", nil)
	a := simagent.New(e.srv.URL, mac1)
	steps := map[string]any{"clean_steps": []any{
		map[string]any{"interface": "deploy", "step": "erase_devices_metadata"},
		map[string]any{"interface": "power", "step": "reboot"},
		map[string]any{"interface": "deploy", "step": "erase_devices_metadata"},
		map[string]any{"interface": "power", "step": "power_off"},
	}}
	start := len(f.Calls(id))
	r := e.provision("ps", "clean", steps)
	require.Equal(t, 202, r.status, "%s", r.body)
	n := e.drive(a, "ps", "manageable", nil)
	assert.Nil(t, n["last_error"])
	assert.Equal(t, []string{"deploy.erase_devices_metadata", "deploy.erase_devices_metadata"}, a.Steps(), "the agent ran both, across the reboot")
	assert.Equal(t, "power off", n["power_state"])
	hist := historyText(e, "ps")
	for _, want := range []string{"clean step power.reboot started (2/4)",
		"step power.reboot rebooted the node out of the agent ramdisk; booting the ramdisk again",
		"step power.power_off reboots the node out of the agent ramdisk: the agent's token is revoked",
		"clean step power.power_off finished"} {
		assert.Contains(t, hist, want)
	}
	cmds := powerCommands(f.Calls(id)[start:])
	assert.Equal(t, "off", cmds[len(cmds)-1], "the last power command is the step's: %v", cmds)

	// disable_power_off: power_off is refused when it runs
	require.Equal(t, 200, e.do("PATCH", "/v1/nodes/ps", v95, []map[string]any{{"op": "replace", "path": "/disable_power_off", "value": true}}).status)
	a.Boot()
	r = e.provision("ps", "clean", map[string]any{"clean_steps": []any{map[string]any{"interface": "power", "step": "power_off"}}})
	require.Equal(t, 202, r.status, "%s", r.body)
	n = e.drive(a, "ps", "clean failed", nil)
	assert.Contains(t, n["last_error"], "Failed to set node power state to power off.")
}

// TestStepsOnChildNodes: a step with execute_on_child_nodes runs on the
// node's children (those limit_child_node_execution names, when given)
// under their reservation, out of band, and the parent's history says
// where; a child that is busy fails the step; bad keys are refused with
// Ironic's texts.
func TestStepsOnChildNodes(t *testing.T) {
	e, f := newBIOSEnv(t)
	parent := e.createNode("dpu-host", map[string]any{"deploy_interface": "fake"})["uuid"].(string)
	var kids []string
	for _, name := range []string{"dpu-0", "dpu-1"} {
		kids = append(kids, e.createNode(name, map[string]any{"deploy_interface": "fake", "parent_node": parent})["uuid"].(string))
	}
	require.Equal(t, 202, e.provision("dpu-host", "manage", nil).status)
	e.waitState("dpu-host", "manageable")
	calls := map[string]int{}
	for _, k := range kids {
		calls[k] = len(f.Calls(k))
	}

	for name, c := range map[string]struct {
		step  map[string]any
		fault string
	}{
		"eocn not a boolean": {map[string]any{"interface": "power", "step": "reboot", "execute_on_child_nodes": "yes"},
			"Invalid clean step 0: execute_on_child_nodes must be a boolean"},
		"limit not a UUID": {map[string]any{"interface": "power", "step": "reboot", "execute_on_child_nodes": true, "limit_child_node_execution": []any{"dpu-0"}},
			"Invalid entry detected for execute_on_child_node parameter in step reboot."},
	} {
		r := e.provision("dpu-host", "clean", map[string]any{"clean_steps": []any{c.step}})
		require.Equal(t, 400, r.status, "%s: %s", name, r.body)
		assert.Equal(t, c.fault, r.fault(t), name)
	}

	r := e.provision("dpu-host", "clean", map[string]any{"clean_steps": []any{
		map[string]any{"interface": "power", "step": "power_on", "execute_on_child_nodes": true, "limit_child_node_execution": []any{kids[1]}}}})
	require.Equal(t, 202, r.status, "%s", r.body)
	n := e.waitState("dpu-host", "manageable")
	require.Nil(t, n["last_error"])
	assert.Empty(t, powerCommands(f.Calls(kids[0])[calls[kids[0]]:]), "dpu-0 was not named by the limit")
	assert.Equal(t, []string{"on"}, powerCommands(f.Calls(kids[1])[calls[kids[1]]:]))
	assert.Equal(t, "power on", e.do("GET", "/v1/nodes/dpu-1", latest, nil).json(t)["power_state"])

	r = e.provision("dpu-host", "clean", map[string]any{"clean_steps": []any{
		map[string]any{"interface": "bios", "step": "apply_configuration", "execute_on_child_nodes": true,
			"args": map[string]any{"settings": []any{map[string]any{"name": "ProcVirtualization", "value": "Disabled"}}}},
	}})
	require.Equal(t, 202, r.status, "%s", r.body)
	n = e.waitState("dpu-host", "manageable")
	require.Nil(t, n["last_error"])
	for _, k := range kids {
		assert.Equal(t, "Disabled", f.BIOS(k).Current["ProcVirtualization"], "the bios step ran on child %s", k)
		child := e.do("GET", "/v1/nodes/"+k, latest, nil).json(t)
		assert.Nil(t, child["reservation"], "the child's reservation was given back")
		assert.Equal(t, "enroll", child["provision_state"], "a child keeps its own state")
	}
	assert.Equal(t, map[string]any{}, f.BIOS(parent).Pending, "nothing ran on the parent")
	hist := historyText(e, "dpu-host")
	assert.Contains(t, hist, "clean step power.power_on ran on child nodes "+kids[1])
	assert.Contains(t, hist, "clean step bios.apply_configuration ran on child nodes "+strings.Join(kids, ", "))

	// a child busy with its own work: NodeLocked fails the step
	_, err := store.MutateNode(context.Background(), e.st, kids[0], func(n *store.Node) error { n.Reservation = strp("other-host"); return nil })
	require.NoError(t, err)
	r = e.provision("dpu-host", "clean", map[string]any{"clean_steps": []any{
		map[string]any{"interface": "power", "step": "reboot", "execute_on_child_nodes": true}}})
	require.Equal(t, 202, r.status, "%s", r.body)
	n = e.waitState("dpu-host", "clean failed")
	assert.Contains(t, n["last_error"], "while executing step power.reboot on child node "+kids[0])
}
