package disk

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func snapshot(name string) string { return filepath.Join("..", "..", "testdata", "hardware", name) }

func discover(t *testing.T, name string) *Layout {
	t.Helper()
	l, err := Discover(context.Background(), snapshot(name))
	require.NoError(t, err)
	return l
}

func names(ds []Disk) []string {
	var out []string
	for _, d := range ds {
		out = append(out, d.Name)
	}
	return out
}

func TestDiscoverNVMeAndSATA(t *testing.T) {
	l := discover(t, "nvme-sata")
	// loop0 (unattached, size 0) and ram0 are left out.
	require.Equal(t, []string{"nvme0n1", "sda", "sdb"}, names(l.Disks))

	tests := []struct {
		name string
		want Disk
	}{
		{"nvme0n1", Disk{
			Name: "nvme0n1", Path: "/dev/nvme0n1", Major: 259, Minor: 0, Size: 1875385008 * 512,
			LogicalBlockSize: 512, PhysicalBlockSize: 4096, Controller: "nvme",
			Model: "SAMSUNG MZQL2960HCJR-00A07", Serial: "S64FNE0R812345", Firmware: "GDC5302Q",
			WWN: "eui.36344630528123450025384500000001", ByPath: "/dev/disk/by-path/pci-0000:3b:00.0-nvme-1",
			DiscardMaxBytes: 2199023255040, WriteZeroesMax: 131072,
			Partitions: []Partition{
				{Name: "nvme0n1p1", Path: "/dev/nvme0n1p1", Number: 1, Start: 2048 * 512, Size: 1048576 * 512},
				{Name: "nvme0n1p2", Path: "/dev/nvme0n1p2", Number: 2, Start: 1050624 * 512, Size: 1874334351 * 512},
			},
		}},
		{"sda", Disk{
			Name: "sda", Path: "/dev/sda", Major: 8, Minor: 0, Size: 7814037168 * 512,
			LogicalBlockSize: 512, PhysicalBlockSize: 4096, Rotational: true, Controller: "sata",
			Vendor: "ATA", Model: "ST4000NM0035-1V4", Serial: "ZC18ABCD", Firmware: "TN03", WWN: "0x5000c500a1b2c3d4",
			ByPath: "/dev/disk/by-path/pci-0000:00:17.0-ata-1.0", // the shorter of the two links
		}},
		{"sdb", Disk{
			Name: "sdb", Path: "/dev/sdb", Major: 8, Minor: 16, Size: 937703088 * 512,
			LogicalBlockSize: 512, PhysicalBlockSize: 512, Controller: "sata",
			Vendor: "ATA", Model: "INTEL SSDSC2KB48", Serial: "BTYF12345678480BGN", Firmware: "0132", WWN: "0x55cd2e414f8a0b1c",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := l.Find(tt.name)
			require.True(t, ok)
			assert.Equal(t, tt.want, got)
		})
	}
}

func TestDiscoverMDRaid1OnPartitions(t *testing.T) {
	l := discover(t, "md-raid1")
	require.Equal(t, []string{"md0", "sda", "sdb"}, names(l.Disks))
	arrays := l.Arrays()
	require.Len(t, arrays, 1)
	md := arrays[0]
	assert.Equal(t, "md", md.Controller)
	require.NotNil(t, md.MD)
	assert.Equal(t, MDInfo{Level: "raid1", ArrayState: "clean", Metadata: "1.2", SyncAction: "idle", Members: []string{"sda2", "sdb2"}}, *md.MD)
	assert.Equal(t, []string{"sda", "sdb"}, names(l.Physical()))

	for _, n := range []string{"sda", "sdb"} {
		d, ok := l.Find("/dev/" + n)
		require.True(t, ok)
		assert.True(t, d.IsMDMember(), "%s holds an md member partition", n)
		assert.Equal(t, []string{"md0"}, d.MDHolders())
		assert.Empty(t, d.Holders, "the disk itself is not held, its partition is")
		require.Len(t, d.Partitions, 2)
		assert.Empty(t, d.Partitions[0].Holders)
		assert.Equal(t, []string{"md0"}, d.Partitions[1].Holders)
	}
	assert.False(t, md.IsMDMember())
}

func TestDiscoverVirtualMediaAndRemovable(t *testing.T) {
	l := discover(t, "vmedia-usb")
	require.Equal(t, []string{"sdc", "sdd", "sr0", "vda", "vdb"}, names(l.Disks))
	tests := []struct {
		name                        string
		controller                  string
		readOnly, removable, vmedia bool
		optical                     bool
		partReadOnly                []bool
		reasonContains              string
	}{
		{name: "vda", controller: "virtio"},
		{name: "vdb", controller: "virtio", vmedia: true, reasonContains: VirtualMediaLabel + " (/dev/disk/by-label)"},
		{name: "sr0", controller: "usb", readOnly: true, removable: true, vmedia: true, optical: true, reasonContains: "AMI"},
		// HPE virtual install disk: read-only, and its partition has no ro
		// file: it must inherit the disk's flag.
		{name: "sdd", controller: "sata", readOnly: true, partReadOnly: []bool{true}},
		// A USB stick is removable but neither read-only nor virtual media.
		{name: "sdc", controller: "usb", removable: true, partReadOnly: []bool{false}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, ok := l.Find(tt.name)
			require.True(t, ok)
			assert.Equal(t, tt.controller, d.Controller)
			assert.Equal(t, tt.readOnly, d.ReadOnly, "read_only")
			assert.Equal(t, tt.removable, d.Removable, "removable")
			assert.Equal(t, tt.vmedia, d.VirtualMedia, "virtual media")
			assert.Equal(t, tt.optical, d.Optical, "optical")
			assert.Contains(t, d.VirtualMediaReason, tt.reasonContains)
			var pro []bool
			for _, p := range d.Partitions {
				pro = append(pro, p.ReadOnly)
			}
			assert.Equal(t, tt.partReadOnly, pro)
		})
	}
}

// The udev-less ramdisk has no /dev/disk: IPA's virtual floppy is found by
// the label inside the device, and real DVD drives are optical, whatever
// their read-only flag, but not virtual media.
func TestDiscoverUdevlessLabelAndOptical(t *testing.T) {
	root := snapshot("udevless-dvd")
	require.NoDirExists(t, filepath.Join(root, "dev", "disk"))
	l := discover(t, "udevless-dvd")
	// sr2 has no disc (size 0) and is left out like any empty device.
	require.Equal(t, []string{"sda", "sr0", "sr1", "vdb"}, names(l.Disks))
	tests := []struct {
		name, controller, vendor    string
		readOnly, removable, vmedia bool
		optical                     bool
		major, minor                int
		reasonContains              []string
	}{
		// An ext4 label that is not IPA's.
		{name: "sda", controller: "sata", vendor: "ATA", major: 8},
		{name: "vdb", controller: "virtio", vmedia: true, major: 253, minor: 16,
			reasonContains: []string{VirtualMediaLabel, "FAT boot sector", "read from /dev/vdb"}},
		{name: "sr0", controller: "sata", vendor: "HL-DT-ST", readOnly: true, removable: true, optical: true, major: 11},
		{name: "sr1", controller: "usb", vendor: "ASUS", removable: true, optical: true, major: 11, minor: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, ok := l.Find(tt.name)
			require.True(t, ok)
			assert.Equal(t, tt.controller, d.Controller)
			assert.Equal(t, tt.vendor, d.Vendor)
			assert.Equal(t, tt.readOnly, d.ReadOnly, "read_only")
			assert.Equal(t, tt.removable, d.Removable, "removable")
			assert.Equal(t, tt.vmedia, d.VirtualMedia, "virtual media")
			assert.Equal(t, tt.optical, d.Optical, "optical")
			assert.Equal(t, [2]int{tt.major, tt.minor}, [2]int{d.Major, d.Minor})
			for _, s := range tt.reasonContains {
				assert.Contains(t, d.VirtualMediaReason, s)
			}
			if !tt.vmedia {
				assert.Empty(t, d.VirtualMediaReason)
			}
		})
	}
	// The label is read from the device file itself.
	assert.Equal(t, []fsLabel{{"cloudimg-rootfs", "ext2/3/4 superblock"}}, readLabels(filepath.Join(root, "dev", "sda")))
	// JSON carries the flag.
	sr0, _ := l.Find("sr0")
	b, err := json.Marshal(sr0)
	require.NoError(t, err)
	assert.Contains(t, string(b), `"optical":true`)
	vda, _ := discover(t, "vmedia-usb").Find("vda")
	b, err = json.Marshal(vda)
	require.NoError(t, err)
	assert.NotContains(t, string(b), "optical")
}

func TestIsOptical(t *testing.T) {
	tests := []struct {
		name     string
		major    int
		scsiType string
		want     bool
	}{
		{"sr0", 11, "5", true},
		{"sr0", 11, "", true},  // no device/type file
		{"sr3", 0, "", true},   // dev unreadable
		{"sdx", 0, "5", true},  // type alone
		{"sdx", 0, "4", true},  // WORM, also bound by sr
		{"sdx", 11, "", true},  // major alone
		{"sda", 8, "0", false}, // disk
		{"sdb", 8, "7", false}, // magneto-optical is a disk to sd
		{"mmcblk0", 179, "SD", false},
		{"nvme0n1", 259, "", false},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, isOptical(tt.name, tt.major, tt.scsiType), "%+v", tt)
	}
}

func TestDiscoverMissingRoot(t *testing.T) {
	_, err := Discover(context.Background(), t.TempDir())
	require.Error(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = Discover(ctx, snapshot("nvme-sata"))
	assert.ErrorIs(t, err, context.Canceled)
}

func TestParentOfWithoutSymlinks(t *testing.T) {
	for name, want := range map[string]string{"sda1": "sda", "nvme0n1p3": "nvme0n1", "mmcblk0p2": "mmcblk0", "loop7p1": "loop7", "vdb12": "vdb"} {
		assert.Equal(t, want, parentOf("/nonexistent", "/nonexistent/"+name, name), name)
	}
}

func TestWWNAndVPD(t *testing.T) {
	assert.Equal(t, "0x5000c500a1b2c3d4", wwnFromWWID("naa.5000C500A1B2C3D4"))
	assert.Equal(t, "t10.ATA     QEMU HARDDISK", wwnFromWWID("t10.ATA     QEMU HARDDISK"))
	assert.Equal(t, "ir-vfd-dev/x", unescapeUdev(`ir-vfd-dev\x2fx`))
}

func TestVirtualMediaHeuristics(t *testing.T) {
	tests := []struct {
		vendor, model, controller string
		optical                   bool
		want                      bool
	}{
		{"AMI", "Virtual CDROM0", "usb", false, true},
		{"iDRAC", "Virtual Floppy", "usb", false, true},
		{"HP", "iLO Internal SD-CARD", "usb", false, true},
		{"ATEN", "Virtual HDisk0", "usb", false, true},
		{"SanDisk", "Cruzer Blade", "usb", false, false},
		{"Kingston", "DataTraveler Pilot", "usb", false, false}, // "ilo" inside a word
		{"Samsung", "Flash Drive", "usb", false, false},         // "am" inside a word
		{"VMware", "Virtual disk", "scsi", false, false},        // a real VM disk, not USB
		{"Msft", "Virtual Disk", "sata", false, false},
		{"AMI", "Virtual CDROM0", "sata", true, true}, // an optical drive on any transport
		{"HL-DT-ST", "DVD+-RW GU90N", "sata", true, false},
		{"ASUS", "SDRW-08D2S-U", "usb", true, false},
	}
	for _, tt := range tests {
		t.Run(tt.vendor+" "+tt.model, func(t *testing.T) {
			d := &Disk{Name: "sdx", Vendor: tt.vendor, Model: tt.model, Controller: tt.controller, Optical: tt.optical}
			got, reason := virtualMedia(d, devLinks{})
			assert.Equal(t, tt.want, got)
			if got {
				assert.Contains(t, reason, tt.vendor)
			}
		})
	}
}

// A device's model or serial can hold NULs or bytes that are not UTF-8: the
// disk reports them cleaned, as the controller stores only clean text.
func TestReadStringCleansDeviceText(t *testing.T) {
	dir := t.TempDir()
	model := filepath.Join(dir, "model")
	require.NoError(t, os.WriteFile(model, []byte("SSD\x00 9000\xfe   \n"), 0o644))
	assert.Equal(t, "SSD 9000\uFFFD", readString(model))
	vpd := filepath.Join(dir, "vpd_pg80")
	require.NoError(t, os.WriteFile(vpd, append([]byte{0, 0x80, 0, 12}, "\x00SN\x001\x802  \x00\x00\x00"...), 0o644))
	assert.Equal(t, "SN1\uFFFD2", vpdSerial(vpd))
}
