package health

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/anvil-metal/anvil/protocol"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func fixture(t testing.TB, name string) []byte {
	b, err := os.ReadFile(filepath.Join("testdata", name))
	require.NoError(t, err)
	return b
}

func TestParseNVMeSMART(t *testing.T) {
	h, err := ParseNVMeSMART(fixture(t, "nvme/samsung-pm983-healthy.bin"))
	require.NoError(t, err)
	assert.Equal(t, 38, h.TemperatureC)
	assert.Equal(t, uint8(2), h.PercentageUsed)
	assert.Equal(t, uint64(8760), h.PowerOnHours)
	assert.InDelta(t, 71.2, h.DataUnitsWrittenTB, 0.1)
	assert.Empty(t, h.Judge(DefaultThresholds()))

	h, err = ParseNVMeSMART(fixture(t, "nvme/worn-critical.bin"))
	require.NoError(t, err)
	h.Device, h.Serial = "/dev/nvme1n1", "S4GNNE0R900123"
	assert.Equal(t, []string{"available spare below threshold", "reliability degraded by media or internal errors"}, h.CriticalWarnings)
	var msgs []string
	for _, f := range h.Judge(DefaultThresholds()) {
		assert.True(t, f.Failure)
		msgs = append(msgs, f.String())
	}
	assert.Equal(t, []string{
		"nvme /dev/nvme1n1 (serial S4GNNE0R900123): critical warning: available spare below threshold",
		"nvme /dev/nvme1n1 (serial S4GNNE0R900123): critical warning: reliability degraded by media or internal errors",
		"nvme /dev/nvme1n1 (serial S4GNNE0R900123): 17 media errors (at most 0 accepted)",
		"nvme /dev/nvme1n1 (serial S4GNNE0R900123): 103% of its rated endurance used (at most 90% accepted)",
	}, msgs)

	_, err = ParseNVMeSMART(make([]byte, 100))
	assert.Error(t, err)
}

func TestParseATASMART(t *testing.T) {
	h, err := ParseATASMART(fixture(t, "ata/samsung-860-evo-healthy.bin"))
	require.NoError(t, err)
	require.NotNil(t, h.Reallocated)
	assert.Equal(t, uint64(0), *h.Reallocated)
	assert.Nil(t, h.Pending, "the 860 EVO has no attribute 197")
	assert.Equal(t, uint64(12034), *h.PowerOnHours)
	assert.Len(t, h.Attributes, 14)
	assert.Empty(t, h.Judge(DefaultThresholds()))

	h, err = ParseATASMART(fixture(t, "ata/seagate-st4000nm-pending.bin"))
	require.NoError(t, err)
	assert.Equal(t, uint64(36), *h.TemperatureC, "min/max bytes masked off")
	h.Device, h.Serial = "/dev/sdc", "ZC13ABCD"
	var msgs []string
	for _, f := range h.Judge(DefaultThresholds()) {
		msgs = append(msgs, f.String())
	}
	assert.Equal(t, []string{
		"ata /dev/sdc (serial ZC13ABCD): 1184 reallocated sectors (at most 10 accepted)",
		"ata /dev/sdc (serial ZC13ABCD): 8 pending sectors (at most 0 accepted)",
		"ata /dev/sdc (serial ZC13ABCD): 8 offline uncorrectable sectors (at most 0 accepted)",
	}, msgs)

	bad := fixture(t, "ata/seagate-st4000nm-pending.bin")
	bad[100]++
	_, err = ParseATASMART(bad)
	assert.ErrorContains(t, err, "checksum")
	_, err = ParseATASMART(bad[:10])
	assert.Error(t, err)
}

func FuzzParseATASMART(f *testing.F) {
	f.Add(fixture(f, "ata/seagate-st4000nm-pending.bin"))
	for _, name := range libatasmartNames(f) {
		f.Add(loadATABlob(f, name).smart) // the real drives
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := ParseATASMART(b)
		if err == nil {
			assert.LessOrEqual(t, len(h.Attributes), 30)
			h.Judge(DefaultThresholds())
		}
		if len(b) < 512 {
			return
		}
		// Again with the checksum made right, so mutations reach the
		// attribute table and the judging instead of stopping at the sum.
		var sum byte
		for _, c := range b[:511] {
			sum += c
		}
		b[511] = -sum
		h, err = ParseATASMART(b)
		require.NoError(t, err)
		h.Sectors = uint64(b[0]) << 20
		h.Judge(DefaultThresholds())
	})
}

func FuzzParseNVMeSMART(f *testing.F) {
	f.Add(fixture(f, "nvme/worn-critical.bin"))
	f.Add(nvmeHexdump(f, "nvme-cli-issue-2759.hexdump"))
	f.Add(nvmeFromText(f, "wd-2tb-nvme-cli-issue-1037.txt"))
	f.Add(nvmeFromText(f, "samsung-mzvl2512hcjq-smartctl-issue-537.txt"))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := ParseNVMeSMART(b)
		if err == nil {
			assert.LessOrEqual(t, len(h.CriticalWarnings), 6)
			h.Judge(DefaultThresholds())
		}
	})
}

func writeTree(t *testing.T, root string, files map[string]string) {
	for p, v := range files {
		full := filepath.Join(root, p)
		require.NoError(t, os.MkdirAll(filepath.Dir(full), 0o755))
		require.NoError(t, os.WriteFile(full, []byte(v+"\n"), 0o644))
	}
}

// skxEDAC is the layout skx_edac (Intel Xeon Scalable) publishes, one
// controller with two DIMMs, one of them with corrected errors.
func skxEDAC(t *testing.T, root string, ceA1, ueA1, ceB1 string) {
	mc := "sys/devices/system/edac/mc/mc0/"
	writeTree(t, root, map[string]string{
		mc + "mc_name": "Intel_Skx SrcID#0_MC#0", mc + "ce_count": "0", mc + "ue_count": ueA1,
		mc + "ce_noinfo_count": "0", mc + "ue_noinfo_count": "0",
		mc + "dimm0/dimm_label": "CPU_SrcID#0_MC#0_Chan#0_DIMM#0", mc + "dimm0/dimm_location": "channel 0 slot 0",
		mc + "dimm0/size": "32768", mc + "dimm0/dimm_ce_count": ceA1, mc + "dimm0/dimm_ue_count": ueA1,
		mc + "dimm1/dimm_label": "CPU_SrcID#0_MC#0_Chan#1_DIMM#0", mc + "dimm1/dimm_location": "channel 1 slot 0",
		mc + "dimm1/size": "32768", mc + "dimm1/dimm_ce_count": ceB1, mc + "dimm1/dimm_ue_count": "0",
	})
}

func TestEDAC(t *testing.T) {
	root := t.TempDir()
	skxEDAC(t, root, "0", "0", "0")
	mcs, err := ReadEDAC(root)
	require.NoError(t, err)
	require.Len(t, mcs, 1)
	assert.Equal(t, "Intel_Skx SrcID#0_MC#0", mcs[0].Driver)
	assert.Len(t, mcs[0].DIMMs, 2)
	assert.Empty(t, JudgeEDAC(mcs, DefaultThresholds()))

	root = t.TempDir()
	skxEDAC(t, root, "3", "1", "57")
	mcs, err = ReadEDAC(root)
	require.NoError(t, err)
	assert.Equal(t, []Finding{
		{Check: "edac", Device: "CPU_SrcID#0_MC#0_Chan#0_DIMM#0", Message: "1 uncorrected memory errors since boot (at most 0 accepted)", Failure: true},
		{Check: "edac", Device: "CPU_SrcID#0_MC#0_Chan#0_DIMM#0", Message: "3 corrected memory errors since boot (at most 10 accepted)"},
		{Check: "edac", Device: "CPU_SrcID#0_MC#0_Chan#1_DIMM#0", Message: "57 corrected memory errors since boot (at most 10 accepted)", Failure: true},
	}, JudgeEDAC(mcs, DefaultThresholds()))

	none, err := ReadEDAC(t.TempDir())
	require.NoError(t, err)
	assert.Nil(t, none)

	root = t.TempDir()
	skxEDAC(t, root, "lots", "0", "0")
	_, err = ReadEDAC(root)
	assert.ErrorContains(t, err, "is not a count")
}

// pcieTree builds sysfs's PCI layout: devices under
// sys/devices/pci0000:00/<port>/<endpoint> and symlinks from
// sys/bus/pci/devices, with link attributes as the kernel prints them.
func pcieTree(t *testing.T, root string, devs []struct{ path, class, speed, width, maxSpeed, maxWidth string }) {
	bus := filepath.Join(root, "sys", "bus", "pci", "devices")
	require.NoError(t, os.MkdirAll(bus, 0o755))
	for _, d := range devs {
		dir := filepath.Join(root, "sys", "devices", d.path)
		files := map[string]string{"class": d.class}
		if d.speed != "" {
			files["current_link_speed"], files["current_link_width"] = d.speed, d.width
			files["max_link_speed"], files["max_link_width"] = d.maxSpeed, d.maxWidth
		}
		for k, v := range files {
			writeTree(t, dir, map[string]string{k: v})
		}
		require.NoError(t, os.Symlink(dir, filepath.Join(bus, filepath.Base(d.path))))
	}
}

func TestPCIe(t *testing.T) {
	root := t.TempDir()
	pcieTree(t, root, []struct{ path, class, speed, width, maxSpeed, maxWidth string }{
		// A Gen4 root port with a Gen3 NVMe drive: trained at the drive's best, no finding.
		{"pci0000:00/0000:00:01.0", "0x060400", "8.0 GT/s PCIe", "4", "16.0 GT/s PCIe", "4"},
		{"pci0000:00/0000:00:01.0/0000:01:00.0", "0x010802", "8.0 GT/s PCIe", "4", "8.0 GT/s PCIe", "4"},
		// A x16 NIC in a x16 slot trained at x8 and Gen3.
		{"pci0000:00/0000:00:02.0", "0x060400", "8.0 GT/s PCIe", "8", "16.0 GT/s PCIe", "16"},
		{"pci0000:00/0000:00:02.0/0000:02:00.0", "0x020000", "8.0 GT/s PCIe", "8", "16.0 GT/s PCIe", "16"},
		// An idle GPU drops its speed: a warning only.
		{"pci0000:00/0000:00:03.0", "0x060400", "2.5 GT/s PCIe", "16", "16.0 GT/s PCIe", "16"},
		{"pci0000:00/0000:00:03.0/0000:03:00.0", "0x030000", "2.5 GT/s PCIe", "16", "16.0 GT/s PCIe", "16"},
		// Conventional PCI and an unknown speed: skipped.
		{"pci0000:00/0000:00:1f.0", "0x060100", "", "", "", ""},
		{"pci0000:00/0000:00:04.0", "0x010601", "Unknown", "0", "Unknown", "0"},
	})
	links, err := ReadPCIeLinks(root)
	require.NoError(t, err)
	require.Len(t, links, 3)
	assert.Equal(t, PCIeLink{Address: "0000:01:00.0", Class: "010802", SpeedGTs: 8, Width: 4, MaxSpeedGTs: 8, MaxWidth: 4, UpstreamPort: "0000:00:01.0"}, links[0])
	assert.Equal(t, []Finding{
		{Check: "pcie", Device: "0000:02:00.0", Message: "link trained at x8, both ends can do x16", Failure: true},
		{Check: "pcie", Device: "0000:02:00.0", Message: "link trained at 8 GT/s, both ends can do 16 GT/s", Failure: true},
		{Check: "pcie", Device: "0000:03:00.0", Message: "link trained at 2.5 GT/s, both ends can do 16 GT/s"},
	}, JudgePCIe(links))
}

type fakeReader struct{ nvme, ata map[string][]byte }

func (f fakeReader) NVMeSMARTLog(p string) ([]byte, error) {
	if b, ok := f.nvme[filepath.Base(p)]; ok {
		return b, nil
	}
	return nil, errors.New("inappropriate ioctl for device")
}

func (f fakeReader) ATASMARTData(p string) ([]byte, error) {
	if b, ok := f.ata[filepath.Base(p)]; ok {
		return b, nil
	}
	return nil, errors.New("SMART READ DATA refused (SCSI status 0x2, host 0x0, driver 0x8)")
}

func TestCheckerRun(t *testing.T) {
	root := t.TempDir()
	skxEDAC(t, root, "0", "0", "0")
	c := Checker{Root: root, Reader: fakeReader{
		nvme: map[string][]byte{"nvme0n1": fixture(t, "nvme/worn-critical.bin")},
		ata:  map[string][]byte{"sda": fixture(t, "ata/samsung-860-evo-healthy.bin")},
	}}
	r := c.Run(context.Background(), []protocol.Disk{
		{Name: "/dev/nvme0n1", Serial: "N1", Controller: "nvme"},
		{Name: "/dev/sda", Serial: "S1", Controller: "scsi"},
		{Name: "/dev/sdb", Serial: "SAS1", Controller: "scsi"},
		{Name: "/dev/vda", Controller: "virtio"},
	}, DefaultThresholds())
	assert.Len(t, r.NVMe, 1)
	assert.Len(t, r.ATA, 1)
	assert.Len(t, r.Failures(), 4)
	for _, f := range r.Failures() {
		assert.Equal(t, "/dev/nvme0n1 (serial N1)", f.Device)
	}
	assert.Equal(t, []string{"ata /dev/sdb (serial SAS1): no ATA SMART data: SMART READ DATA refused (SCSI status 0x2, host 0x0, driver 0x8)"}, r.Skipped)
}
