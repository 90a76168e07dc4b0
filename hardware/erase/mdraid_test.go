package erase

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/anvil-metal/anvil/hardware/disk"
	"github.com/anvil-metal/anvil/hardware/internal/testdev"
	"github.com/anvil-metal/anvil/protocol"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// mdSnapshot discovers a copy of the md-raid1 snapshot (md0, RAID1 over
// sda2 and sdb2; sda1 and sdb1 outside it) after edit changed it.
func mdSnapshot(t *testing.T, edit func(root string)) []disk.Disk {
	t.Helper()
	root := t.TempDir()
	testdev.Run(t, "cp", "-a", filepath.Join("..", "..", "testdata", "hardware", "md-raid1")+"/.", root)
	if edit != nil {
		edit(root)
	}
	l, err := disk.Discover(context.Background(), root)
	require.NoError(t, err)
	return l.Disks
}

func byDevice(plans []DevicePlan) map[string]DevicePlan {
	out := map[string]DevicePlan{}
	for _, p := range plans {
		out[p.Device] = p
	}
	return out
}

// TestPlanSoftwareRAID: an array is erased as one device and its members
// are not, as IPA does; the partitions of a member disk that are not
// members are erased on their own, so nothing of the disk is left
// unerased and the array stays usable.
func TestPlanSoftwareRAID(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name   string
		edit   func(root string)
		opener Opener
		want   map[string]Action
		reason map[string]string
	}{
		{
			name: "running array", opener: allowAll{},
			want: map[string]Action{"/dev/md0": ActionErase, "/dev/sda": ActionSkip, "/dev/sdb": ActionSkip, "/dev/sda1": ActionErase, "/dev/sdb1": ActionErase},
			reason: map[string]string{
				"/dev/sda": "/dev/sda2 hold(s) members of software RAID md0, erased through the array; /dev/sda1 erased as devices of their own",
				"/dev/md0": "overwrite",
			},
		},
		{
			name: "inactive array is refused", opener: allowAll{},
			edit: func(root string) {
				require.NoError(t, os.WriteFile(filepath.Join(root, "sys/devices/virtual/block/md0/md/array_state"), []byte("inactive\n"), 0o644))
			},
			want:   map[string]Action{"/dev/md0": ActionRefuse, "/dev/sda": ActionSkip, "/dev/sda1": ActionErase},
			reason: map[string]string{"/dev/md0": "software RAID /dev/md0 is inactive, so its members' data cannot be erased through it"},
		},
		{
			name: "array with a protected member is left alone", opener: allowAll{deny: map[string]bool{"/dev/sdb2": true}},
			want:   map[string]Action{"/dev/md0": ActionSkip, "/dev/sda1": ActionErase},
			reason: map[string]string{"/dev/md0": "protected by the device guard: member /dev/sdb2"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			plans := byDevice(Plan(ctx, mdSnapshot(t, tt.edit), DefaultPolicy(), nil, tt.opener))
			for dev, want := range tt.want {
				require.Contains(t, plans, dev)
				assert.Equal(t, want, plans[dev].Action, "%s: %s", dev, plans[dev].Reason)
			}
			for dev, want := range tt.reason {
				assert.Contains(t, plans[dev].Reason, want, dev)
			}
			for _, member := range []string{"/dev/sda2", "/dev/sdb2"} {
				assert.NotContains(t, plans, member, "members are erased through the array")
			}
			// what the controller certifies the member disks from
			assert.Equal(t, []string{"/dev/md0", "/dev/sda1"}, plans["/dev/sda"].ErasedThrough)
			assert.Equal(t, []string{"/dev/sda2"}, plans["/dev/sda"].MDMembers)
			assert.Equal(t, []string{"/dev/md0", "/dev/sdb1"}, plans["/dev/sdb"].ErasedThrough)
			assert.Empty(t, plans["/dev/md0"].ErasedThrough)
			if p := plans["/dev/sda1"]; p.Action == ActionErase {
				assert.Equal(t, uint64(1048576*512), p.Size, "the partition's size, not the disk's")
				assert.Equal(t, []Method{MethodOverwrite}, p.Methods)
			}
		})
	}
}

// recordingOpener opens /dev paths as files under dir and records which.
type recordingOpener struct {
	dir    string
	mu     *sync.Mutex
	opened *[]string
}

func (o recordingOpener) Allows(string) bool { return true }

func (o recordingOpener) OpenForWrite(p string, flag int) (*os.File, error) {
	o.mu.Lock()
	*o.opened = append(*o.opened, p)
	o.mu.Unlock()
	return os.OpenFile(filepath.Join(o.dir, strings.TrimPrefix(p, "/dev/")), os.O_RDWR|flag&^os.O_CREATE, 0)
}

var _ Opener = recordingOpener{}

// TestEraseMetadataSoftwareRAID wipes the array and the partitions outside
// it, and keeps the member disks' partition tables and the members'
// superblocks: the array must survive metadata cleaning (Metal3 builds it
// first).
func TestEraseMetadataSoftwareRAID(t *testing.T) {
	disks := mdSnapshot(t, nil)
	dir := t.TempDir()
	for _, d := range disks {
		for _, p := range append([]disk.Partition{{Path: d.Path, Size: d.Size}}, d.Partitions...) {
			f := filepath.Join(dir, strings.TrimPrefix(p.Path, "/dev/"))
			require.NoError(t, os.WriteFile(f, nil, 0o600))
			require.NoError(t, os.Truncate(f, int64(p.Size)))
			testdev.WriteMDSuperblock(t, f, "1.2") // something to find everywhere
		}
	}
	var opened []string
	o := recordingOpener{dir: dir, mu: &sync.Mutex{}, opened: &opened}
	res, err := EraseMetadata(context.Background(), disks, o, MetadataOptions{}, nil)
	require.NoError(t, err)

	slices.Sort(opened)
	assert.Equal(t, []string{"/dev/md0", "/dev/sda1", "/dev/sdb1"}, slices.Compact(opened), "nothing else written")
	got := map[string]MetadataDisk{}
	for _, d := range res.Devices {
		got[d.Device] = d
	}
	assert.Equal(t, StatusErased, got["/dev/md0"].Status)
	assert.Equal(t, StatusErased, got["/dev/sda"].Status)
	assert.Contains(t, got["/dev/sda"].Reason, "partition table kept: /dev/sda2 hold(s) members of software RAID md0")
	for _, p := range []string{"sda2", "sdb2"} {
		f, err := os.Open(filepath.Join(dir, p))
		require.NoError(t, err)
		assert.NotEmpty(t, DetectSignatures(f, 936650000*512), "%s keeps its superblock", p)
		f.Close()
	}
	for _, p := range []string{"md0", "sda1", "sdb1"} {
		f, err := os.Open(filepath.Join(dir, p))
		require.NoError(t, err)
		st, err := f.Stat()
		require.NoError(t, err)
		assert.Empty(t, DetectSignatures(f, st.Size()), "%s wiped", p)
		f.Close()
	}
}

// TestMemberDiskResultNamesWhatReachesIt: a member disk's entry in the
// erase result carries erased_through and md_members as the controller
// reads them (protocol.EraseResult), for its sanitization record.
func TestMemberDiskResultNamesWhatReachesIt(t *testing.T) {
	var skipped []DevicePlan
	for _, p := range Plan(context.Background(), mdSnapshot(t, nil), DefaultPolicy(), nil, allowAll{}) {
		if p.Action == ActionSkip {
			skipped = append(skipped, p) // erasing nothing: the snapshot's sizes are real disks'
		}
	}
	res, err := (&Eraser{Opener: allowAll{}}).Erase(context.Background(), skipped, DefaultPolicy(), nil)
	require.NoError(t, err)
	raw, err := json.Marshal(res)
	require.NoError(t, err)
	var wire protocol.EraseResult
	require.NoError(t, json.Unmarshal(raw, &wire))
	got := map[string]protocol.EraseDevicePlan{}
	for _, d := range wire.Devices {
		got[d.Plan.Device] = d.Plan
	}
	require.Contains(t, got, "/dev/sda")
	assert.Equal(t, []string{"/dev/md0", "/dev/sda1"}, got["/dev/sda"].ErasedThrough)
	assert.Equal(t, []string{"/dev/sda2"}, got["/dev/sda"].MDMembers)
}
