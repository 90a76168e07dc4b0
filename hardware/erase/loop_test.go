package erase

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/anvil-metal/anvil/hardware"
	"github.com/anvil-metal/anvil/hardware/disk"
	"github.com/anvil-metal/anvil/hardware/internal/testdev"
	"github.com/anvil-metal/anvil/hardware/partition"
	"github.com/anvil-metal/anvil/protocol"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// outside is the environment of a developer machine or CI: no ramdisk, so
// only allow-listed devices may be written.
var outside = hardware.Environment{Evidence: "test"}

// discovered returns the live disk.Disk for a device the test created.
func discovered(t *testing.T, dev string) disk.Disk {
	t.Helper()
	l, err := disk.Discover(context.Background(), "/")
	require.NoError(t, err)
	d, ok := l.Find(dev)
	require.True(t, ok, "%s not discovered", dev)
	return d
}

// allZero reads the whole device from outside the package's code paths.
func allZero(t *testing.T, dev string) bool {
	t.Helper()
	f, err := os.Open(dev)
	require.NoError(t, err)
	defer f.Close()
	buf := make([]byte, 1<<20)
	zero := make([]byte, 1<<20)
	for {
		n, err := f.Read(buf)
		if n > 0 && !bytes.Equal(buf[:n], zero[:n]) {
			return false
		}
		if err == io.EOF {
			return true
		}
		require.NoError(t, err)
	}
}

func TestEraseLoopDevices(t *testing.T) {
	ctx := context.Background()
	zeroOnly := DefaultPolicy()
	zeroOnly.Iterations, zeroOnly.AllowZeroOut = 0, false
	randomLast := DefaultPolicy()
	randomLast.Iterations, randomLast.Zeroize = 1, false
	zeroout := DefaultPolicy()
	zeroout.Iterations = 0
	discard := DefaultPolicy()
	discard.Iterations, discard.AllowDiscard = 0, true
	tests := []struct {
		name       string
		pol        Policy
		methods    []Method // overrides the plan's chain when set
		wantMethod Method
		wantZero   bool
		failed     int // attempts that must have failed first
	}{
		{name: "overwrite with zeros", pol: zeroOnly, wantMethod: MethodOverwrite, wantZero: true},
		{name: "random pass verified against the keystream", pol: randomLast, wantMethod: MethodOverwrite},
		{name: "IPA default: random then zeros", pol: DefaultPolicy(), wantMethod: MethodOverwrite, wantZero: true},
		{name: "BLKZEROOUT", pol: zeroout, wantMethod: MethodZeroOut, wantZero: true},
		{name: "NVMe format refused by a loop device falls back", pol: zeroOnly,
			methods: []Method{MethodNVMeCrypto, MethodNVMeUserData, MethodOverwrite}, wantMethod: MethodOverwrite, wantZero: true, failed: 2},
		{name: "BLKSECDISCARD unsupported, BLKDISCARD reads back zeros", pol: discard,
			methods: []Method{MethodSecDiscard, MethodDiscard, MethodOverwrite}, wantMethod: MethodDiscard, wantZero: true, failed: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dev := testdev.Loop(t, 32<<20, false)
			testdev.Fill(t, dev, 0, 32<<20, 0xAB)
			guard := hardware.NewGuard(outside, []string{dev})
			d := discovered(t, dev)
			plans := Plan(ctx, []disk.Disk{d}, tt.pol, SysProber{}, guard)
			require.Len(t, plans, 1)
			require.Equal(t, ActionErase, plans[0].Action, plans[0].Reason)
			if tt.methods != nil {
				plans[0].Methods = tt.methods
			}
			var mu sync.Mutex
			var last hardware.Progress
			e := &Eraser{Opener: guard}
			res, err := e.Erase(ctx, plans, tt.pol, func(p hardware.Progress) { mu.Lock(); last = p; mu.Unlock() })
			require.NoError(t, err)
			require.Len(t, res.Devices, 1)
			r := res.Devices[0]
			assert.Equal(t, StatusErased, r.Status)
			assert.Equal(t, tt.wantMethod, r.Method)
			require.Len(t, r.Attempts, tt.failed+1)
			for _, a := range r.Attempts[:tt.failed] {
				assert.NotEmpty(t, a.Error, a.Method)
			}
			v := r.Attempts[tt.failed].Verification
			require.NotNil(t, v, "success requires a verification")
			assert.GreaterOrEqual(t, v.Samples, 2)
			assert.Equal(t, 100.0, last.Percent)
			assert.Equal(t, tt.wantZero, allZero(t, dev))
			if !tt.wantZero {
				// still no trace of the old contents
				b := make([]byte, 4096)
				f, err := os.Open(dev)
				require.NoError(t, err)
				_, err = f.ReadAt(b, 16<<20)
				f.Close()
				require.NoError(t, err)
				assert.NotEqual(t, bytes.Repeat([]byte{0xAB}, 4096), b)
			}
		})
	}
}

// TestEraseNeverReportsAnUnverifiedSuccess: a method that claims success
// without writing is caught by the read-back, and the device is failed.
func TestEraseNeverReportsAnUnverifiedSuccess(t *testing.T) {
	ctx := context.Background()
	dev := testdev.Loop(t, 16<<20, false)
	testdev.Fill(t, dev, 0, 16<<20, 0x5A)
	guard := hardware.NewGuard(outside, []string{dev})
	plans := Plan(ctx, []disk.Disk{discovered(t, dev)}, DefaultPolicy(), nil, guard)
	plans[0].Methods = []Method{MethodZeroOut}
	e := &Eraser{Opener: guard, applyOverride: map[Method]func(context.Context, DevicePlan) (pattern, error){
		MethodZeroOut: func(context.Context, DevicePlan) (pattern, error) { return zeroPattern{}, nil }, // lies
	}}
	res, err := e.Erase(ctx, plans, DefaultPolicy(), nil)
	require.Error(t, err)
	var pe *protocol.Error
	require.ErrorAs(t, err, &pe)
	assert.Equal(t, protocol.ErrTypeBlockDeviceErase, pe.Type)
	assert.Equal(t, StatusFailed, res.Devices[0].Status)
	assert.Empty(t, res.Devices[0].Method)
	assert.Contains(t, res.Devices[0].Error, "did not take effect")
}

func TestEraseRefusesUnlistedDevice(t *testing.T) {
	ctx := context.Background()
	listed := testdev.Loop(t, 8<<20, false)
	unlisted := testdev.Loop(t, 8<<20, false)
	testdev.Fill(t, unlisted, 0, 8<<20, 0x77)
	guard := hardware.NewGuard(outside, []string{listed})

	// The planner skips it...
	plans := Plan(ctx, []disk.Disk{discovered(t, listed), discovered(t, unlisted)}, DefaultPolicy(), nil, guard)
	require.Len(t, plans, 2)
	assert.Equal(t, ActionErase, plans[0].Action)
	assert.Equal(t, ActionSkip, plans[1].Action)
	assert.Contains(t, plans[1].Reason, "guard")

	// ...and a forged plan is still refused at open time.
	forged := plans[1]
	forged.Action, forged.Methods = ActionErase, []Method{MethodOverwrite}
	res, err := (&Eraser{Opener: guard}).Erase(ctx, []DevicePlan{forged}, DefaultPolicy(), nil)
	require.Error(t, err)
	assert.Contains(t, res.Devices[0].Error, "allow-list")
	require.Len(t, res.Devices[0].Attempts, 1, "a guard refusal is final")

	f, err := os.Open(unlisted)
	require.NoError(t, err)
	defer f.Close()
	b := make([]byte, 8<<20)
	_, err = io.ReadFull(f, b)
	require.NoError(t, err)
	assert.Equal(t, bytes.Repeat([]byte{0x77}, 8<<20), b, "unlisted device untouched")
}

func TestEraseReadOnlyDevice(t *testing.T) {
	testdev.RequireRoot(t)
	ctx := context.Background()
	img := t.TempDir() + "/ro.img"
	require.NoError(t, os.WriteFile(img, bytes.Repeat([]byte{1}, 4<<20), 0o600))
	dev := strings.TrimSpace(testdev.Run(t, "losetup", "--find", "--show", "--read-only", img))
	t.Cleanup(func() { _, _ = testdev.Output("losetup", "-d", dev) })
	d := discovered(t, dev)
	require.True(t, d.ReadOnly, "losetup -r must be seen as read-only")
	guard := hardware.NewGuard(outside, []string{dev})

	plans := Plan(ctx, []disk.Disk{d}, DefaultPolicy(), nil, guard)
	_, err := (&Eraser{Opener: guard}).Erase(ctx, plans, DefaultPolicy(), nil)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "refused before writing anything")

	skip := DefaultPolicy()
	skip.SkipReadOnly = true
	plans = Plan(ctx, []disk.Disk{d}, skip, nil, guard)
	res, err := (&Eraser{Opener: guard}).Erase(ctx, plans, skip, nil)
	require.NoError(t, err)
	assert.Equal(t, StatusSkipped, res.Devices[0].Status)
}

func TestEraseParallelBounded(t *testing.T) {
	ctx := context.Background()
	var devs []string
	var disks []disk.Disk
	for i := 0; i < 3; i++ {
		dev := testdev.Loop(t, 16<<20, false)
		testdev.Fill(t, dev, 0, 16<<20, byte(0x10+i))
		devs = append(devs, dev)
	}
	for _, dev := range devs {
		disks = append(disks, discovered(t, dev))
	}
	guard := hardware.NewGuard(outside, devs)
	pol := DefaultPolicy()
	pol.Iterations, pol.Concurrency = 0, 2
	res, err := (&Eraser{Opener: guard}).Erase(ctx, Plan(ctx, disks, pol, nil, guard), pol, nil)
	require.NoError(t, err)
	for i, r := range res.Devices {
		assert.Equal(t, StatusErased, r.Status, devs[i])
		assert.True(t, allZero(t, devs[i]), devs[i])
	}
}

func TestEraseAbort(t *testing.T) {
	dev := testdev.Loop(t, 64<<20, false)
	guard := hardware.NewGuard(outside, []string{dev})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	pol := DefaultPolicy()
	plans := Plan(context.Background(), []disk.Disk{discovered(t, dev)}, pol, nil, guard)
	_, err := (&Eraser{Opener: guard}).Erase(ctx, plans, pol, nil)
	require.Error(t, err)
	var pe *protocol.Error
	require.ErrorAs(t, err, &pe)
	assert.Equal(t, protocol.ErrTypeAborted, pe.Type)
}

// blkidTypes returns what blkid -p finds on dev ("" when nothing).
func blkidTypes(t *testing.T, dev string) string {
	t.Helper()
	out, _ := testdev.Output("blkid", "-p", "-o", "export", dev)
	var got []string
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "TYPE=") || strings.HasPrefix(line, "PTTYPE=") {
			got = append(got, line)
		}
	}
	return strings.Join(got, ",")
}

// TestEraseMetadataRemovesRealSignatures builds real metadata with host
// tools (GPT with our writer as no sgdisk/sfdisk is installed, mkfs.ext4,
// mdadm superblocks of every version) and checks with blkid and wipefs that
// none survives.
func TestEraseMetadataRemovesRealSignatures(t *testing.T) {
	testdev.Need(t, "blkid", "wipefs", "mkfs.ext4", "mdadm")
	// mdadm is used for --examine; superblocks come from mdadm --create when
	// the kernel has md, else from testdev.WriteMDSuperblock.
	ctx := context.Background()

	// Disk A: GPT, ext4 on p1, md 1.2 superblock on p2.
	a := testdev.Loop(t, 64<<20, true)
	f, err := os.OpenFile(a, os.O_RDWR, 0)
	require.NoError(t, err)
	layout, err := partition.WriteGPT(f, 64<<20, 512, []partition.Part{{Type: partition.TypeLinuxFS, Size: 24 << 20}, {Type: partition.TypeLinuxRAID}})
	require.NoError(t, err)
	require.NoError(t, f.Sync())
	require.NoError(t, partition.Activate(f, layout))
	f.Close()
	p1, p2 := a+"p1", a+"p2"
	testdev.WaitFor(t, p1)
	testdev.WaitFor(t, p2)
	testdev.Run(t, "mkfs.ext4", "-q", "-F", p1)
	makeMDSuperblock(t, p2, "1.2")

	// Disks B..E: a whole-disk md superblock of each other version; C also
	// gets an ext4 filesystem inside the array's data area (md 1.0 keeps
	// the superblock at the end, so the fs is visible at offset 0 too).
	others := map[string]string{}
	for _, v := range []string{"0.90", "1.0", "1.1"} {
		dev := testdev.Loop(t, 32<<20, false)
		makeMDSuperblock(t, dev, v)
		others[v] = dev
	}
	// Disk F: a DOS (MBR) partition table, written byte by byte as sfdisk
	// would (one Linux partition from sector 2048).
	dos := testdev.Loop(t, 16<<20, false)
	mbr := make([]byte, 512)
	copy(mbr[446:], []byte{0x00, 0x20, 0x21, 0x00, 0x83, 0x00, 0x00, 0x00, 0x00, 0x08, 0x00, 0x00, 0x00, 0x78, 0x00, 0x00})
	mbr[510], mbr[511] = 0x55, 0xAA
	df, err := os.OpenFile(dos, os.O_RDWR, 0)
	require.NoError(t, err)
	_, err = df.WriteAt(mbr, 0)
	require.NoError(t, err)
	require.NoError(t, df.Close())
	require.Contains(t, blkidTypes(t, dos), "PTTYPE=dos")

	require.Contains(t, blkidTypes(t, a), "PTTYPE=gpt")
	require.Contains(t, blkidTypes(t, p1), "TYPE=ext4")
	require.Contains(t, blkidTypes(t, p2), "linux_raid_member")
	for v, dev := range others {
		require.Contains(t, blkidTypes(t, dev), "linux_raid_member", "md %s on %s", v, dev)
	}

	allow := []string{a, p1, p2, dos}
	disks := []disk.Disk{discovered(t, a), discovered(t, dos)}
	for _, dev := range others {
		allow = append(allow, dev)
		disks = append(disks, discovered(t, dev))
	}
	require.Len(t, disks[0].Partitions, 2)
	guard := hardware.NewGuard(outside, allow)
	res, err := EraseMetadata(ctx, disks, guard, MetadataOptions{Shared: SharedCheck{Prober: SysProber{}}}, nil)
	require.NoError(t, err, "%+v", res)

	require.Len(t, res.Devices, 5)
	wipes := res.Devices[0].Wipes
	require.Len(t, wipes, 3)
	assert.Equal(t, []string{p2, p1, a}, []string{wipes[0].Device, wipes[1].Device, wipes[2].Device}, "partitions (last first), then the disk")
	assert.Contains(t, fmt.Sprint(wipes[0].Found), "linux_raid_member")
	assert.Contains(t, fmt.Sprint(wipes[1].Found), "ext")
	assert.Contains(t, fmt.Sprint(wipes[2].Found), "gpt")
	for _, d := range res.Devices {
		assert.Equal(t, StatusErased, d.Status)
		for _, w := range d.Wipes {
			assert.Empty(t, w.Remaining)
		}
	}
	// From outside: nothing left for blkid or wipefs to find.
	assert.Contains(t, fmt.Sprint(res.Devices[1].Wipes[0].Found), "dos")
	for _, dev := range append([]string{a, p1, p2, dos}, others["0.90"], others["1.0"], others["1.1"]) {
		if _, err := os.Stat(dev); err != nil {
			continue // partition gone after the re-read: even better
		}
		assert.Empty(t, blkidTypes(t, dev), dev)
		out, err := testdev.Output("wipefs", "--no-act", "--noheadings", dev)
		require.NoError(t, err)
		assert.Empty(t, strings.TrimSpace(out), "wipefs on %s", dev)
		exam, _ := testdev.Output("mdadm", "--examine", dev)
		assert.NotContains(t, exam, "Magic", dev)
	}
}

// makeMDSuperblock puts an md superblock of the given version on dev: with
// mdadm --create when the kernel has md, else written directly.
func makeMDSuperblock(t *testing.T, dev, version string) {
	t.Helper()
	if !testdev.HasMD() {
		testdev.WriteMDSuperblock(t, dev, version)
		return
	}
	name := fmt.Sprintf("/dev/md/anvil-erase-%d", os.Getpid())
	out, err := testdev.Output("mdadm", "--create", name, "--run", "--force", "--level=1", "--raid-devices=2",
		"--metadata="+version, "--assume-clean", dev, "missing")
	if err != nil {
		t.Fatalf("mdadm --create on %s: %v\n%s", dev, err, out)
	}
	if out, err := testdev.Output("mdadm", "--stop", name); err != nil {
		t.Fatalf("mdadm --stop %s: %v\n%s", name, err, out)
	}
}

// TestEraseAbortMidway cancels while the overwrite is running (erase steps
// are abortable): the device is reported failed with an abort, never erased.
func TestEraseAbortMidway(t *testing.T) {
	dev := testdev.Loop(t, 256<<20, false)
	guard := hardware.NewGuard(outside, []string{dev})
	pol := DefaultPolicy() // random pass + zero pass: long enough to abort
	plans := Plan(context.Background(), []disk.Disk{discovered(t, dev)}, pol, nil, guard)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var once sync.Once
	res, err := (&Eraser{Opener: guard}).Erase(ctx, plans, pol, func(p hardware.Progress) {
		if p.BytesDone > 0 {
			once.Do(cancel)
		}
	})
	require.Error(t, err)
	var pe *protocol.Error
	require.ErrorAs(t, err, &pe)
	assert.Equal(t, protocol.ErrTypeAborted, pe.Type)
	assert.Equal(t, StatusFailed, res.Devices[0].Status)
	assert.Contains(t, res.Devices[0].Error, "context canceled")
}
