package erase

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/anvil-metal/anvil/hardware/disk"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestNVMeSubsystem(t *testing.T) {
	for name, want := range map[string]string{
		"nvme0n1": "nvme0", "nvme12n3": "nvme12", "nvme0n1p1": "", "nvme0": "", "nvme0n": "",
		"nvmen1": "", "sda": "", "nvme0c0n1": "", "loop0": "",
	} {
		assert.Equal(t, want, nvmeSubsystem(name), name)
	}
}

// TestPlanNVMeFormatReachesEveryNamespace: a controller whose Format (FNA
// bit 0) or secure erase (bit 1) applies to all namespaces must not be
// formatted for one namespace while it has others: those were never
// checked by the plan (guard, RAID, read-only), and two plans would
// format the same controller at once. The namespace is overwritten
// instead; a namespace-scoped Format, or an only namespace, still uses
// the drive's own erase.
func TestPlanNVMeFormatReachesEveryNamespace(t *testing.T) {
	const oacsFormat = 0x2
	ns := func(name string) disk.Disk {
		return disk.Disk{Name: name, Path: "/dev/" + name, Size: 1 << 30, Controller: "nvme", LogicalBlockSize: 512}
	}
	tests := []struct {
		name      string
		fna       uint8
		disks     []disk.Disk
		wantFirst Method
		wantNote  string
	}{
		{"all namespaces (bit 0), two namespaces", 0x1 | 0x4, []disk.Disk{ns("nvme0n1"), ns("nvme0n2")}, MethodOverwrite,
			"NVMe Format not used: on this controller it erases every namespace (FNA 0x5), including /dev/nvme0n2"},
		{"secure erase of all (bit 1), two namespaces", 0x2, []disk.Disk{ns("nvme0n1"), ns("nvme0n2")}, MethodOverwrite,
			"NVMe Format not used: on this controller it erases every namespace (FNA 0x2), including /dev/nvme0n2"},
		{"all namespaces, only namespace", 0x1 | 0x4, []disk.Disk{ns("nvme0n1"), ns("nvme1n1")}, MethodNVMeCrypto,
			"format applies to all namespaces of the controller; this is its only one"},
		{"per-namespace format, two namespaces", 0x4, []disk.Disk{ns("nvme0n1"), ns("nvme0n2")}, MethodNVMeCrypto, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			prober := fakeProber{nvme: map[string]NVMeController{}}
			for _, d := range tt.disks {
				prober.nvme[d.Path] = NVMeController{OACS: oacsFormat, FNA: tt.fna}
			}
			plans := Plan(context.Background(), tt.disks, DefaultPolicy(), prober, nil)
			require.Len(t, plans, len(tt.disks))
			p := plans[0]
			require.Equal(t, ActionErase, p.Action, p.Reason)
			assert.Equal(t, tt.wantFirst, p.Methods[0], p.Reason)
			if tt.wantNote != "" {
				assert.Contains(t, p.Notes, tt.wantNote)
			}
			if tt.wantFirst == MethodOverwrite {
				assert.NotContains(t, p.Methods, MethodNVMeCrypto)
				assert.NotContains(t, p.Methods, MethodNVMeUserData)
			}
		})
	}
}

// TestPlanLockedATADrive: a drive left locked (by an interrupted erase,
// most likely) is planned for its security erase, which tries the
// passwords such an erase leaves; a frozen one is not.
func TestPlanLockedATADrive(t *testing.T) {
	sda := disk.Disk{Name: "sda", Path: "/dev/sda", Size: 1 << 30, Controller: "sata", LogicalBlockSize: 512}
	tests := []struct {
		name string
		id   ATAIdentity
		want Method
		note string
	}{
		{"locked", ATAIdentity{SecuritySupported: true, SecurityEnabled: true, Locked: true}, MethodATA, "locked: true"},
		{"enabled, unlocked", ATAIdentity{SecuritySupported: true, SecurityEnabled: true, EnhancedSupported: true}, MethodATAEnhanced, "locked: false"},
		{"frozen", ATAIdentity{SecuritySupported: true, Frozen: true, Locked: true}, MethodOverwrite, "frozen"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			plans := Plan(context.Background(), []disk.Disk{sda}, DefaultPolicy(), fakeProber{ata: map[string]ATAIdentity{"/dev/sda": tt.id}}, nil)
			require.Len(t, plans, 1)
			assert.Equal(t, tt.want, plans[0].Methods[0])
			assert.Contains(t, strings.Join(plans[0].Notes, "; "), tt.note)
		})
	}
}

// TestNVMeOnesAfterFormat: a namespace whose deallocated blocks read as
// 0xFF (DLFEAT 010b) is verified against 0xFF after its format, not
// against zeros, which would fail a drive that erased correctly; and
// 0xFF verification still catches data left behind.
func TestNVMeOnesAfterFormat(t *testing.T) {
	b := make([]byte, 4096)
	b[33] = 0x02
	b[128+2] = 9
	ns, err := ParseIdentifyNamespace(b)
	require.NoError(t, err)
	assert.True(t, ns.OnesOnTrim)
	assert.False(t, ns.ZeroOnTrim)

	path := filepath.Join(t.TempDir(), "ns")
	ones := bytes.Repeat([]byte{0xff}, 4<<20)
	require.NoError(t, os.WriteFile(path, ones, 0o600))
	_, err = verifyPattern(context.Background(), path, int64(len(ones)), onesPattern{}, 8)
	require.NoError(t, err)
	_, err = verifyPattern(context.Background(), path, int64(len(ones)), zeroPattern{}, 8)
	require.Error(t, err, "zeros expected where the drive reads 0xFF")

	ones[2<<20] = 0x42
	require.NoError(t, os.WriteFile(path, ones, 0o600))
	_, err = verifyPattern(context.Background(), path, int64(len(ones)), onesPattern{}, 1)
	require.ErrorContains(t, err, "does not hold the ones")
}

// TestPlanSkipsOpticalDrives: a real DVD drive (no BMC vendor, read-only
// disc or writable one) is not a disk: skipped by both erase steps,
// whatever skip_read_only says, while the snapshot's disk is erased.
func TestPlanSkipsOpticalDrives(t *testing.T) {
	l, err := disk.Discover(context.Background(), filepath.Join("..", "..", "testdata", "hardware", "udevless-dvd"))
	require.NoError(t, err)
	plans := byDevice(Plan(context.Background(), l.Disks, DefaultPolicy(), nil, allowAll{}))
	for _, dev := range []string{"/dev/sr0", "/dev/sr1"} {
		assert.Equal(t, ActionSkip, plans[dev].Action, dev)
		assert.Contains(t, plans[dev].Reason, "optical drive", dev)
	}
	assert.Equal(t, ActionSkip, plans["/dev/vdb"].Action, "virtual media by its FAT label")
	assert.Contains(t, plans["/dev/vdb"].Reason, "ir-vfd-dev")
	assert.Equal(t, ActionErase, plans["/dev/sda"].Action)

	res, err := EraseMetadata(context.Background(), l.Disks, allowAll{deny: map[string]bool{"/dev/sda": true}}, MetadataOptions{}, nil)
	require.NoError(t, err)
	for _, d := range res.Devices {
		if d.Device == "/dev/sr0" || d.Device == "/dev/sr1" {
			assert.Equal(t, StatusSkipped, d.Status, d.Device)
		}
	}
}

// TestEraseMetadataSkipRemovable: skip_removable holds for the metadata
// wipe as for the full erase: a USB stick is left alone, recorded, and
// nothing is opened; without the knob it is wiped (here: attempted).
func TestEraseMetadataSkipRemovable(t *testing.T) {
	l, err := disk.Discover(context.Background(), filepath.Join("..", "..", "testdata", "hardware", "vmedia-usb"))
	require.NoError(t, err)
	var usb []disk.Disk
	for _, d := range l.Disks {
		if d.Removable && !d.VirtualMedia && !d.ReadOnly && !d.Optical {
			usb = append(usb, d)
		}
	}
	require.NotEmpty(t, usb, "the snapshot has a writable USB stick")

	res, err := EraseMetadata(context.Background(), usb, allowAll{}, MetadataOptions{SkipRemovable: true}, nil)
	require.NoError(t, err)
	require.Len(t, res.Devices, len(usb))
	for _, d := range res.Devices {
		assert.Equal(t, StatusSkipped, d.Status, d.Device)
		assert.Contains(t, d.Reason, "skip_removable", d.Device)
	}

	res, err = EraseMetadata(context.Background(), usb, allowAll{}, MetadataOptions{}, nil)
	require.Error(t, err, "allowAll cannot open: the wipe was attempted")
	assert.Equal(t, StatusFailed, res.Devices[0].Status)
}
