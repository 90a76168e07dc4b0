package api

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/controller/simagent"
	"github.com/anvil-metal/anvil/protocol"
)

// verifyCommand is the last verify_hardware command the agent received.
func verifyCommand(t *testing.T, a *simagent.Agent) protocol.Command {
	t.Helper()
	var last *protocol.Command
	for _, c := range a.Commands() {
		if c.Step != nil && c.Step.Key() == "deploy.verify_hardware" {
			last = &c
		}
	}
	require.NotNil(t, last, "verify_hardware reached the agent")
	return *last
}

// deploy.verify_hardware gets the node's properties and its last
// inspection in the command's node context (the agent fills the step's
// properties and inventory arguments from there); a node never inspected
// gets properties only.
func TestVerifyHardwareGetsTheInspection(t *testing.T) {
	e := newEnvWith(t, agentConfig(), ":memory:")
	e.agentNode("vh", map[string]any{"properties": map[string]any{"memory_mb": 8192}})
	a := simagent.New(e.srv.URL, mac1)
	steps := map[string]any{"clean_steps": []map[string]any{{"interface": "deploy", "step": "verify_hardware"}}}

	require.Equal(t, 202, e.provision("vh", "clean", steps).status)
	e.drive(a, "vh", "manageable", nil)
	c := verifyCommand(t, a)
	assert.NotContains(t, c.Node, "inventory", "never inspected")
	assert.Equal(t, float64(8192), c.Node["properties"].(map[string]any)["memory_mb"])

	require.Equal(t, 202, e.provision("vh", "inspect", nil).status)
	a.Boot()
	e.drive(a, "vh", "manageable", nil)
	a.Boot()
	a.Outcomes["deploy.verify_hardware"] = simagent.Outcome{Fail: "the hardware differs from what is expected (1 problems): disk SIM-0001 (inspection): 64.0 GiB at /dev/nvme0n1 → missing",
		Result: map[string]any{"passed": false}, Summary: "hardware verification FAILED: 1 differences failed, 0 accepted"}
	require.Equal(t, 202, e.provision("vh", "clean", steps).status)
	n := e.drive(a, "vh", "clean failed", nil)
	assert.Contains(t, n["last_error"], "disk SIM-0001 (inspection): 64.0 GiB at /dev/nvme0n1 → missing")
	c = verifyCommand(t, a)
	inv := c.Node["inventory"].(map[string]any)
	assert.Equal(t, "SIM-0001", inv["disks"].([]any)[0].(map[string]any)["serial"])

	res := e.do("GET", "/v1/nodes/vh/steps/results", latest, nil).json(t)["results"].([]any)
	require.NotEmpty(t, res)
	last := res[0].(map[string]any)
	assert.Equal(t, "deploy.verify_hardware", last["step"])
	assert.Equal(t, "hardware verification FAILED: 1 differences failed, 0 accepted", last["summary"])
	assert.NotContains(t, last["args"], "inventory", "the inspection travels with the command, not in the stored arguments")
}
