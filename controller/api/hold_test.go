package api

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/controller/simagent"
)

// TestHoldAndUnholdThroughTheAPI: a manual clean with a hold step rests in
// clean hold (shown with its target and hold step), unhold is refused
// below 1.85 with Ironic's 406 and outside a hold state with Ironic's 400,
// and at 1.85 it continues the clean to manageable. abort from a hold
// state fails the operation.
func TestHoldAndUnholdThroughTheAPI(t *testing.T) {
	e := newEnv(t)
	id := e.createNode("held", nil)["uuid"].(string)
	put := func(ver string, body map[string]any) resp {
		return e.do("PUT", "/v1/nodes/held/states/provision", ver, body)
	}
	require.Equal(t, 202, e.provision("held", "manage", nil).status)
	e.waitState("held", "manageable")

	r := put("1.85", map[string]any{"target": "unhold"})
	require.Equal(t, 400, r.status, string(r.body))
	assert.Equal(t, `The requested action "unhold" can not be performed on node "`+id+`" while it is in state "manageable".`, r.fault(t))

	steps := []map[string]any{{"interface": "bios", "step": "factory_reset"}, {"interface": "deploy", "step": "hold"},
		{"interface": "bios", "step": "cache_bios_settings"}}
	require.Equal(t, 202, e.provision("held", "clean", map[string]any{"clean_steps": steps}).status)
	n := e.waitState("held", "clean hold")
	assert.Equal(t, "manageable", n["target_provision_state"])
	assert.Equal(t, "hold", n["clean_step"].(map[string]any)["step"])

	for _, ver := range []string{"1.84", "1.82", "1.13"} {
		r = put(ver, map[string]any{"target": "unhold"})
		require.Equal(t, 406, r.status, "unhold at %s: %s", ver, r.body)
		assert.Equal(t, "Request not acceptable.", r.fault(t))
	}
	// the held node is listed and filtered by its state
	list := e.do("GET", "/v1/nodes?provision_state=clean+hold", latest, nil)
	require.Equal(t, 200, list.status, string(list.body))
	assert.Len(t, list.json(t)["nodes"], 1)

	require.Equal(t, 202, put("1.85", map[string]any{"target": "unhold"}).status)
	n = e.waitState("held", "manageable")
	assert.Nil(t, n["last_error"])
	assert.Nil(t, n["target_provision_state"])
	var hist []string
	for _, ev := range e.do("GET", "/v1/nodes/held/history", latest, nil).json(t)["history"].([]any) {
		hist = append(hist, ev.(map[string]any)["event"].(string))
	}
	assert.Contains(t, hist, "cleaning -> clean hold (hold)")
	assert.Contains(t, hist, "clean hold -> cleaning (unhold requested)")
	assert.Contains(t, hist, "clean step bios.cache_bios_settings finished")

	// abort from clean hold
	require.Equal(t, 202, e.provision("held", "clean", map[string]any{"clean_steps": steps[1:]}).status)
	e.waitState("held", "clean hold")
	require.Equal(t, 202, e.provision("held", "abort", nil).status)
	n = e.waitState("held", "clean failed")
	assert.Equal(t, `By request, the clean operation was aborted during or after the completion of step "deploy.hold"`, n["last_error"])
}

// TestHoldStepsAccepted: the hold step is checked like Ironic's reserved
// steps (no driver offers it): any step interface, in clean_steps and in
// deploy_steps (with a priority, like every deploy step).
func TestHoldStepsAccepted(t *testing.T) {
	e := newEnv(t)
	e.createNode("dh", map[string]any{"automated_clean": false})
	require.Equal(t, 202, e.provision("dh", "manage", nil).status)
	e.waitState("dh", "manageable")
	require.Equal(t, 202, e.provision("dh", "provide", nil).status)
	e.waitState("dh", "available")
	r := e.provision("dh", "active", map[string]any{"deploy_steps": []map[string]any{
		{"interface": "deploy", "step": "hold", "args": map[string]any{}, "priority": 60}}})
	require.Equal(t, 202, r.status, string(r.body))
	n := e.waitState("dh", "deploy hold")
	assert.Equal(t, "active", n["target_provision_state"])
	require.Equal(t, 202, e.do("PUT", "/v1/nodes/dh/states/provision", "1.85", map[string]any{"target": "unhold"}).status)
	e.waitState("dh", "active")
}

// TestHoldWithTheAgent: a manual clean through the agent, [erase metadata,
// hold, erase devices]: the agent runs the first step, the node holds in
// clean hold while the agent keeps heartbeating (no timeout, no command),
// and unhold sends it the next step; the clean ends in manageable.
func TestHoldWithTheAgent(t *testing.T) {
	e := newEnvWith(t, agentConfig(), ":memory:")
	e.agentNode("ah", nil)
	a := simagent.New(e.srv.URL, mac1)
	steps := []map[string]any{{"interface": "deploy", "step": "erase_devices_metadata"}, {"interface": "deploy", "step": "hold"},
		{"interface": "deploy", "step": "erase_devices"}}
	require.Equal(t, 202, e.provision("ah", "clean", map[string]any{"clean_steps": steps}).status)
	e.drive(a, "ah", "clean hold", nil)
	// (each erase step is preceded by the disk guard's inventory)
	assert.Equal(t, []string{"inventory", "deploy.erase_devices_metadata"}, a.Ran())
	for range 20 { // heartbeats while held are recorded and get no command
		resp, err := a.Heartbeat(context.Background())
		require.NoError(t, err)
		assert.Nil(t, resp.Command)
	}
	n := e.do("GET", "/v1/nodes/ah", latest, nil).json(t)
	assert.Equal(t, "clean hold", n["provision_state"])
	assert.Equal(t, "power on", n["power_state"], "the node stays in the ramdisk while held")

	require.Equal(t, 202, e.do("PUT", "/v1/nodes/ah/states/provision", "1.85", map[string]any{"target": "unhold"}).status)
	n = e.drive(a, "ah", "manageable", nil)
	assert.Nil(t, n["last_error"])
	assert.Equal(t, []string{"inventory", "deploy.erase_devices_metadata", "inventory", "deploy.erase_devices"}, a.Ran())
}
