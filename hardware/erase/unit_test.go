package erase

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/anvil-metal/anvil/hardware"
	"github.com/anvil-metal/anvil/hardware/disk"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestKernelStructSizes(t *testing.T) {
	assert.Equal(t, uintptr(72), unsafe.Sizeof(nvmeAdminCmd{}), "struct nvme_admin_cmd")
	assert.Equal(t, uintptr(88), unsafe.Sizeof(sgIOHdr{}), "struct sg_io_hdr")
}

func TestFormatCdw10(t *testing.T) {
	tests := []struct {
		lbaf, ses uint8
		want      uint32
	}{
		{0, nvmeSESUserData, 0x200},
		{0, nvmeSESCrypto, 0x400},
		{3, nvmeSESCrypto, 0x403},
		{0x12, nvmeSESUserData, 0x1202}, // LBAF 18: low nibble 2, bits 5:4 -> cdw10 13:12
		{1, nvmeSESNone, 0x1},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, formatCdw10(tt.lbaf, tt.ses), "lbaf=%d ses=%d", tt.lbaf, tt.ses)
	}
}

func identifyController(oacs uint16, fna uint8) []byte {
	b := make([]byte, 4096)
	copy(b[4:24], "SN-TB-0001          ")
	copy(b[24:64], "QEMU NVMe Ctrl                          ")
	copy(b[64:72], "7.2.22  ")
	binary.LittleEndian.PutUint16(b[256:], oacs)
	b[524] = fna
	return b
}

func TestParseIdentifyController(t *testing.T) {
	tests := []struct {
		name           string
		oacs           uint16
		fna            uint8
		format, crypto bool
		all            bool
	}{
		{"QEMU (OACS 0x10a, FNA 0)", 0x10a, 0, true, false, false},
		{"crypto capable", 0x0006, 0x4, true, true, false},
		{"crypto, format applies to all namespaces", 0x0002, 0x5, true, true, true},
		{"no format support", 0x0008, 0x4, false, true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := ParseIdentifyController(identifyController(tt.oacs, tt.fna))
			require.NoError(t, err)
			assert.Equal(t, "SN-TB-0001", c.Serial)
			assert.Equal(t, "QEMU NVMe Ctrl", c.Model)
			assert.Equal(t, "7.2.22", c.Firmware)
			assert.Equal(t, tt.format, c.FormatSupported())
			assert.Equal(t, tt.crypto, c.CryptoEraseSupported())
			assert.Equal(t, tt.all, c.FormatAppliesToAll())
		})
	}
	_, err := ParseIdentifyController(make([]byte, 100))
	assert.Error(t, err)

	// A drive padding with NULs, or writing a byte that is not UTF-8:
	// results carry the fields cleaned (the controller stores them).
	odd := identifyController(0x10a, 0)
	copy(odd[4:24], "SN-\x00\x00ODD\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00")
	copy(odd[24:64], "Odd\xffCtrl\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00")
	c, err := ParseIdentifyController(odd)
	require.NoError(t, err)
	assert.Equal(t, "SN-ODD", c.Serial)
	assert.Equal(t, "Odd\uFFFDCtrl", c.Model)
}

func TestParseIdentifyNamespace(t *testing.T) {
	b := make([]byte, 4096)
	binary.LittleEndian.PutUint64(b[0:8], 2097152)
	b[26] = 0x01      // FLBAS: format 1 in use
	b[33] = 0x01      // DLFEAT: deallocated reads zero
	b[128+4*0+2] = 9  // LBAF0: 512 B
	b[128+4*1+2] = 12 // LBAF1: 4 KiB
	ns, err := ParseIdentifyNamespace(b)
	require.NoError(t, err)
	assert.Equal(t, NVMeNamespace{SizeBlocks: 2097152, LBAFormat: 1, BlockSize: 4096, ZeroOnTrim: true}, ns)
}

func TestDetectSignaturesSynthetic(t *testing.T) {
	const size = 4 << 20
	mk := func(f func(b []byte)) []byte { b := make([]byte, size); f(b); return b }
	tests := []struct {
		name string
		img  []byte
		want []string
	}{
		{"blank", make([]byte, size), nil},
		{"dos", mk(func(b []byte) { b[510], b[511] = 0x55, 0xAA }), []string{"dos"}},
		{"gpt both copies", mk(func(b []byte) { copy(b[512:], "EFI PART"); copy(b[size-512:], "EFI PART") }), []string{"gpt", "gpt-backup"}},
		{"ext4", mk(func(b []byte) { binary.LittleEndian.PutUint16(b[1024+56:], 0xEF53) }), []string{"ext"}},
		{"xfs", mk(func(b []byte) { copy(b, "XFSB") }), []string{"xfs"}},
		{"btrfs", mk(func(b []byte) { copy(b[65536+64:], "_BHRfS_M") }), []string{"btrfs"}},
		{"vfat", mk(func(b []byte) { copy(b[82:], "FAT32   "); b[510], b[511] = 0x55, 0xAA }), []string{"dos", "vfat"}},
		{"lvm", mk(func(b []byte) { copy(b[512:], "LABELONE"); copy(b[512+24:], "LVM2 001") }), []string{"LVM2_member"}},
		{"swap", mk(func(b []byte) { copy(b[4086:], "SWAPSPACE2") }), []string{"swap"}},
	}
	for _, v := range []string{"0.90", "1.0", "1.1", "1.2"} {
		off := mdOffsets(size)[v]
		major := uint32(1)
		if v == "0.90" {
			major = 0
		}
		tests = append(tests, struct {
			name string
			img  []byte
			want []string
		}{"md " + v, mk(func(b []byte) {
			binary.LittleEndian.PutUint32(b[off:], mdMagic)
			binary.LittleEndian.PutUint32(b[off+4:], major)
		}), []string{"linux_raid_member"}})
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			for _, s := range DetectSignatures(bytes.NewReader(tt.img), size) {
				got = append(got, s.Type)
			}
			assert.Equal(t, tt.want, got)
		})
	}
}

func TestMetadataRegionsCoverEverySignature(t *testing.T) {
	for _, size := range []int64{3 << 20, 64 << 20, 1 << 30, 300 << 30} {
		regions := metadataRegions(size, 4096)
		covered := func(off, n int64) bool {
			for _, r := range regions {
				if off >= r.off && off+n <= r.off+r.n {
					return true
				}
			}
			return false
		}
		for v, off := range mdOffsets(size) {
			assert.True(t, covered(off, 4096), "md %s superblock at %d on %d", v, off, size)
		}
		assert.True(t, covered(0, 8192), "head")
		assert.True(t, covered(size-4096, 4096), "backup GPT")
		for _, m := range append([]int64{vmfsVolumeOffset, vmfsFSOffset, gfsOffset}, btrfsMirrors...) {
			if m+4096 <= size {
				assert.True(t, covered(m, 4096), "superblock at %d on %d", m, size)
			}
		}
		for _, r := range regions {
			assert.Zero(t, r.off%4096)
			assert.LessOrEqual(t, r.off+r.n, size)
		}
	}
}

func TestSampleOffsets(t *testing.T) {
	offs := sampleOffsets(1<<30, 8, 4096)
	require.GreaterOrEqual(t, len(offs), 9)
	assert.Equal(t, int64(0), offs[0])
	assert.Equal(t, int64(1<<30-sampleSize), offs[len(offs)-1], "the last block is always sampled")
	for i := 1; i < len(offs); i++ {
		assert.Greater(t, offs[i], offs[i-1])
		assert.Zero(t, offs[i]%4096)
	}
	assert.Equal(t, []int64{0}, sampleOffsets(4096, 8, 4096))
}

func TestStreamPatternIsSeekable(t *testing.T) {
	p, err := newStreamPattern()
	require.NoError(t, err)
	whole := make([]byte, 1<<16)
	p.fill(whole, 0)
	part := make([]byte, 4096)
	p.fill(part, 8192)
	assert.Equal(t, whole[8192:8192+4096], part)
	assert.NotEqual(t, make([]byte, 4096), part)
}

// TestWritePassCoversEveryByte writes passes over files of awkward sizes
// (under one chunk, a ragged tail, several chunks with writers racing)
// and checks every byte against the pattern, not just the samples the
// erase verification reads, and that progress only grows and ends at the
// size.
func TestWritePassCoversEveryByte(t *testing.T) {
	stream, err := newStreamPattern()
	require.NoError(t, err)
	sizes := []int64{4096, 4096 + 512, chunkSize - 4096, 3*chunkSize + 4096 + 1536}
	for _, size := range sizes {
		for _, p := range []pattern{zeroPattern{}, stream} {
			t.Run(fmt.Sprintf("%d/%s", size, p.name()), func(t *testing.T) {
				path := filepath.Join(t.TempDir(), "d")
				junk := bytes.Repeat([]byte{0xa5}, int(size))
				require.NoError(t, os.WriteFile(path, junk, 0o600))
				f, err := os.OpenFile(path, os.O_WRONLY, 0)
				require.NoError(t, err)
				defer f.Close()
				var seen []int64
				require.NoError(t, writePass(context.Background(), f, size, p, func(done int64) { seen = append(seen, done) }))

				got, err := os.ReadFile(path)
				require.NoError(t, err)
				want := make([]byte, size)
				p.fill(want, 0)
				require.Len(t, got, int(size))
				require.True(t, bytes.Equal(want, got), "first wrong byte at %d", firstDiff(got, want))
				require.NotEmpty(t, seen)
				assert.IsNonDecreasing(t, seen)
				assert.Equal(t, size, seen[len(seen)-1])
			})
		}
	}
}

func TestWritePassStopsOnCancelAndError(t *testing.T) {
	path := filepath.Join(t.TempDir(), "d")
	require.NoError(t, os.WriteFile(path, nil, 0o600))
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	require.NoError(t, err)
	defer f.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err = writePass(ctx, f, 4*chunkSize, zeroPattern{}, nil)
	require.ErrorIs(t, err, context.Canceled)
	st, err := f.Stat()
	require.NoError(t, err)
	assert.Zero(t, st.Size(), "nothing written after cancellation")

	ro, err := os.Open(path) // read-only: every write fails
	require.NoError(t, err)
	defer ro.Close()
	err = writePass(context.Background(), ro, 4*chunkSize, zeroPattern{}, nil)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "write at")
}

func TestVerifyCatchesUnerasedData(t *testing.T) {
	path := filepath.Join(t.TempDir(), "d")
	data := make([]byte, 8<<20)
	data[5<<20] = 0x42 // one stray byte on a sample point
	require.NoError(t, os.WriteFile(path, data, 0o600))
	offs := sampleOffsets(int64(len(data)), 7, 4096)
	_, err := verifyPattern(context.Background(), path, int64(len(data)), zeroPattern{}, 7)
	hit := false
	for _, o := range offs {
		if o <= 5<<20 && 5<<20 < o+sampleSize {
			hit = true
		}
	}
	require.True(t, hit, "test setup: the stray byte must lie on a sample")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "did not take effect")

	require.NoError(t, os.WriteFile(path, make([]byte, 8<<20), 0o600))
	v, err := verifyPattern(context.Background(), path, 8<<20, zeroPattern{}, 7)
	require.NoError(t, err)
	assert.Equal(t, len(offs), v.Samples)
}

func TestPolicyWithArgs(t *testing.T) {
	tests := []struct {
		name    string
		args    map[string]any
		check   func(t *testing.T, p Policy)
		wantErr bool
	}{
		{"defaults are IPA's", nil, func(t *testing.T, p Policy) {
			assert.Equal(t, 4, p.Concurrency)
			assert.Equal(t, 1, p.Iterations)
			assert.True(t, p.Zeroize)
			assert.False(t, p.SkipReadOnly)
			assert.False(t, p.AllowDiscard)
			assert.True(t, p.EnableNVMeSecureErase)
		}, false},
		{"canonical names", map[string]any{"concurrency": float64(2), "skip_read_only": true, "allow_discard": "true", "iterations": 0}, func(t *testing.T, p Policy) {
			assert.Equal(t, 2, p.Concurrency)
			assert.True(t, p.SkipReadOnly)
			assert.True(t, p.AllowDiscard)
			assert.Equal(t, 0, p.Iterations)
		}, false},
		{"IPA aliases", map[string]any{"agent_erase_devices_zeroize": false, "agent_erase_devices_iterations": float64(3), "disk_erasure_concurrency": 8}, func(t *testing.T, p Policy) {
			assert.False(t, p.Zeroize)
			assert.Equal(t, 3, p.Iterations)
			assert.Equal(t, 8, p.Concurrency)
		}, false},
		{"canonical name beats the IPA alias, whatever the map order", map[string]any{"agent_erase_devices_zeroize": true, "zeroize": false,
			"agent_continue_if_ata_erase_failed": false, "agent_continue_if_secure_erase_failed": true}, func(t *testing.T, p Policy) {
			assert.False(t, p.Zeroize)
			assert.True(t, p.ContinueIfSecureEraseFailed, "the newer IPA name wins over agent_continue_if_ata_erase_failed")
		}, false},
		{"zero concurrency", map[string]any{"concurrency": 0}, nil, true},
		{"fractional", map[string]any{"iterations": 1.5}, nil, true},
		{"bad bool", map[string]any{"zeroize": "maybe"}, nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := DefaultPolicy().WithArgs(tt.args)
			if tt.wantErr {
				assert.Error(t, err)
				return
			}
			require.NoError(t, err)
			tt.check(t, p)
		})
	}
}

// fakeProber answers identify questions from tables.
type fakeProber struct {
	nvme   map[string]NVMeController
	ata    map[string]ATAIdentity
	shared map[string][]SharedFilesystem
}

func (f fakeProber) SharedFilesystems(path string) ([]SharedFilesystem, error) {
	return f.shared[path], nil
}

func (f fakeProber) NVMe(path string) (NVMeController, NVMeNamespace, error) {
	c, ok := f.nvme[path]
	if !ok {
		return c, NVMeNamespace{}, errors.New("identify failed: inappropriate ioctl")
	}
	return c, NVMeNamespace{LBAFormat: 2}, nil
}

func (f fakeProber) ATA(path string) (ATAIdentity, error) {
	id, ok := f.ata[path]
	if !ok {
		return id, errNotApplicable
	}
	return id, nil
}

// allowAll is an Opener for planning tests; it never opens anything.
type allowAll struct{ deny map[string]bool }

func (allowAll) OpenForWrite(string, int) (*os.File, error) {
	return nil, errors.New("not in this test")
}
func (a allowAll) Allows(p string) bool { return !a.deny[p] }

func TestPlanFromSnapshots(t *testing.T) {
	ctx := context.Background()
	load := func(name string) []disk.Disk {
		l, err := disk.Discover(ctx, filepath.Join("..", "..", "testdata", "hardware", name))
		require.NoError(t, err)
		return l.Disks
	}
	pol := DefaultPolicy()
	prober := fakeProber{
		nvme: map[string]NVMeController{"/dev/nvme0n1": {OACS: 0x6, FNA: 0x4}},
		ata: map[string]ATAIdentity{
			"/dev/sda": {SecuritySupported: true, EnhancedSupported: true, EnhancedEraseTime: 400 * time.Minute},
			"/dev/sdb": {SecuritySupported: true, Frozen: true},
		},
	}
	userDataOnly := fakeProber{nvme: map[string]NVMeController{"/dev/nvme0n1": {OACS: 0x2}}}
	continuePol := pol
	continuePol.ContinueIfSecureEraseFailed = true
	skipRO := pol
	skipRO.SkipReadOnly = true
	discardPol := pol
	discardPol.AllowDiscard, discardPol.Iterations = true, 0
	sharedSDB := fakeProber{shared: map[string][]SharedFilesystem{"/dev/sdb": {{Name: "VMware VMFS", Where: "MBR partition 1 has type 0xfb"}}}}
	sharedPol, err := pol.WithArgs(map[string]any{"erase_shared_filesystems": "true"})
	require.NoError(t, err)

	tests := []struct {
		name     string
		snapshot string
		pol      Policy
		prober   Prober
		opener   Opener
		want     map[string]Action
		methods  map[string][]Method
		reason   map[string]string
	}{
		{
			name: "nvme + sata, IPA defaults", snapshot: "nvme-sata", pol: pol, prober: prober, opener: allowAll{},
			want: map[string]Action{"/dev/nvme0n1": ActionErase, "/dev/sda": ActionErase, "/dev/sdb": ActionErase},
			methods: map[string][]Method{
				"/dev/nvme0n1": {MethodNVMeCrypto, MethodNVMeUserData},
				"/dev/sda":     {MethodATAEnhanced},
				"/dev/sdb":     {MethodOverwrite}, // frozen: overwrite
			},
			reason: map[string]string{"/dev/sdb": "overwrite"},
		},
		{
			name: "fallback allowed after secure erase", snapshot: "nvme-sata", pol: continuePol, prober: userDataOnly, opener: allowAll{},
			want:    map[string]Action{"/dev/nvme0n1": ActionErase, "/dev/sda": ActionErase, "/dev/sdb": ActionErase},
			methods: map[string][]Method{"/dev/nvme0n1": {MethodNVMeUserData, MethodOverwrite}, "/dev/sda": {MethodOverwrite}},
			reason:  map[string]string{"/dev/nvme0n1": "user-data erase"},
		},
		{
			name: "discard only on non-rotational devices that support it", snapshot: "nvme-sata", pol: discardPol, prober: nil, opener: allowAll{},
			want: map[string]Action{"/dev/nvme0n1": ActionErase, "/dev/sda": ActionErase, "/dev/sdb": ActionErase},
			methods: map[string][]Method{
				"/dev/nvme0n1": {MethodSecDiscard, MethodDiscard, MethodZeroOut, MethodOverwrite},
				"/dev/sda":     {MethodZeroOut, MethodOverwrite},
			},
		},
		{
			name: "guard protects a device", snapshot: "nvme-sata", pol: pol, prober: nil, opener: allowAll{deny: map[string]bool{"/dev/sda": true}},
			want:   map[string]Action{"/dev/nvme0n1": ActionErase, "/dev/sda": ActionSkip, "/dev/sdb": ActionErase},
			reason: map[string]string{"/dev/sda": "guard"},
		},
		{
			name: "md array erased as a device, members skipped, other partitions erased", snapshot: "md-raid1", pol: pol, prober: nil, opener: allowAll{},
			want:   map[string]Action{"/dev/md0": ActionErase, "/dev/sda": ActionSkip, "/dev/sdb": ActionSkip, "/dev/sda1": ActionErase, "/dev/sdb1": ActionErase},
			reason: map[string]string{"/dev/sda": "hold(s) members of software RAID md0, erased through the array", "/dev/md0": "overwrite"},
		},
		{
			name: "read-only refused by default", snapshot: "vmedia-usb", pol: pol, prober: nil, opener: allowAll{},
			want:   map[string]Action{"/dev/vda": ActionErase, "/dev/vdb": ActionSkip, "/dev/sr0": ActionSkip, "/dev/sdd": ActionRefuse, "/dev/sdc": ActionErase},
			reason: map[string]string{"/dev/vdb": "ir-vfd-dev", "/dev/sr0": "virtual media", "/dev/sdd": "read-only"},
		},
		{
			name: "shared-storage filesystem refused", snapshot: "nvme-sata", pol: pol, prober: sharedSDB, opener: allowAll{},
			want:   map[string]Action{"/dev/nvme0n1": ActionErase, "/dev/sda": ActionErase, "/dev/sdb": ActionRefuse},
			reason: map[string]string{"/dev/sdb": "refusing to erase /dev/sdb: it holds VMware VMFS (MBR partition 1 has type 0xfb)"},
		},
		{
			name: "shared-storage filesystem erased when allowed", snapshot: "nvme-sata", pol: sharedPol, prober: sharedSDB, opener: allowAll{},
			want: map[string]Action{"/dev/nvme0n1": ActionErase, "/dev/sda": ActionErase, "/dev/sdb": ActionErase},
		},
		{
			name: "read-only skipped by policy", snapshot: "vmedia-usb", pol: skipRO, prober: nil, opener: allowAll{},
			want: map[string]Action{"/dev/vda": ActionErase, "/dev/vdb": ActionSkip, "/dev/sr0": ActionSkip, "/dev/sdd": ActionSkip, "/dev/sdc": ActionErase},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			plans := Plan(ctx, load(tt.snapshot), tt.pol, tt.prober, tt.opener)
			got := map[string]Action{}
			for _, p := range plans {
				got[p.Device] = p.Action
				assert.NotEmpty(t, p.Reason, p.Device)
				if p.Action == ActionErase {
					assert.NotEmpty(t, p.Methods)
					assert.Greater(t, p.EstimatedSeconds, 0.0, p.Device)
				}
				if m, ok := tt.methods[p.Device]; ok {
					assert.Equal(t, m, p.Methods, p.Device)
				}
				if r, ok := tt.reason[p.Device]; ok {
					assert.Contains(t, p.Reason, r, p.Device)
				}
			}
			assert.Equal(t, tt.want, got)
		})
	}
}

func TestPlanEstimatesOrderOfMagnitude(t *testing.T) {
	hdd := disk.Disk{Path: "/dev/sda", Size: 4e12, Rotational: true, Controller: "sata"}
	ssd := disk.Disk{Path: "/dev/sdb", Size: 4e12, Controller: "sata"}
	pol := DefaultPolicy()
	ph := planOne(hdd, pol, nil, nil, nil)
	ps := planOne(ssd, pol, nil, nil, nil)
	// 2 passes over 4 TB at 150 MB/s is ~15 h; an SSD is faster.
	assert.InDelta(t, 2*4e12/150e6, ph.EstimatedSeconds, 1)
	assert.Less(t, ps.EstimatedSeconds, ph.EstimatedSeconds)
}

// TestEraseConcurrencyIsBounded runs six devices (plain files) through a
// method that records how many run at once.
func TestEraseConcurrencyIsBounded(t *testing.T) {
	dir := t.TempDir()
	var plans []DevicePlan
	var allow []string
	for i := 0; i < 6; i++ {
		p := filepath.Join(dir, fmt.Sprintf("d%d", i))
		require.NoError(t, os.WriteFile(p, make([]byte, 1<<20), 0o600))
		allow = append(allow, p)
		plans = append(plans, DevicePlan{Device: p, Size: 1 << 20, Action: ActionErase, Methods: []Method{MethodZeroOut}})
	}
	var mu sync.Mutex
	running, peak := 0, 0
	e := &Eraser{Opener: hardware.NewGuard(hardware.Environment{}, allow), applyOverride: map[Method]func(context.Context, DevicePlan) (pattern, error){
		MethodZeroOut: func(context.Context, DevicePlan) (pattern, error) {
			mu.Lock()
			running++
			peak = max(peak, running)
			mu.Unlock()
			time.Sleep(30 * time.Millisecond)
			mu.Lock()
			running--
			mu.Unlock()
			return zeroPattern{}, nil
		},
	}}
	pol := DefaultPolicy()
	pol.Concurrency = 2
	var reports []hardware.Progress
	res, err := e.Erase(context.Background(), plans, pol, func(p hardware.Progress) { mu.Lock(); reports = append(reports, p); mu.Unlock() })
	require.NoError(t, err)
	assert.Equal(t, 2, peak)
	for _, d := range res.Devices {
		assert.Equal(t, StatusErased, d.Status)
	}
	require.NotEmpty(t, reports)
	last := reports[len(reports)-1]
	assert.Equal(t, 100.0, last.Percent)
	assert.Equal(t, uint64(6<<20), last.BytesTotal)
}
