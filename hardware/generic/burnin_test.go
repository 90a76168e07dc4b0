package generic

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/hardware"
	"github.com/anvil-metal/anvil/hardware/burnin"
	"github.com/anvil-metal/anvil/hardware/internal/testdev"
	"github.com/anvil-metal/anvil/protocol"
)

// The burn-in steps run through the dispatcher with the driver_info keys
// as arguments, and their results say in one line what happened.
func TestBurninSteps(t *testing.T) {
	dev := testdev.Loop(t, 8<<20, false)
	d := dispatcher(t, Config{Root: "/", Guard: hardware.NewGuard(outside, []string{dev})})
	ctx := context.Background()
	tests := []struct {
		step string
		args map[string]any
		want string
	}{
		{"burnin_cpu", map[string]any{burnin.ArgCPUTimeout: 1.0, burnin.ArgCPUCount: 1.0}, "all answers right"},
		{"burnin_memory", map[string]any{burnin.ArgVMTimeout: "1", burnin.ArgVMBytes: "8M"}, "no errors"},
		{"burnin_disk", map[string]any{burnin.ArgDiskLoops: 1.0}, dev + " passed"},
	}
	for _, tt := range tests {
		t.Run(tt.step, func(t *testing.T) {
			res, err := d.Run(ctx, hardware.KindClean, tt.step, tt.args, nil)
			require.NoError(t, err)
			s, ok := res.(interface{ Summary() string })
			require.True(t, ok, "%T has a summary", res)
			assert.Contains(t, s.Summary(), tt.want)
		})
	}
}

func TestBurninBadArgs(t *testing.T) {
	d := dispatcher(t, Config{Root: "/", Guard: hardware.NewGuard(outside, []string{"/dev/null-test"})})
	for step, args := range map[string]map[string]any{
		"burnin_cpu":     {burnin.ArgCPUTimeout: "never"},
		"burnin_memory":  {burnin.ArgVMBytes: "much"},
		"burnin_disk":    {burnin.ArgDiskLoops: -1.0},
		"burnin_network": {},
	} {
		t.Run(step, func(t *testing.T) {
			_, err := d.Run(context.Background(), hardware.KindClean, step, args, nil)
			var pe *protocol.Error
			require.ErrorAs(t, err, &pe)
			assert.Equal(t, protocol.ErrTypeInvalidArgs, pe.Type)
			assert.Contains(t, pe.Message, step)
		})
	}
	_, err := d.Run(context.Background(), hardware.KindClean, "burnin_cpu", map[string]any{"bmc_password": "x"}, nil)
	assert.ErrorContains(t, err, "unexpected arguments: bmc_password")
}
