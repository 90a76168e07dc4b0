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
	assert.Zero(t, withBurninArgs(info, erase).MaxSeconds)
	require.NoError(t, burninCPUStep().CheckArgs(withBurninArgs(info, burninCPUStep()).Args), "the agent accepts what is sent")
}

// A time-bound burn-in is limited by its own time (Ironic's 24-hour
// default exceeds --step-timeout's 12 h), not by --step-timeout.
func TestBurninStepLimit(t *testing.T) {
	step := func(name string, args map[string]protocol.ArgInfo) protocol.Step {
		return protocol.Step{Interface: "deploy", Step: name, ArgsInfo: args}
	}
	cpu := step("burnin_cpu", map[string]protocol.ArgInfo{"agent_burnin_cpu_timeout": {}})
	mem := step("burnin_memory", map[string]protocol.ArgInfo{"agent_burnin_vm_timeout": {}})
	netw := step("burnin_network", map[string]protocol.ArgInfo{"agent_burnin_fio_network_runtime": {}, "agent_burnin_fio_network_pairing_timeout": {}})
	disk := step("burnin_disk", map[string]protocol.ArgInfo{"agent_burnin_fio_disk_runtime": {}})
	limited := cpu
	limited.MaxSeconds = 99
	tests := []struct {
		name string
		info map[string]any
		step protocol.Step
		want int
	}{
		{"cpu default", nil, cpu, 86400 + 1800},
		{"cpu 30 s", map[string]any{"agent_burnin_cpu_timeout": 30.0}, cpu, 30 + 1800},
		{"cpu as a string", map[string]any{"agent_burnin_cpu_timeout": "600"}, cpu, 600 + 1800},
		{"cpu nonsense: the agent refuses it", map[string]any{"agent_burnin_cpu_timeout": "soon"}, cpu, 86400 + 1800},
		{"memory", map[string]any{"agent_burnin_vm_timeout": 3600.0}, mem, 3600 + 1800},
		{"network both ways", map[string]any{"agent_burnin_fio_network_runtime": 600.0}, netw, 2*600 + 2*900 + 1800},
		{"disk by loops keeps --step-timeout", nil, disk, 0},
		{"a step's own max_seconds stays", nil, limited, 99},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, withBurninArgs(tt.info, tt.step).MaxSeconds)
		})
	}
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
	assert.Equal(t, 30+burninMargin, cmd.Step.MaxSeconds, "its own limit, not --step-timeout")
}
