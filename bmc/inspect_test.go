package bmc_test

import (
	"context"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/bmc"
	"github.com/anvil-metal/anvil/bmc/vbmc"
)

// TestRedfishInspectQEMUNode: anvil-vbmc describes a QEMU node as its
// command line makes it (CPUs, memory, disks on their buses, NIC MACs) and
// the Manager reads it into Ironic's inventory. QEMU is not started: the
// description comes from the configuration the command line is built from.
func TestRedfishInspectQEMUNode(t *testing.T) {
	dir := t.TempDir()
	cfg := vbmc.QEMUConfig{StateDir: dir, CPUs: 2, MemoryMiB: 1536,
		Disks: []vbmc.QEMUDisk{{Path: "nvme0.raw", SizeMiB: 8192, Serial: "SN-NVME"}, {Path: "sata0.raw", SizeMiB: 5120, Serial: "SN-SATA", Bus: vbmc.BusAHCI}},
		NIC:   &vbmc.QEMUNIC{MAC: "52:54:00:aa:bb:01", MoreMACs: []string{"52:54:00:aa:bb:02"}}}
	q, err := vbmc.NewQEMU(nil, cfg)
	require.NoError(t, err)
	args := strings.Join(q.Args(vbmc.BootDisk), " ")
	for _, want := range []string{"-smp 2", "-m 1536", "mac=52:54:00:aa:bb:01", "mac=52:54:00:aa:bb:02", "serial=SN-NVME", "ide-hd", "serial=SN-SATA"} {
		require.Contains(t, args, want, "the command line the inventory must match")
	}
	srv := vbmc.NewServer(nil, testUser, testPass, vbmc.NewNode("q1", q))
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(ts.Close)
	env := &vbmcEnv{srv: srv, url: ts.URL}

	m := bmc.New(fastConfig(nil))
	inv, o, err := m.Inspect(context.Background(), env.target(t, "q1", testPass))
	require.NoError(t, err)
	assert.Equal(t, "gofish", o.Provider)
	assert.Equal(t, bmc.InventoryCPU{Count: 2, Architecture: "x86_64", ModelName: "QEMU Virtual CPU version 2.5+"}, inv.CPU)
	require.NotNil(t, inv.Memory)
	assert.Equal(t, int64(1536), inv.Memory.PhysicalMB)
	require.Len(t, inv.Disks, 2)
	assert.Equal(t, "SN-NVME", inv.Disks[0].Serial)
	assert.Equal(t, int64(8192)<<20, inv.Disks[0].Size)
	assert.False(t, *inv.Disks[0].Rotational, "NVMe")
	assert.Equal(t, int64(5120)<<20, inv.Disks[1].Size)
	assert.True(t, *inv.Disks[1].Rotational, "QEMU's ide-hd reports a spinning disk")
	assert.Equal(t, []bmc.InventoryNIC{{MACAddress: "52:54:00:aa:bb:01", Name: "NIC0"}, {MACAddress: "52:54:00:aa:bb:02", Name: "NIC1"}}, inv.Interfaces)
	require.NotNil(t, inv.Boot)
	assert.Equal(t, "bios", inv.Boot.CurrentBootMode, "SeaBIOS, BootSourceOverrideMode Legacy")
	require.NotNil(t, inv.SystemVendor)
	assert.Equal(t, "anvil", inv.SystemVendor.Manufacturer)
	assert.NotEmpty(t, inv.SystemVendor.SystemUUID)
	assert.Equal(t, int64(4), inv.LocalGB(), "the smallest disk of at least 4 GiB, less one")
}

// TestRedfishInspectMemoryNode: a node without QEMU reports SetHardware's
// description; the inventory follows a change of it.
func TestRedfishInspectMemoryNode(t *testing.T) {
	env := startVBMC(t, "n1", "n2")
	m := bmc.New(fastConfig(nil))
	inv, _, err := m.Inspect(context.Background(), env.target(t, "n1", testPass))
	require.NoError(t, err)
	assert.Equal(t, 1, inv.CPU.Count)
	assert.Len(t, inv.Interfaces, 1)
	assert.Len(t, inv.Disks, 1)

	env.srv.Node("n1").SetHardware(vbmc.Hardware{CPUs: 16, MemoryMiB: 65536, MACs: []string{"0C:C4:7A:00:00:01", "not-a-mac"},
		Disks: []vbmc.HardwareDisk{{Name: "small", SizeBytes: 1 << 30, Bus: vbmc.BusNVMe}, {Name: "big", SizeBytes: 960 << 30, Bus: vbmc.BusMegaSAS}, {Name: "mid", SizeBytes: 480 << 30, Bus: vbmc.BusMegaSAS}}})
	inv, _, err = m.Inspect(context.Background(), env.target(t, "n1", testPass))
	require.NoError(t, err)
	assert.Equal(t, 16, inv.CPU.Count)
	assert.Equal(t, int64(65536), inv.Memory.PhysicalMB)
	assert.Equal(t, []bmc.InventoryNIC{{MACAddress: "0c:c4:7a:00:00:01", Name: "NIC0"}}, inv.Interfaces, "an invalid MAC is skipped, as Ironic does")
	names := []string{}
	for _, d := range inv.Disks {
		names = append(names, d.Name)
	}
	assert.True(t, slices.Equal([]string{"small", "big", "mid"}, names), "%v", names)
	assert.Equal(t, int64(479), inv.LocalGB(), "1 GiB is too small; 480 GiB is the smallest of the rest")
}

// TestInspectRefusedOverIPMI: IPMI cannot describe the hardware.
func TestInspectRefusedOverIPMI(t *testing.T) {
	m := bmc.New(fastConfig(nil))
	tg, err := bmc.ParseDriverInfo("ipmi", map[string]any{"ipmi_address": "127.0.0.1", "ipmi_username": "u", "ipmi_password": "p"})
	require.NoError(t, err)
	_, _, err = m.Inspect(context.Background(), tg.WithID("i1"))
	require.ErrorIs(t, err, bmc.ErrUnsupported)
	assert.Contains(t, err.Error(), "out-of-band inspection is not supported by the ipmi driver")
}
