package conductor

// Burn-in options: the node's agent_burnin_* driver_info keys reach the
// agent as the step's arguments, and nothing else of driver_info does.

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/controller/state"
	"github.com/anvil-metal/anvil/controller/store"
	"github.com/anvil-metal/anvil/controller/store/sqlite"
	"github.com/anvil-metal/anvil/controller/store/storetest"
	"github.com/anvil-metal/anvil/protocol"
)

func burninCPUStep() protocol.Step {
	return protocol.Step{Interface: "deploy", Step: "burnin_cpu", Abortable: true, ArgsInfo: map[string]protocol.ArgInfo{
		"agent_burnin_cpu_timeout": {}, "agent_burnin_cpu_cpu": {},
		"ipmi_password": {}, // as a rogue agent might list it: the prefix still keeps it out
	}}
}

func TestWithBurninArgs(t *testing.T) {
	info := map[string]any{
		"agent_burnin_cpu_timeout":    30.0,
		"agent_burnin_cpu_cpu":        "2",
		"agent_burnin_cpu_outputfile": "/var/log/cpu.log", // IPA's, not listed by our agent
		"agent_burnin_vm_timeout":     60.0,               // another step's
		"ipmi_password":               "secret",
		"redfish_address":             "https://bmc",
	}
	got := withBurninArgs(info, burninCPUStep())
	assert.Equal(t, map[string]any{"agent_burnin_cpu_timeout": 30.0, "agent_burnin_cpu_cpu": "2"}, got.Args)

	given := burninCPUStep()
	given.Args = map[string]any{"agent_burnin_cpu_timeout": 5.0}
	got = withBurninArgs(info, given)
	assert.Equal(t, map[string]any{"agent_burnin_cpu_timeout": 5.0, "agent_burnin_cpu_cpu": "2"}, got.Args, "an argument given with the step wins")
	assert.Equal(t, map[string]any{"agent_burnin_cpu_timeout": 5.0}, given.Args, "the caller's map is not changed")

	erase := protocol.Step{Interface: "deploy", Step: "erase_devices"}
	assert.Nil(t, withBurninArgs(info, erase).Args, "steps without burn-in arguments get none")
	require.NoError(t, burninCPUStep().CheckArgs(withBurninArgs(info, burninCPUStep()).Args), "the agent accepts what is sent")
}

// The command the agent receives carries the options the node has when
// the step starts.
func TestBurninCommandCarriesDriverInfoOptions(t *testing.T) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, t.TempDir()+"/anvil.db")
	require.NoError(t, err)
	defer st.Close()
	n := storetest.NewNode("")
	n.Driver, n.ProvisionState = "script", string(state.Cleaning)
	n.Interfaces.Deploy = "direct"
	n.TargetProvisionState, n.Reservation = strp("manageable"), strp("dead-controller")
	n.DriverInfo = map[string]any{"agent_burnin_cpu_timeout": 30.0, "ipmi_password": "secret"}
	steps := []protocol.Step{burninCPUStep()}
	n.Operation.Clean = &store.StepPlan{Steps: steps}
	n.Operation.ManualClean = true
	n.Operation.Agent.Booted = true
	n.CleanStep = stepToMap(steps[0])
	require.NoError(t, st.CreateNode(ctx, n))

	e := start(t, &scriptDriver{}, Config{}, st)
	got := e.wait(t, n.UUID, state.CleanWait)
	cmd := got.Operation.Agent.Command
	require.NotNil(t, cmd)
	require.NotNil(t, cmd.Step)
	assert.Equal(t, "burnin_cpu", cmd.Step.Step)
	assert.Equal(t, map[string]any{"agent_burnin_cpu_timeout": 30.0}, cmd.Step.Args)
}
