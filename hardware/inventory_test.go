package hardware

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func snapshot(name string) string { return filepath.Join("..", "testdata", "hardware", name) }

func TestInventoryFromSnapshot(t *testing.T) {
	inv, err := Inventory(context.Background(), snapshot("nvme-sata"))
	require.NoError(t, err)
	assert.Equal(t, "Intel(R) Xeon(R) Gold 6338 CPU @ 2.00GHz", inv.CPU.ModelName)
	assert.Equal(t, 2, inv.CPU.Count)
	assert.Equal(t, uint64(65536000*1024), inv.Memory.Total)
	require.Len(t, inv.Interfaces, 1, "lo is virtual and left out")
	assert.Equal(t, "eno1", inv.Interfaces[0].Name)
	assert.Equal(t, "3c:ec:ef:12:34:56", inv.Interfaces[0].MACAddress)
	assert.True(t, inv.Interfaces[0].HasCarrier)
	assert.Equal(t, 10000, inv.Interfaces[0].SpeedMbps)
	require.Len(t, inv.Disks, 3)
	assert.Equal(t, "/dev/nvme0n1", inv.Disks[0].Name)
	assert.Equal(t, "S64FNE0R812345", inv.Disks[0].Serial, "serial from sysfs, not ghw's unknown")
	assert.Len(t, inv.Disks[0].Partitions, 2)
	assert.Empty(t, inv.RAIDArrays)

	raid, err := Inventory(context.Background(), snapshot("md-raid1"))
	require.NoError(t, err)
	require.Len(t, raid.RAIDArrays, 1)
	assert.Equal(t, "raid1", raid.RAIDArrays[0].Level)
	assert.Equal(t, []string{"sda2", "sdb2"}, raid.RAIDArrays[0].Members)
}

func TestInventoryMissingRoot(t *testing.T) {
	_, err := Inventory(context.Background(), t.TempDir())
	require.Error(t, err, "no sysfs block tree: disks cannot be listed")
}
