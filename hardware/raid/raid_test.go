package raid

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/anvil-metal/anvil/hardware"
	"github.com/anvil-metal/anvil/hardware/erase"
	"github.com/anvil-metal/anvil/hardware/internal/testdev"
	"github.com/anvil-metal/anvil/hardware/partition"
	"github.com/anvil-metal/anvil/protocol"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// events is a shared, ordered log of what the fakes saw.
type events struct {
	mu  sync.Mutex
	log []string
}

func (e *events) add(s string) { e.mu.Lock(); e.log = append(e.log, s); e.mu.Unlock() }

// fakeRunner records mdadm invocations; onCreate lets a test simulate the
// kernel side of --create.
type fakeRunner struct {
	ev       *events
	onCreate func(args []string) error
	fail     map[string]error
}

func (f *fakeRunner) Run(_ context.Context, name string, args ...string) ([]byte, error) {
	f.ev.add(filepath.Base(name) + " " + strings.Join(args, " "))
	if err := f.fail[args[0]]; err != nil {
		return nil, err
	}
	if args[0] == "--create" && f.onCreate != nil {
		return nil, f.onCreate(args)
	}
	return nil, nil
}

// fileOpener maps /dev paths to sparse files under dir, so destructive code
// runs against files the test owns; deny refuses like the guard.
type fileOpener struct {
	ev   *events
	dir  string
	deny map[string]bool
}

func (o fileOpener) file(p string) string {
	return filepath.Join(o.dir, strings.TrimPrefix(p, "/dev/"))
}

func (o fileOpener) Allows(p string) bool { return !o.deny[p] }

func (o fileOpener) OpenForWrite(p string, flag int) (*os.File, error) {
	if o.deny[p] {
		return nil, &hardware.ProtectedError{Path: p, Reason: "test deny"}
	}
	o.ev.add("open " + p)
	return os.OpenFile(o.file(p), os.O_RDWR, 0)
}

func (o fileOpener) create(t *testing.T, p string, size int64) {
	t.Helper()
	require.NoError(t, os.MkdirAll(filepath.Dir(o.file(p)), 0o755))
	f, err := os.Create(o.file(p))
	require.NoError(t, err)
	require.NoError(t, f.Truncate(size))
	f.Close()
}

func snapshot(name string) string { return filepath.Join("..", "..", "testdata", "hardware", name) }

func TestParseTargetConfig(t *testing.T) {
	tests := []struct {
		name    string
		in      any
		wantErr string
		levels  []string
	}{
		{"map with MAX", map[string]any{"logical_disks": []any{
			map[string]any{"size_gb": float64(10), "raid_level": "1", "controller": "software"},
			map[string]any{"size_gb": "MAX", "raid_level": "0", "controller": "software"},
		}}, "", []string{"1", "0"}},
		{"json string", `{"logical_disks":[{"size_gb":"MAX","raid_level":"1+0","controller":"software"}]}`, "", []string{"1+0"}},
		{"hardware controller", `{"logical_disks":[{"size_gb":10,"raid_level":"1","controller":"PERC H740"}]}`, "only software RAID", nil},
		{"no controller", `{"logical_disks":[{"size_gb":10,"raid_level":"1"}]}`, "only software RAID", nil},
		{"raid5", `{"logical_disks":[{"size_gb":10,"raid_level":"5","controller":"software"}]}`, "not supported", nil},
		{"MAX not last", `{"logical_disks":[{"size_gb":"MAX","raid_level":"1","controller":"software"},{"size_gb":5,"raid_level":"0","controller":"software"}]}`, "only allowed on the last", nil},
		{"bad size", `{"logical_disks":[{"size_gb":-1,"raid_level":"1","controller":"software"}]}`, "positive", nil},
		{"size that would overflow", `{"logical_disks":[{"size_gb":1e30,"raid_level":"1+0","controller":"software"}]}`, "larger than any disk", nil},
		{"size as a huge string", `{"logical_disks":[{"size_gb":"17179869184","raid_level":"1","controller":"software"}]}`, "larger than any disk", nil},
		{"empty", `{"logical_disks":[]}`, "no logical_disks", nil},
		{"not json", `{`, "target_raid_config", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := ParseTargetConfig(tt.in)
			if tt.wantErr != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tt.wantErr)
				return
			}
			require.NoError(t, err)
			var got []string
			for _, ld := range cfg.LogicalDisks {
				got = append(got, ld.RAIDLevel)
			}
			assert.Equal(t, tt.levels, got)
		})
	}
}

func TestPerMemberBytes(t *testing.T) {
	assert.Equal(t, uint64(10<<30), perMemberBytes("1", 10<<30, 2))
	assert.Equal(t, uint64(5<<30), perMemberBytes("0", 10<<30, 2))
	assert.Equal(t, uint64(5<<30), perMemberBytes("10", 10<<30, 4))
	assert.Equal(t, "/dev/sda1", partitionPath("/dev/sda", 1))
	assert.Equal(t, "/dev/nvme0n1p2", partitionPath("/dev/nvme0n1", 2))
	assert.Equal(t, "/dev/loop3p1", partitionPath("/dev/loop3", 1))
}

// TestDeleteConfigurationOrder runs against the md-raid1 snapshot: md0 over
// sda2+sdb2. The devices themselves are files the test owns.
func TestDeleteConfigurationOrder(t *testing.T) {
	ctx := context.Background()
	ev := &events{}
	op := fileOpener{ev: ev, dir: t.TempDir()}
	for _, p := range []string{"/dev/sda", "/dev/sdb", "/dev/sda1", "/dev/sdb1", "/dev/sda2", "/dev/sdb2"} {
		op.create(t, p, 32<<20)
	}
	testdev.WriteMDSuperblock(t, op.file("/dev/sda2"), "1.2")
	testdev.WriteMDSuperblock(t, op.file("/dev/sdb2"), "1.2")
	m := &Manager{Mdadm: "/opt/mdadm", Root: snapshot("md-raid1"), Opener: op, Runner: &fakeRunner{ev: ev}}
	res, err := m.DeleteConfiguration(ctx, nil)
	require.NoError(t, err)

	assert.Equal(t, []string{
		"mdadm --stop /dev/md0",                               // arrays first
		"mdadm --zero-superblock /dev/sda2", "open /dev/sda2", // then members
		"mdadm --zero-superblock /dev/sdb2", "open /dev/sdb2",
		"open /dev/sda", "open /dev/sda", // then the partition tables they live in (wipe, forget)
		"open /dev/sdb", "open /dev/sdb",
	}, ev.log)
	require.Len(t, res.Arrays, 1)
	assert.True(t, res.Arrays[0].Stopped)
	assert.Equal(t, []string{"/dev/sda2", "/dev/sdb2"}, res.Arrays[0].Members)
	require.Len(t, res.MembersWiped, 2)
	for _, w := range res.MembersWiped {
		assert.Contains(t, fmt.Sprint(w.Found), "linux_raid_member", w.Device)
		assert.Empty(t, w.Remaining)
	}
	require.Len(t, res.DisksWiped, 2)
	// The superblocks are really gone from the member "devices".
	for _, p := range []string{"/dev/sda2", "/dev/sdb2"} {
		f, err := os.Open(op.file(p))
		require.NoError(t, err)
		assert.Empty(t, erase.DetectSignatures(f, 32<<20), p)
		f.Close()
	}
}

func TestDeleteConfigurationRespectsGuard(t *testing.T) {
	ev := &events{}
	op := fileOpener{ev: ev, dir: t.TempDir(), deny: map[string]bool{"/dev/sdb2": true}}
	m := &Manager{Root: snapshot("md-raid1"), Opener: op, Runner: &fakeRunner{ev: ev}}
	res, err := m.DeleteConfiguration(context.Background(), nil)
	require.NoError(t, err)
	require.Len(t, res.Arrays, 1)
	assert.False(t, res.Arrays[0].Stopped)
	assert.Contains(t, res.Arrays[0].Skipped, "/dev/sdb2")
	assert.Empty(t, ev.log, "nothing stopped, nothing opened")
}

// TestDeleteConfigurationLeavesSkippedArraysWhole: with one member of a
// running array protected, the array is left running, and so are its
// other members, although the guard would allow them one by one and they
// carry md superblocks: the stale-superblock sweep must not wipe a live
// member, nor the partition table of the disk it lives on. A stale
// superblock elsewhere on that disk still goes.
func TestDeleteConfigurationLeavesSkippedArraysWhole(t *testing.T) {
	root := t.TempDir()
	testdev.Run(t, "cp", "-a", snapshot("md-raid1")+"/.", root)
	ev := &events{}
	op := fileOpener{ev: ev, dir: t.TempDir(), deny: map[string]bool{"/dev/sdb2": true}}
	for _, p := range []string{"/dev/sda", "/dev/sdb", "/dev/sda1", "/dev/sdb1", "/dev/sda2", "/dev/sdb2"} {
		op.create(t, p, 32<<20)
		require.NoError(t, os.Truncate(filepath.Join(root, p), 32<<20))
	}
	for _, p := range []string{"/dev/sda1", "/dev/sda2", "/dev/sdb2"} { // sda1: stale, from an older array
		testdev.WriteMDSuperblock(t, op.file(p), "1.2")
		testdev.WriteMDSuperblock(t, filepath.Join(root, p), "1.2")
	}
	m := &Manager{Root: root, Opener: op, Runner: &fakeRunner{ev: ev}}
	res, err := m.DeleteConfiguration(context.Background(), nil)
	require.NoError(t, err)

	require.Len(t, res.Arrays, 1)
	assert.False(t, res.Arrays[0].Stopped)
	assert.Equal(t, []string{"/dev/sda1"}, res.StaleSuperblks, "the live member /dev/sda2 is not stale")
	assert.Equal(t, []string{"mdadm --zero-superblock /dev/sda1", "open /dev/sda1"}, ev.log,
		"nothing of md0 touched, nor sda's partition table")
	assert.Equal(t, []KeptDisk{{Disk: "/dev/sda", Reason: "partition /dev/sda2 belongs to /dev/md0, which was left running"}}, res.DisksKept)
	f, err := os.Open(op.file("/dev/sda2"))
	require.NoError(t, err)
	defer f.Close()
	assert.NotEmpty(t, erase.DetectSignatures(f, 32<<20), "md0's member keeps its superblock")
}

func TestDeleteConfigurationStopFailure(t *testing.T) {
	ev := &events{}
	op := fileOpener{ev: ev, dir: t.TempDir()}
	m := &Manager{Root: snapshot("md-raid1"), Opener: op, Runner: &fakeRunner{ev: ev, fail: map[string]error{"--stop": errors.New("device busy")}}}
	_, err := m.DeleteConfiguration(context.Background(), nil)
	var pe *protocol.Error
	require.ErrorAs(t, err, &pe)
	assert.Equal(t, protocol.ErrTypeRAID, pe.Type)
	assert.Equal(t, []string{"mdadm --stop /dev/md0"}, ev.log, "no member is touched while an array could not be stopped")
}

// fakeRoot writes a minimal sysfs for whole disks of the given sizes.
func fakeRoot(t *testing.T, disks map[string]int64) string {
	root := t.TempDir()
	for name, size := range disks {
		d := filepath.Join(root, "sys", "class", "block", name)
		require.NoError(t, os.MkdirAll(filepath.Join(d, "queue"), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(d, "size"), []byte(fmt.Sprint(size/512)), 0o644))
		require.NoError(t, os.WriteFile(filepath.Join(d, "queue", "logical_block_size"), []byte("512"), 0o644))
	}
	return root
}

func TestCreateConfiguration(t *testing.T) {
	const gib = int64(1 << 30)
	tests := []struct {
		name      string
		disks     map[string]int64
		cfg       string
		wantArgs  []string
		wantParts map[string][]uint64 // disk -> partition sizes in bytes (GPT entries)
		wantErr   string
	}{
		{
			name:  "RAID1 of 10 GiB plus RAID0 MAX on two disks",
			disks: map[string]int64{"sda": 40 * gib, "sdb": 50 * gib},
			cfg:   `{"logical_disks":[{"size_gb":10,"raid_level":"1","controller":"software"},{"size_gb":"MAX","raid_level":"0","controller":"software"}]}`,
			wantArgs: []string{
				"mdadm --create /dev/md/t0 --run --metadata=1.2 --level=1 --raid-devices=2 --name=t0 /dev/sda1 /dev/sdb1",
				"mdadm --create /dev/md/t1 --run --metadata=1.2 --level=0 --raid-devices=2 --name=t1 /dev/sda2 /dev/sdb2",
			},
			wantParts: map[string][]uint64{"sda": {10 << 30, 30<<30 - 3<<20}, "sdb": {10 << 30, 30<<30 - 3<<20}}, // MAX: same size on both, from the smaller disk
		},
		{
			name:  "RAID10 over four named disks, 8 GiB -> 4 GiB per member",
			disks: map[string]int64{"sda": 20 * gib, "sdb": 20 * gib, "sdc": 20 * gib, "sdd": 20 * gib, "sde": 20 * gib},
			cfg:   `{"logical_disks":[{"size_gb":8,"raid_level":"1+0","controller":"software","physical_disks":["/dev/sdd",{"name":"sdc"},"sdb","sda"],"volume_name":"root"}]}`,
			wantArgs: []string{
				"mdadm --create /dev/md/root --run --metadata=1.2 --level=10 --raid-devices=4 --name=root /dev/sdd1 /dev/sdc1 /dev/sdb1 /dev/sda1",
			},
			wantParts: map[string][]uint64{"sda": {4 << 30}, "sdd": {4 << 30}},
		},
		{
			name:    "too big",
			disks:   map[string]int64{"sda": 4 * gib, "sdb": 4 * gib},
			cfg:     `{"logical_disks":[{"size_gb":10,"raid_level":"1","controller":"software"}]}`,
			wantErr: "does not fit",
		},
		{
			name:    "RAID10 needs four disks",
			disks:   map[string]int64{"sda": 4 * gib, "sdb": 4 * gib},
			cfg:     `{"logical_disks":[{"size_gb":1,"raid_level":"10","controller":"software"}]}`,
			wantErr: "at least 4 disks",
		},
		{
			name:    "unknown physical disk",
			disks:   map[string]int64{"sda": 4 * gib, "sdb": 4 * gib},
			cfg:     `{"logical_disks":[{"size_gb":1,"raid_level":"1","controller":"software","physical_disks":["sda","sdz"]}]}`,
			wantErr: "no disk matches",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := fakeRoot(t, tt.disks)
			ev := &events{}
			op := fileOpener{ev: ev, dir: filepath.Join(root, "dev")}
			for name, size := range tt.disks {
				op.create(t, "/dev/"+name, size)
				for i := 1; i <= 2; i++ {
					op.create(t, partitionPath("/dev/"+name, i), 0)
				}
			}
			var created []string
			runner := &fakeRunner{ev: ev, onCreate: func(args []string) error {
				// Simulate the kernel: an md device node, its /dev/md/NAME
				// link and a sysfs array_state.
				md := fmt.Sprintf("md%d", 127-len(created))
				created = append(created, md)
				require.NoError(t, os.WriteFile(filepath.Join(root, "dev", md), make([]byte, 8192), 0o644))
				require.NoError(t, os.MkdirAll(filepath.Join(root, "dev", "md"), 0o755))
				require.NoError(t, os.Symlink("../"+md, filepath.Join(root, args[1])))
				state := filepath.Join(root, "sys", "block", md, "md")
				require.NoError(t, os.MkdirAll(state, 0o755))
				return os.WriteFile(filepath.Join(state, "array_state"), []byte("clean\n"), 0o644)
			}}
			cfg, err := ParseTargetConfig(tt.cfg)
			require.NoError(t, err)
			m := &Manager{Root: root, Opener: op, Runner: runner, NamePrefix: "t"}
			var last hardware.Progress
			res, err := m.CreateConfiguration(context.Background(), cfg, func(p hardware.Progress) { last = p })
			if tt.wantErr != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tt.wantErr)
				assert.Empty(t, created, "no array created on error")
				return
			}
			require.NoError(t, err)
			var mdadm []string
			for _, e := range ev.log {
				if strings.HasPrefix(e, "mdadm") {
					mdadm = append(mdadm, e)
				}
			}
			assert.Equal(t, tt.wantArgs, mdadm)
			require.Len(t, res.Arrays, len(tt.wantArgs))
			for i, a := range res.Arrays {
				assert.Equal(t, "/dev/"+created[i], a.Device)
				assert.Equal(t, "clean", a.ArrayState)
			}
			assert.Equal(t, 100.0, last.Percent)
			for name, sizes := range tt.wantParts {
				got := gptPartitionSizes(t, op.file("/dev/"+name))
				require.Len(t, got, len(sizes), name)
				for i, s := range sizes {
					assert.Equal(t, s, got[i], "%s partition %d", name, i+1)
				}
			}
		})
	}
}

// gptPartitionSizes reads the primary GPT's entries from a disk image.
func gptPartitionSizes(t *testing.T, path string) []uint64 {
	t.Helper()
	b := make([]byte, 1024+128*128)
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	_, err = f.ReadAt(b, 0)
	require.NoError(t, err)
	require.Equal(t, "EFI PART", string(b[512:520]))
	st, err := f.Stat()
	require.NoError(t, err)
	backup := make([]byte, 8)
	_, err = f.ReadAt(backup, st.Size()-512)
	require.NoError(t, err)
	require.Equal(t, "EFI PART", string(backup), "backup GPT at the very end of the disk")
	var out []uint64
	for i := 0; i < 128; i++ {
		e := b[1024+i*128:]
		first, last := binary.LittleEndian.Uint64(e[32:]), binary.LittleEndian.Uint64(e[40:])
		if first == 0 {
			break
		}
		out = append(out, (last-first+1)*512)
	}
	return out
}

// TestRAID1OnLoopDevices creates and deletes a real RAID1 with mdadm on two
// loop devices. It needs the kernel's md driver.
func TestRAID1OnLoopDevices(t *testing.T) {
	testdev.Need(t, "mdadm")
	if !testdev.HasMD() {
		t.Skip("kernel has no md driver (/proc/mdstat missing): mdadm cannot assemble arrays here")
	}
	a := testdev.Loop(t, 64<<20, true)
	b := testdev.Loop(t, 64<<20, true)
	name := fmt.Sprintf("anvil%d-", os.Getpid())
	t.Cleanup(func() {
		// Always stop whatever we created, even if the test failed midway.
		_, _ = testdev.Output("mdadm", "--stop", "/dev/md/"+name+"0")
	})
	guard := hardware.NewGuard(hardware.Environment{}, []string{a, b, a + "p1", b + "p1"})
	m := &Manager{Root: "/", Opener: guard, NamePrefix: name}
	cfg, err := ParseTargetConfig(map[string]any{"logical_disks": []any{map[string]any{
		"size_gb": "MAX", "raid_level": "1", "controller": "software", "physical_disks": []any{a, b},
	}}})
	require.NoError(t, err)
	res, err := m.CreateConfiguration(context.Background(), cfg, nil)
	require.NoError(t, err)
	require.Len(t, res.Arrays, 1)
	detail := testdev.Run(t, "mdadm", "--detail", res.Arrays[0].Device)
	assert.Contains(t, detail, "raid1")

	// Delete needs the md device allowed too.
	m.Opener = hardware.NewGuard(hardware.Environment{}, []string{a, b, a + "p1", b + "p1", res.Arrays[0].Device})
	del, err := m.DeleteConfiguration(context.Background(), nil)
	require.NoError(t, err)
	require.NotEmpty(t, del.Arrays)
	for _, p := range []string{a, b} {
		out, _ := testdev.Output("mdadm", "--examine", p+"p1")
		assert.NotContains(t, out, "Magic")
	}
}

// TestDeleteConfigurationStaleSuperblocksOnLoop: md superblocks left on
// partitions without a running array (the crowbar-core#15 case) are found,
// zeroed with mdadm and our own wipe, and the partition table under them is
// wiped last. Runs on the host sysfs; only the test's loop device is allowed.
func TestDeleteConfigurationStaleSuperblocksOnLoop(t *testing.T) {
	testdev.Need(t, "mdadm", "blkid")
	dev := testdev.Loop(t, 64<<20, true)
	f, err := os.OpenFile(dev, os.O_RDWR, 0)
	require.NoError(t, err)
	layout, err := partition.WriteGPT(f, 64<<20, 512, []partition.Part{{Type: partition.TypeLinuxRAID, Size: 24 << 20}, {Type: partition.TypeLinuxRAID}})
	require.NoError(t, err)
	require.NoError(t, partition.Activate(f, layout))
	t.Cleanup(func() { partition.Forget(f, 2); f.Close() })
	p1, p2 := dev+"p1", dev+"p2"
	testdev.WaitFor(t, p1)
	testdev.WaitFor(t, p2)
	testdev.WriteMDSuperblock(t, p1, "1.2")
	testdev.WriteMDSuperblock(t, p2, "0.90")
	for _, p := range []string{p1, p2} {
		out, _ := testdev.Output("blkid", "-p", p)
		require.Contains(t, out, "linux_raid_member", p)
	}

	guard := hardware.NewGuard(hardware.Environment{}, []string{dev, p1, p2})
	m := &Manager{Root: "/", Opener: guard}
	res, err := m.DeleteConfiguration(context.Background(), nil)
	require.NoError(t, err)
	assert.ElementsMatch(t, []string{p1, p2}, res.StaleSuperblks)
	require.Len(t, res.DisksWiped, 1)
	assert.Equal(t, dev, res.DisksWiped[0].Device)
	assert.Contains(t, fmt.Sprint(res.DisksWiped[0].Found), "gpt")
	for _, p := range []string{p1, p2, dev} {
		if _, err := os.Stat(p); err != nil {
			continue // partitions dropped after the table was wiped
		}
		out, _ := testdev.Output("blkid", "-p", p)
		assert.NotContains(t, out, "linux_raid_member", p)
		assert.NotContains(t, out, "PTTYPE", p)
		exam, _ := testdev.Output("mdadm", "--examine", p)
		assert.NotContains(t, exam, "Magic", p)
	}
}

// TestRAIDErrorTypes: a guard refusal or an abort keeps its own error type
// through the RAID steps' messages, so the controller and operators can
// tell them from a RAID failure.
func TestRAIDErrorTypes(t *testing.T) {
	tests := []struct {
		err  error
		want string
	}{
		{errors.New("mdadm: device busy"), protocol.ErrTypeRAID},
		{fmt.Errorf("open: %w", &hardware.ProtectedError{Path: "/dev/sda", Reason: "not listed"}), protocol.ErrTypeProtectedDevice},
		{fmt.Errorf("wait: %w", context.Canceled), protocol.ErrTypeAborted},
	}
	for _, tt := range tests {
		var pe *protocol.Error
		require.ErrorAs(t, raidError("wipe member %s: %v", "/dev/sda2", tt.err), &pe)
		assert.Equal(t, tt.want, pe.Type, tt.err.Error())
		assert.Contains(t, pe.Message, tt.err.Error())
	}

}
