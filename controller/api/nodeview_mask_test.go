package api

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/anvil-metal/anvil/controller/store"
	"github.com/anvil-metal/anvil/protocol"
)

// The running write_image command's config drive is the tenant's
// (user_data may hold credentials): driver_internal_info masks it as
// instance_info does, and leaves the rest of the command readable.
func TestDriverInternalInfoMasksTheCommandsConfigDrive(t *testing.T) {
	n := &store.Node{UUID: "n1"}
	n.Operation.Agent.Command = &store.AgentCommand{Command: protocol.Command{ID: "c1", Name: "execute_deploy_step",
		Step: &protocol.Step{Interface: "deploy", Step: "write_image", Args: map[string]any{
			"configdrive": "H4sIAAAA-secret", "image_source": "http://images/jammy.img", "image_url": "http://images/x.img"}}}}
	info := maskCommandArgs(n.InternalInfo())
	args := info["agent_command"].(map[string]any)["step"].(map[string]any)["args"].(map[string]any)
	assert.Equal(t, "******", args["configdrive"])
	assert.Equal(t, "http://images/x.img", args["image_url"], "the rest of the command shows as before")
	assert.Equal(t, "http://images/jammy.img", args["image_source"])
	assert.Equal(t, "H4sIAAAA-secret", n.Operation.Agent.Command.Step.Args["configdrive"], "the stored command is not changed")
	assert.NotPanics(t, func() { maskCommandArgs(map[string]any{"agent_command": "odd"}) })
}
