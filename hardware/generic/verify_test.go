package generic

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/anvil-metal/anvil/hardware"
	"github.com/anvil-metal/anvil/hardware/health"
	"github.com/anvil-metal/anvil/protocol"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// smartFixtures answers SMART reads with the health package's captured
// pages: the snapshot's NVMe drive is healthy or worn.
type smartFixtures struct{ nvme string }

func (s smartFixtures) NVMeSMARTLog(string) ([]byte, error) {
	return os.ReadFile(filepath.Join("..", "health", "testdata", "nvme", s.nvme))
}

func (smartFixtures) ATASMARTData(string) ([]byte, error) {
	return os.ReadFile(filepath.Join("..", "health", "testdata", "ata", "samsung-860-evo-healthy.bin"))
}

// asArg is what the controller sends: JSON, decoded by the agent into maps.
func asArg(t *testing.T, v any) any {
	b, err := json.Marshal(v)
	require.NoError(t, err)
	var out any
	require.NoError(t, json.Unmarshal(b, &out))
	return out
}

func TestVerifyHardwareOnSnapshot(t *testing.T) {
	root := filepath.Join("..", "..", "testdata", "hardware", "nvme-sata")
	ctx := context.Background()
	inspected, err := hardware.Inventory(ctx, root)
	require.NoError(t, err)
	props := map[string]any{"cpus": inspected.CPU.Count, "cpu_arch": inspected.CPU.Architecture, "memory_mb": inspected.Memory.PhysicalMB}
	d := dispatcher(t, Config{Root: root, Health: smartFixtures{nvme: "samsung-pm983-healthy.bin"}})

	res, err := d.Run(ctx, hardware.KindClean, "verify_hardware", map[string]any{"properties": asArg(t, props), "inventory": asArg(t, inspected)}, nil)
	require.NoError(t, err)
	vr := res.(VerifyResult)
	assert.True(t, vr.Passed)
	assert.Empty(t, vr.Differences)
	require.NotNil(t, vr.Health)
	assert.Len(t, vr.Health.NVMe, 1)
	assert.Contains(t, vr.Summary(), "hardware verified: 0 differences failed, 0 accepted; health: 0 failed")

	// The node lost a disk and 16 GiB since inspection, and its NVMe is worn out.
	gone := inspected
	gone.Disks = append(append([]protocol.Disk(nil), inspected.Disks...), protocol.Disk{Name: "/dev/sdz", Size: 1 << 40, Serial: "WD-GONE01", Model: "WDC WD10EZEX", Controller: "scsi"})
	props["memory_mb"] = inspected.Memory.PhysicalMB + 16384
	d = dispatcher(t, Config{Root: root, Health: smartFixtures{nvme: "worn-critical.bin"}})
	res, err = d.Run(ctx, hardware.KindDeploy, "verify_hardware", map[string]any{"properties": asArg(t, props), "inventory": asArg(t, gone)}, nil)
	var pe *protocol.Error
	require.True(t, errors.As(err, &pe), "%v", err)
	assert.Equal(t, ErrTypeHardwareMismatch, pe.Type)
	assert.Contains(t, pe.Message, "disk WD-GONE01 (inspection): 1024.0 GiB WDC WD10EZEX at /dev/sdz → missing")
	assert.Contains(t, pe.Message, "memory (properties): 80384 MiB → 64000 MiB online memory blocks (16384 MiB short; 803 MiB accepted)")
	assert.Contains(t, pe.Message, "nvme /dev/nvme0n1 (serial S64FNE0R812345): 17 media errors")
	vr = res.(VerifyResult)
	assert.False(t, vr.Passed, "the partial result goes with the error")
	assert.Contains(t, vr.Summary(), "hardware verification FAILED")

	// Health checks off, a profile from the step's arguments.
	res, err = d.Run(ctx, hardware.KindClean, "verify_hardware", map[string]any{"health_checks": false,
		"hardware_profile": map[string]any{"disk_count": 3, "cpu_model": "Gold 6338"}}, nil)
	require.NoError(t, err)
	assert.Nil(t, res.(VerifyResult).Health)
	assert.Equal(t, "none", res.(VerifyResult).Inspection)

	for _, bad := range []map[string]any{
		{"health_checks": "yes"},
		{"health_thresholds": map[string]any{"nvme_max_percent": 5}},
		{"hardware_profile": map[string]any{"dimms": 2}},
		{"properties": map[string]any{"memory_mb": "much"}},
		{"inventory": map[string]any{"disks": 3}},
	} {
		_, err := d.Run(ctx, hardware.KindClean, "verify_hardware", bad, nil)
		require.True(t, errors.As(err, &pe), "%v", bad)
		assert.Equal(t, protocol.ErrTypeInvalidArgs, pe.Type, "%v", bad)
	}
}

func TestVerifyThresholdOverride(t *testing.T) {
	th, err := thresholds(health.DefaultThresholds(), map[string]any{"nvme_max_media_errors": 20.0})
	require.NoError(t, err)
	assert.Equal(t, uint64(20), th.NVMeMaxMediaErrors)
	assert.Equal(t, uint64(90), th.NVMeMaxPercentUsed, "the others keep their defaults")
}
