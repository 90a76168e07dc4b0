package hardware

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/protocol"
)

// pciRoot writes a sysfs tree as the kernel lays it out: devices under
// sys/devices/pci0000:00, linked from sys/bus/pci/devices, a bound
// device's driver a link into sys/bus/pci/drivers.
func pciRoot(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	write := func(rel, content string) {
		p := filepath.Join(root, rel)
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte(content), 0o644))
	}
	link := func(target, rel string) {
		p := filepath.Join(root, rel)
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.Symlink(target, p))
	}
	dev := func(addr, vendor, device, class, modalias, driver string) {
		d := "sys/devices/pci0000:00/" + addr
		write(d+"/vendor", "0x"+vendor+"\n")
		write(d+"/device", "0x"+device+"\n")
		write(d+"/class", "0x"+class+"\n")
		write(d+"/modalias", modalias+"\n")
		link("../../../devices/pci0000:00/"+addr, "sys/bus/pci/devices/"+addr)
		if driver != "" {
			require.NoError(t, os.MkdirAll(filepath.Join(root, "sys/bus/pci/drivers", driver), 0o755))
			link("../../../bus/pci/drivers/"+driver, d+"/driver")
		}
	}
	dev("0000:00:1f.2", "8086", "2922", "010601", "pci:v00008086d00002922sv00001AF4sd00001100bc01sc06i01", "")
	dev("0000:00:02.0", "1af4", "1041", "020000", "pci:v00001AF4d00001041sv00001AF4sd00001100bc02sc00i00", "virtio-pci")
	dev("0000:00:03.0", "1000", "005b", "010400", "pci:v00001000d0000005Bsv00001000sd00001000bc01sc04i00", "")
	write("proc/sys/kernel/osrelease", "6.1.0-test-amd64\n")
	write("lib/modules/6.1.0-test-amd64/modules.alias", strings.Join([]string{
		"alias pci:v*d*sv*sd*bc01sc06i01* ahci",
		"alias pci:v00008086d00002922sv*sd*bc*sc*i* ahci",
		"alias pci:v00001AF4d00001041sv*sd*bc*sc*i* virtio_pci",
	}, "\n")+"\n")
	write("dev/kmsg", strings.Join([]string{
		"6,339,5140900,-;ahci 0000:00:1f.2: version 3.0",
		"4,340,5140901,-;r8169 0000:02:00.0: Direct firmware load for rtl_nic/rtl8168h-2.fw failed with error -2",
		"3,341,5140902,-;firmware: failed to load bnx2/bnx2-mips-09-6.2.1b.fw (-2)",
		"4,342,5140903,-;r8169 0000:03:00.0: Direct firmware load for rtl_nic/rtl8168h-2.fw failed with error -2",
	}, "\n")+"\n")
	return root
}

func TestPCIDevicesBoundUnboundAndModules(t *testing.T) {
	root := pciRoot(t)
	devs, err := PCIDevices(root, kernelAliases(root))
	require.NoError(t, err)
	assert.Equal(t, []protocol.PCIDevice{
		{Address: "0000:00:02.0", Vendor: "1af4", Device: "1041", Class: "020000", Driver: "virtio-pci"},
		{Address: "0000:00:03.0", Vendor: "1000", Device: "005b", Class: "010400"},
		{Address: "0000:00:1f.2", Vendor: "8086", Device: "2922", Class: "010601", Modules: []string{"ahci"}},
	}, devs, "the MegaRAID has no module in this kernel; the SATA controller's module is named once though two aliases match")

	unbound := protocol.Unbound(devs, protocol.PCIClassStorage)
	require.Len(t, unbound, 2)
	assert.Equal(t, "RAID controller 0000:00:03.0 (1000:005b)", unbound[0].Describe())
	assert.Equal(t, "SATA controller 0000:00:1f.2 (8086:2922)", unbound[1].Describe())
	assert.Empty(t, protocol.Unbound(devs, protocol.PCIClassNetwork))
}

func TestPCIDevicesWithoutBusIsAnEmptyList(t *testing.T) {
	devs, err := PCIDevices(t.TempDir(), nil)
	require.NoError(t, err)
	assert.NotNil(t, devs, "an empty list says the agent looked; nil would read as an old agent")
	assert.Empty(t, devs)
}

func TestFirmwareMissingFromKernelLog(t *testing.T) {
	root := pciRoot(t)
	assert.Equal(t, []string{"rtl_nic/rtl8168h-2.fw", "bnx2/bnx2-mips-09-6.2.1b.fw"},
		FirmwareMissing(strings.NewReader(string(kernelLog(root)))), "each file once, in order of first mention")
	assert.Empty(t, FirmwareMissing(strings.NewReader("ahci 0000:00:1f.2: AHCI 0001.0000 32 slots\nfirmware loaded fine\n")))
	assert.Nil(t, kernelLog(t.TempDir()), "no kernel log: nothing missing, no error")
}

func TestInventoryReportsPCIAndFirmware(t *testing.T) {
	root := pciRoot(t)
	// the inventory also needs a block tree: borrow the snapshot's
	require.NoError(t, os.Symlink(filepath.Join(mustAbs(t, snapshot("nvme-sata")), "sys", "class"), filepath.Join(root, "sys", "class")))
	require.NoError(t, os.Symlink(filepath.Join(mustAbs(t, snapshot("nvme-sata")), "sys", "devices", "virtual"), filepath.Join(root, "sys", "devices", "virtual")))
	inv, err := Inventory(context.Background(), root)
	require.NoError(t, err)
	assert.Len(t, inv.PCI, 3)
	assert.Equal(t, []string{"rtl_nic/rtl8168h-2.fw", "bnx2/bnx2-mips-09-6.2.1b.fw"}, inv.FirmwareMissing)

	plain, err := Inventory(context.Background(), snapshot("nvme-sata"))
	require.NoError(t, err)
	assert.NotNil(t, plain.PCI)
}

func mustAbs(t *testing.T, p string) string {
	t.Helper()
	a, err := filepath.Abs(p)
	require.NoError(t, err)
	return a
}

// The real /dev/kmsg never ends: reading it must stop at the last record
// instead of waiting for the next one (an inventory that hung here kept
// every erase step from starting).
func TestKernelLogOfTheRunningKernelReturns(t *testing.T) {
	if _, err := os.Stat("/dev/kmsg"); err != nil {
		t.Skip("no /dev/kmsg here")
	}
	done := make(chan struct{})
	go func() { kernelLog("/"); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("reading /dev/kmsg blocked")
	}
}
