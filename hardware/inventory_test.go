package hardware

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/protocol"
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

// Odd firmware pads DMI strings with NULs or writes them in Latin-1: the
// inventory carries them cleaned, so the controller's check of what it
// stores (no NUL, valid UTF-8) never refuses a real agent.
func TestReadStringCleansFirmwareText(t *testing.T) {
	dir := t.TempDir()
	for raw, want := range map[string]string{
		"Dell Inc.\n":            "Dell Inc.",
		"ACME\x00\x00\x00\n":     "ACME",
		"Caf\xe9 Systems\n":      "Caf\uFFFD Systems",
		"\x00\x00\x00\x00":       "",
		"  To Be Filled\x00 \n":  "To Be Filled",
		"Fujitsu\x00Siemens\xff": "FujitsuSiemens\uFFFD",
	} {
		p := filepath.Join(dir, "sys_vendor")
		require.NoError(t, os.WriteFile(p, []byte(raw), 0o644))
		got := readString(p)
		assert.Equal(t, want, got, "%q", raw)
		doc, err := json.Marshal(protocol.DiscoveryRequest{Inventory: protocol.Inventory{SystemVendor: protocol.SystemVendor{Manufacturer: got}}})
		require.NoError(t, err)
		assert.NoError(t, protocol.CheckJSON(doc), "%q is storable", got)
	}
	cpuinfo := filepath.Join(dir, "cpuinfo")
	require.NoError(t, os.WriteFile(cpuinfo, []byte("processor\t: 0\nmodel name\t: Odd\x00 CPU \xff\n"), 0o644))
	assert.Equal(t, "Odd CPU \uFFFD", cpuModelFromCPUInfo(cpuinfo))
}
