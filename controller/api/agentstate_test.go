package api

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/controller/store"
	"github.com/anvil-metal/anvil/controller/store/storetest"
	"github.com/anvil-metal/anvil/protocol"
)

// TestNodeListsShowAgentState: the store keeps the agent's step cache and
// command status apart from the node and its lists do not read them, but
// driver_internal_info in a detailed list (or one asking for that field)
// shows them as GET of the node does, as Ironic's lists do.
func TestNodeListsShowAgentState(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	n := storetest.NewNode("agent-state")
	n.Operation.Agent.Token = "secret"
	n.Operation.Agent.Steps = &store.StepCache{Fingerprint: "fp",
		Clean: []protocol.Step{{Interface: "deploy", Step: "erase_devices", Priority: 10}}}
	n.Operation.Agent.CommandStatus = &protocol.CommandStatus{ID: "cmd-1", Name: protocol.CmdExecuteCleanStep,
		State: protocol.CommandRunning, Progress: &protocol.Progress{Percent: 42}}
	require.NoError(t, e.st.CreateNode(ctx, n))

	one := e.do("GET", "/v1/nodes/agent-state", "1.82", nil).json(t)["driver_internal_info"].(map[string]any)
	require.Contains(t, one, "agent_step_cache")
	require.Contains(t, one, "agent_command_status")
	assert.Equal(t, 42.0, one["agent_command_status"].(map[string]any)["progress"].(map[string]any)["percent"])

	for _, path := range []string{"/v1/nodes/detail", "/v1/nodes?fields=uuid,driver_internal_info"} {
		nodes := e.do("GET", path, "1.82", nil).json(t)["nodes"].([]any)
		require.Len(t, nodes, 1, path)
		assert.Equal(t, one, nodes[0].(map[string]any)["driver_internal_info"], path)
	}
}
