// Package raid creates and deletes Linux software RAID (md) arrays.
//
// It drives the mdadm binary rather than the md ioctls
// (SET_ARRAY_INFO/ADD_NEW_DISK/RUN_ARRAY) directly: mdadm owns the on-disk
// superblock formats (0.90/1.x, bitmaps, names, homehost) and the kernel
// interplay, and re-implementing that in Go would be a large, risky copy of
// a tool every distribution ships and that the test bed already runs in the
// ramdisk (testbed.md §4). Its path is configurable so the image can put it
// anywhere. Everything destructive is still checked against the guard
// first, and partition tables and superblock wipes are done in Go.
package raid

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/anvil-metal/anvil/hardware"
	"github.com/anvil-metal/anvil/hardware/disk"
	"github.com/anvil-metal/anvil/hardware/erase"
	"github.com/anvil-metal/anvil/protocol"
)

// Runner runs a command and returns its combined output; faked in tests.
type Runner interface {
	Run(ctx context.Context, name string, args ...string) ([]byte, error)
}

// ExecRunner runs real commands.
type ExecRunner struct{}

// Run implements Runner.
func (ExecRunner) Run(ctx context.Context, name string, args ...string) ([]byte, error) {
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return out, nil
}

// Manager performs software RAID operations on the disks under Root.
type Manager struct {
	Mdadm  string        // path to mdadm; "mdadm" is looked up in PATH
	Root   string        // sysfs/dev root, "/" on the node
	Opener erase.Opener  // the guard
	Runner Runner        // defaults to ExecRunner
	Wait   time.Duration // how long to wait for a new array to become usable (default 2 min)
	// NamePrefix is prepended to array names so tests can use unique ones.
	NamePrefix string
}

func (m *Manager) runner() Runner {
	if m.Runner == nil {
		return ExecRunner{}
	}
	return m.Runner
}

func (m *Manager) mdadm() string {
	if m.Mdadm == "" {
		return "mdadm"
	}
	return m.Mdadm
}

func (m *Manager) root() string {
	if m.Root == "" {
		return "/"
	}
	return m.Root
}

// raidError is a step error of the type its cause calls for: a guard
// refusal is a ProtectedDeviceError and an abort a CommandAborted, as
// operators and the controller tell those apart from a RAID failure.
func raidError(format string, args ...any) error {
	typ := protocol.ErrTypeRAID
	for _, a := range args {
		err, ok := a.(error)
		switch {
		case !ok:
		case errors.Is(err, hardware.ErrProtected):
			typ = protocol.ErrTypeProtectedDevice
		case errors.Is(err, context.Canceled):
			typ = protocol.ErrTypeAborted
		}
	}
	return &protocol.Error{Type: typ, Code: 500, Message: fmt.Sprintf(format, args...)}
}

// ArrayTeardown records what happened to one array.
type ArrayTeardown struct {
	Array   string   `json:"array"`
	Level   string   `json:"level,omitempty"`
	Members []string `json:"members"`
	Stopped bool     `json:"stopped"`
	Skipped string   `json:"skipped,omitempty"`
}

// DeleteResult is the result of delete_configuration.
type DeleteResult struct {
	Arrays         []ArrayTeardown      `json:"arrays"`
	MembersWiped   []erase.MetadataWipe `json:"members_wiped"`
	DisksWiped     []erase.MetadataWipe `json:"disks_wiped"`
	StaleSuperblks []string             `json:"stale_superblocks,omitempty"`
	DisksKept      []KeptDisk           `json:"disks_kept,omitempty"`
}

// KeptDisk is a disk whose partition table delete_configuration left,
// and why.
type KeptDisk struct {
	Disk   string `json:"disk"`
	Reason string `json:"reason"`
}

// keepPartitionTable says why d's partition table must stay although one
// of its partitions was a torn-down member: another partition still
// belongs to an array left running. "" when it may go.
func keepPartitionTable(d disk.Disk, kept map[string]string) string {
	for _, p := range d.Partitions {
		if a := kept[p.Path]; a != "" {
			return fmt.Sprintf("partition %s belongs to %s, which was left running", p.Path, a)
		}
	}
	return ""
}

// DeleteConfiguration tears down every software RAID array in the order
// that avoids the bugs IPA hit (StoryBoard 2008199): stop all arrays first,
// then zero the superblocks on every member (and any stale md superblock on
// a partition no running array uses), and only then wipe the partition
// tables of the disks the members live on. Arrays with a member the guard
// protects are left alone, recorded as skipped.
func (m *Manager) DeleteConfiguration(ctx context.Context, progress hardware.ProgressFunc) (DeleteResult, error) {
	var res DeleteResult
	layout, err := disk.Discover(ctx, m.root())
	if err != nil {
		return res, raidError("discover devices: %v", err)
	}
	members := map[string]bool{} // device paths whose superblocks go
	holders := map[string]bool{} // disks whose partition tables go
	// Members of arrays left running: neither their superblocks nor the
	// partition tables of their disks may be touched, whatever the guard
	// allows for them one by one.
	kept := map[string]string{} // member path -> its array
	for _, a := range layout.Arrays() {
		t := ArrayTeardown{Array: a.Path, Level: a.MD.Level}
		var paths []string
		for _, mem := range a.MD.Members {
			paths = append(paths, "/dev/"+mem)
		}
		t.Members = paths
		if blocked := m.protected(append([]string{a.Path}, paths...)); blocked != "" {
			t.Skipped = "protected by the device guard: " + blocked
			res.Arrays = append(res.Arrays, t)
			for _, p := range paths {
				kept[p] = a.Path
			}
			continue
		}
		if _, err := m.runner().Run(ctx, m.mdadm(), "--stop", a.Path); err != nil {
			return res, raidError("stop %s: %v", a.Path, err)
		}
		t.Stopped = true
		res.Arrays = append(res.Arrays, t)
		for _, p := range paths {
			members[p] = true
		}
		progress.Report(hardware.Progress{Percent: 30, Message: "stopped " + a.Path, Device: a.Path})
	}
	// Stale superblocks: partitions or disks carrying md metadata without a
	// running array (an array stopped earlier, or assembled from a
	// different set). Detected read-only with our own signature reader.
	for _, d := range layout.Physical() {
		cands := []string{d.Path}
		for _, p := range d.Partitions {
			cands = append(cands, p.Path)
		}
		for _, c := range cands {
			if members[c] || kept[c] != "" || !m.Opener.Allows(c) || d.ReadOnly || d.VirtualMedia {
				continue
			}
			if hasMDSignature(m.root(), c) {
				members[c] = true
				res.StaleSuperblks = append(res.StaleSuperblks, c)
			}
		}
	}
	memberList := slices.Sorted(func(yield func(string) bool) {
		for p := range members {
			if !yield(p) {
				return
			}
		}
	})
	for _, p := range memberList {
		if _, err := m.runner().Run(ctx, m.mdadm(), "--zero-superblock", p); err != nil {
			// mdadm refuses when it finds no superblock; our own wipe below
			// still runs and verifies.
			_ = err
		}
		w, err := erase.WipeMetadata(ctx, m.Opener, p, 512)
		res.MembersWiped = append(res.MembersWiped, w)
		if err != nil {
			return res, raidError("wipe member %s: %v", p, err)
		}
		if parent, ok := parentDisk(layout, p); ok && parent != p {
			holders[parent] = true
		}
	}
	progress.Report(hardware.Progress{Percent: 70, Message: fmt.Sprintf("wiped %d member superblocks", len(memberList))})
	for _, d := range slices.Sorted(func(yield func(string) bool) {
		for p := range holders {
			if !yield(p) {
				return
			}
		}
	}) {
		dd, _ := layout.Find(d)
		if why := keepPartitionTable(dd, kept); why != "" {
			res.DisksKept = append(res.DisksKept, KeptDisk{Disk: d, Reason: why})
			continue
		}
		w, err := erase.WipeMetadata(ctx, m.Opener, d, dd.LogicalBlockSize)
		res.DisksWiped = append(res.DisksWiped, w)
		if err != nil {
			return res, raidError("wipe partition table of %s: %v", d, err)
		}
		forgetPartitions(m.Opener, d, len(dd.Partitions))
	}
	progress.Report(hardware.Progress{Percent: 100, Message: "software RAID configuration deleted"})
	return res, nil
}

// protected returns the first path the guard refuses, or "".
func (m *Manager) protected(paths []string) string {
	for _, p := range paths {
		if m.Opener == nil || !m.Opener.Allows(p) {
			return p
		}
	}
	return ""
}

func parentDisk(l *disk.Layout, path string) (string, bool) {
	for _, d := range l.Disks {
		if d.Path == path {
			return d.Path, true
		}
		for _, p := range d.Partitions {
			if p.Path == path {
				return d.Path, true
			}
		}
	}
	return "", false
}

// hasMDSignature probes a device read-only for an md superblock.
func hasMDSignature(root, path string) bool {
	f, err := os.Open(filepath.Join(root, path))
	if err != nil {
		return false
	}
	defer f.Close()
	size, err := f.Seek(0, 2)
	if err != nil || size == 0 {
		return false
	}
	for _, s := range erase.DetectSignatures(f, size) {
		if s.Type == "linux_raid_member" {
			return true
		}
	}
	return false
}

var errNotSoftware = errors.New("only software RAID is supported by this manager")
