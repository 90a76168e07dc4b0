package burnin

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseBytes(t *testing.T) {
	tests := []struct {
		in      string
		want    uint64
		wantErr bool
	}{
		{"98%", 980, false},
		{"50%", 500, false},
		{"4096", 4096, false},
		{"512b", 512, false},
		{"2k", 2048, false},
		{"64M", 64 << 20, false},
		{"1g", 1 << 30, false},
		{"1T", 1 << 40, false},
		{"0%", 0, true},
		{"101%", 0, true},
		{"0", 0, true},
		{"-1", 0, true},
		{"lots", 0, true},
		{"", 0, true},
		{"99999999999999999999t", 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseBytes(tt.in, 1000)
			if tt.wantErr {
				assert.Error(t, err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
}

func TestArgsDefaultsAreIronics(t *testing.T) {
	c, err := CPUArgs(nil)
	require.NoError(t, err)
	assert.Equal(t, CPUOptions{Duration: 24 * time.Hour}, c)

	m, err := MemoryArgs(map[string]any{}, 1000)
	require.NoError(t, err)
	assert.Equal(t, MemoryOptions{Duration: 24 * time.Hour, Bytes: 980}, m)

	d, err := DiskArgs(nil)
	require.NoError(t, err)
	assert.Equal(t, DiskOptions{Loops: 4}, d)

	n, err := NetworkArgs(map[string]any{ArgNetworkConfig: map[string]any{"role": "writer", "partner": "node-2"}})
	require.NoError(t, err)
	assert.Equal(t, NetworkOptions{Role: RoleWriter, Partner: "node-2", Runtime: 6 * time.Hour, PairingTimeout: 15 * time.Minute}, n)
}

func TestArgsFromDriverInfo(t *testing.T) {
	// driver_info set with `baremetal node set --driver-info k=v` holds strings
	c, err := CPUArgs(map[string]any{ArgCPUTimeout: "30", ArgCPUCount: 2.0})
	require.NoError(t, err)
	assert.Equal(t, CPUOptions{Duration: 30 * time.Second, Workers: 2}, c)

	m, err := MemoryArgs(map[string]any{ArgVMTimeout: 30.0, ArgVMBytes: "75%", ArgVMCount: "1"}, 1000)
	require.NoError(t, err)
	assert.Equal(t, MemoryOptions{Duration: 30 * time.Second, Bytes: 750, Workers: 1}, m)

	d, err := DiskArgs(map[string]any{ArgDiskRuntime: 30.0, ArgDiskLoops: 1.0})
	require.NoError(t, err)
	assert.Equal(t, DiskOptions{Loops: 1, Runtime: 30 * time.Second}, d)

	n, err := NetworkArgs(map[string]any{ArgNetworkConfig: `{"role": "reader", "partner": "10.0.0.2"}`, ArgNetworkRuntime: "60", ArgNetworkPairingTimeout: 5.0})
	require.NoError(t, err)
	assert.Equal(t, NetworkOptions{Role: RoleReader, Partner: "10.0.0.2", Runtime: time.Minute, PairingTimeout: 5 * time.Second}, n)
}

func TestArgsErrors(t *testing.T) {
	tests := []struct {
		name string
		run  func() error
		want string
	}{
		{"negative timeout", func() error { _, err := CPUArgs(map[string]any{ArgCPUTimeout: -1.0}); return err }, ArgCPUTimeout},
		{"timeout not a number", func() error { _, err := CPUArgs(map[string]any{ArgCPUTimeout: "soon"}); return err }, ArgCPUTimeout},
		{"fractional workers", func() error { _, err := CPUArgs(map[string]any{ArgCPUCount: 1.5}); return err }, ArgCPUCount},
		{"bad vm-bytes", func() error { _, err := MemoryArgs(map[string]any{ArgVMBytes: "all"}, 1000); return err }, ArgVMBytes},
		{"object as loops", func() error { _, err := DiskArgs(map[string]any{ArgDiskLoops: map[string]any{}}); return err }, ArgDiskLoops},
		{"nothing to run", func() error { _, err := DiskArgs(map[string]any{ArgDiskLoops: 0.0}); return err }, "nothing to run"},
		{"no pairing", func() error { _, err := NetworkArgs(nil); return err }, "dynamic pairing"},
		{"bad role", func() error {
			_, err := NetworkArgs(map[string]any{ArgNetworkConfig: map[string]any{"role": "both", "partner": "x"}})
			return err
		}, `unknown role "both"`},
		{"no partner", func() error {
			_, err := NetworkArgs(map[string]any{ArgNetworkConfig: map[string]any{"role": "writer"}})
			return err
		}, "no partner"},
		{"config not JSON", func() error { _, err := NetworkArgs(map[string]any{ArgNetworkConfig: "{role"}); return err }, "not a JSON object"},
		{"config a list", func() error { _, err := NetworkArgs(map[string]any{ArgNetworkConfig: []any{}}); return err }, "must be an object"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.run()
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.want)
		})
	}
}

// The step arguments the catalogue offers are the driver_info keys parsed.
func TestStepArgsNamesAreIronics(t *testing.T) {
	args := StepArgs()
	assert.Len(t, args, 4)
	assert.Contains(t, args["burnin_cpu"], "agent_burnin_cpu_timeout")
	assert.Contains(t, args["burnin_cpu"], "agent_burnin_cpu_cpu")
	assert.Contains(t, args["burnin_memory"], "agent_burnin_vm_timeout")
	assert.Contains(t, args["burnin_memory"], "agent_burnin_vm_vm-bytes")
	assert.Contains(t, args["burnin_disk"], "agent_burnin_fio_disk_loops")
	assert.Contains(t, args["burnin_disk"], "agent_burnin_fio_disk_runtime")
	assert.Contains(t, args["burnin_network"], "agent_burnin_fio_network_config")
	assert.Contains(t, args["burnin_network"], "agent_burnin_fio_network_runtime")
}
