package raid

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/anvil-metal/anvil/hardware"
	"github.com/anvil-metal/anvil/hardware/disk"
	"github.com/anvil-metal/anvil/hardware/partition"
)

// LogicalDisk is one entry of Ironic's target_raid_config.logical_disks.
type LogicalDisk struct {
	SizeGB        any            `json:"size_gb"` // number or "MAX"
	RAIDLevel     string         `json:"raid_level"`
	Controller    string         `json:"controller,omitempty"`
	PhysicalDisks []any          `json:"physical_disks,omitempty"` // hint dicts or device names
	VolumeName    string         `json:"volume_name,omitempty"`
	IsRootVolume  *bool          `json:"is_root_volume,omitempty"`
	Extra         map[string]any `json:"-"`
}

// TargetConfig is Ironic's target_raid_config.
type TargetConfig struct {
	LogicalDisks []LogicalDisk `json:"logical_disks"`
}

// ParseTargetConfig accepts the step argument as decoded JSON (a map) or as
// a JSON string, and validates it for software RAID.
func ParseTargetConfig(v any) (TargetConfig, error) {
	var raw []byte
	switch t := v.(type) {
	case string:
		raw = []byte(t)
	default:
		b, err := json.Marshal(t)
		if err != nil {
			return TargetConfig{}, err
		}
		raw = b
	}
	var cfg TargetConfig
	if err := json.Unmarshal(raw, &cfg); err != nil {
		return cfg, fmt.Errorf("target_raid_config: %w", err)
	}
	if len(cfg.LogicalDisks) == 0 {
		return cfg, fmt.Errorf("target_raid_config: no logical_disks")
	}
	for i, ld := range cfg.LogicalDisks {
		if ld.Controller != "software" {
			return cfg, fmt.Errorf("logical disk %d: controller %q: %w", i, ld.Controller, errNotSoftware)
		}
		if _, err := mdLevel(ld.RAIDLevel); err != nil {
			return cfg, fmt.Errorf("logical disk %d: %w", i, err)
		}
		if _, _, err := sizeBytes(ld.SizeGB); err != nil {
			return cfg, fmt.Errorf("logical disk %d: %w", i, err)
		}
		if isMax(ld.SizeGB) && i != len(cfg.LogicalDisks)-1 {
			return cfg, fmt.Errorf("logical disk %d: size_gb MAX is only allowed on the last logical disk", i)
		}
	}
	return cfg, nil
}

func isMax(v any) bool { s, ok := v.(string); return ok && strings.EqualFold(s, "MAX") }

// maxSizeGB bounds size_gb (1 EiB): far beyond any disk, and small enough
// that byte arithmetic on it (RAID 10 doubles it) cannot overflow.
const maxSizeGB = 1 << 30

// sizeBytes returns the logical disk size in bytes, or max=true.
func sizeBytes(v any) (uint64, bool, error) {
	var gb float64
	switch t := v.(type) {
	case float64:
		gb = t
	case int:
		gb = float64(t)
	case string:
		if strings.EqualFold(t, "MAX") {
			return 0, true, nil
		}
		n, err := strconv.ParseFloat(t, 64)
		if err != nil {
			return 0, false, fmt.Errorf("size_gb %q is neither a positive number nor MAX", t)
		}
		gb = n
	default:
		return 0, false, fmt.Errorf("size_gb missing or of type %T", v)
	}
	switch {
	case gb != gb || gb <= 0: // NaN or not positive
		return 0, false, fmt.Errorf("size_gb must be positive, got %v", v)
	case gb > maxSizeGB:
		return 0, false, fmt.Errorf("size_gb %v is larger than any disk (at most %d)", v, maxSizeGB)
	}
	return uint64(gb * (1 << 30)), false, nil
}

// level is a RAID level as mdadm names it, with its minimum member count.
type level struct {
	name string
	min  int
}

// mdLevel maps Ironic's raid_level to mdadm's.
func mdLevel(l string) (level, error) {
	switch l {
	case "0":
		return level{"0", 2}, nil
	case "1":
		return level{"1", 2}, nil
	case "1+0", "10":
		return level{"10", 4}, nil
	}
	return level{}, fmt.Errorf("raid_level %q not supported for software RAID (0, 1, 1+0)", l)
}

// perMemberBytes is the partition size on each member for a logical disk of
// size bytes.
func perMemberBytes(level string, size uint64, n int) uint64 {
	switch level {
	case "0":
		return (size + uint64(n) - 1) / uint64(n)
	case "10":
		return (2*size + uint64(n) - 1) / uint64(n)
	}
	return size
}

// CreatedArray describes one array built.
type CreatedArray struct {
	Device     string   `json:"device"`
	Level      string   `json:"level"`
	Members    []string `json:"members"`
	Size       uint64   `json:"size_per_member"`
	ArrayState string   `json:"array_state"`
}

// CreateResult is the result of create_configuration.
type CreateResult struct {
	Disks  []string       `json:"physical_disks"`
	Arrays []CreatedArray `json:"arrays"`
}

// CreateConfiguration builds the software RAID arrays of cfg: one GPT on
// each physical disk with one partition per logical disk, then one md array
// per logical disk over the matching partitions, each waited for until the
// kernel reports it active and its first block can be read (so a following
// step does not hit an array still initialising, baremetal-operator#929).
func (m *Manager) CreateConfiguration(ctx context.Context, cfg TargetConfig, progress hardware.ProgressFunc) (CreateResult, error) {
	var res CreateResult
	layout, err := disk.Discover(ctx, m.root())
	if err != nil {
		return res, raidError("discover devices: %v", err)
	}
	if len(layout.Arrays()) > 0 {
		return res, raidError("software RAID arrays already exist (%s); run delete_configuration first", names(layout.Arrays()))
	}
	members, err := m.selectDisks(layout, cfg)
	if err != nil {
		return res, raidError("%v", err)
	}
	for _, d := range members {
		res.Disks = append(res.Disks, d.Path)
	}
	for i, ld := range cfg.LogicalDisks {
		lvl, _ := mdLevel(ld.RAIDLevel)
		if len(members) < lvl.min {
			return res, raidError("logical disk %d: RAID %s needs at least %d disks, have %d", i, ld.RAIDLevel, lvl.min, len(members))
		}
	}
	// Partition layout, identical on every member: sized by the smallest.
	smallest := members[0].Size
	for _, d := range members {
		smallest = min(smallest, d.Size)
	}
	var parts []partition.Part
	var used uint64 = 1 << 20
	for i, ld := range cfg.LogicalDisks {
		lvl, _ := mdLevel(ld.RAIDLevel)
		size, isMax, _ := sizeBytes(ld.SizeGB)
		p := partition.Part{Name: fmt.Sprintf("md-%d", i), Type: partition.TypeLinuxRAID}
		if !isMax {
			p.Size = (perMemberBytes(lvl.name, size, len(members)) + (1<<20 - 1)) &^ (1<<20 - 1)
			if used+p.Size+(2<<20) > smallest {
				return res, raidError("logical disk %d (%v GiB, RAID %s) does not fit on %d disks of %d bytes", i, ld.SizeGB, ld.RAIDLevel, len(members), smallest)
			}
			used += p.Size
		}
		parts = append(parts, p)
	}
	// A MAX logical disk takes what is left on the smallest member, with the
	// same size on every member (the backup GPT needs the last 1 MiB).
	for i := range parts {
		if parts[i].Size == 0 {
			if smallest < used+(4<<20) {
				return res, raidError("logical disk %d (MAX): no space left on the smallest member", i)
			}
			parts[i].Size = (smallest - used - (2 << 20)) &^ (1<<20 - 1)
		}
	}
	memberParts := make([][]string, len(cfg.LogicalDisks)) // per logical disk
	for _, d := range members {
		f, err := m.Opener.OpenForWrite(d.Path, 0)
		if err != nil {
			return res, raidError("open %s: %v", d.Path, err)
		}
		layoutOut, err := partition.WriteGPT(f, d.Size, max(d.LogicalBlockSize, 512), parts)
		if err == nil {
			err = f.Sync()
		}
		if err == nil {
			err = partition.Activate(f, layoutOut)
		}
		f.Close()
		if err != nil {
			return res, raidError("partition %s: %v", d.Path, err)
		}
		for i := range parts {
			memberParts[i] = append(memberParts[i], partitionPath(d.Path, i+1))
		}
	}
	progress.Report(hardware.Progress{Percent: 20, Message: fmt.Sprintf("partitioned %d disks", len(members))})
	for i, ld := range cfg.LogicalDisks {
		lvl, _ := mdLevel(ld.RAIDLevel)
		for _, p := range memberParts[i] {
			if err := waitForNode(ctx, filepath.Join(m.root(), p)); err != nil {
				return res, raidError("%v", err)
			}
		}
		if blocked := m.protected(memberParts[i]); blocked != "" {
			return res, raidError("logical disk %d: member %s: %v", i, blocked, &hardware.ProtectedError{Path: blocked, Reason: "not allowed by the device guard"})
		}
		name := ld.VolumeName
		if name == "" {
			name = fmt.Sprintf("%s%d", m.NamePrefix, i)
		}
		dev := "/dev/md/" + name
		args := []string{"--create", dev, "--run", "--metadata=1.2", "--level=" + lvl.name,
			"--raid-devices=" + strconv.Itoa(len(memberParts[i])), "--name=" + name}
		args = append(args, memberParts[i]...)
		if _, err := m.runner().Run(ctx, m.mdadm(), args...); err != nil {
			return res, raidError("create logical disk %d: %v", i, err)
		}
		state, mdPath, err := m.waitUsable(ctx, dev)
		if err != nil {
			return res, raidError("logical disk %d: %v", i, err)
		}
		res.Arrays = append(res.Arrays, CreatedArray{Device: mdPath, Level: "raid" + lvl.name, Members: memberParts[i], Size: parts[i].Size, ArrayState: state})
		progress.Report(hardware.Progress{Percent: 20 + 80*float64(i+1)/float64(len(cfg.LogicalDisks)), Message: "created " + mdPath, Device: mdPath})
	}
	return res, nil
}

// selectDisks returns the member disks: those named by physical_disks (all
// logical disks must then agree), else every eligible disk.
func (m *Manager) selectDisks(l *disk.Layout, cfg TargetConfig) ([]disk.Disk, error) {
	eligible := func(d disk.Disk) string {
		switch {
		case d.ReadOnly:
			return "read-only"
		case d.VirtualMedia:
			return "virtual media"
		case d.Removable:
			return "removable"
		case d.IsMDMember() || len(d.Holders) > 0:
			return "in use by " + strings.Join(d.Holders, ",")
		case m.Opener == nil || !m.Opener.Allows(d.Path):
			return "protected by the device guard"
		}
		return ""
	}
	var spec []any
	for i, ld := range cfg.LogicalDisks {
		if len(ld.PhysicalDisks) == 0 {
			continue
		}
		if spec != nil && fmt.Sprint(spec) != fmt.Sprint(ld.PhysicalDisks) {
			return nil, fmt.Errorf("logical disk %d: all logical disks must use the same physical_disks", i)
		}
		spec = ld.PhysicalDisks
	}
	var out []disk.Disk
	if spec == nil {
		for _, d := range l.Physical() {
			if eligible(d) == "" {
				out = append(out, d)
			}
		}
		return out, nil
	}
	for _, s := range spec {
		hints, ok := s.(map[string]any)
		if !ok {
			hints = map[string]any{"name": fmt.Sprint(s)}
		}
		var found *disk.Disk
		for _, d := range l.Physical() {
			match, err := disk.Matches(d, hints)
			if err != nil {
				return nil, err
			}
			if match && !containsDisk(out, d.Path) {
				found = &d
				break
			}
		}
		if found == nil {
			return nil, fmt.Errorf("no disk matches physical_disks entry %v", s)
		}
		if why := eligible(*found); why != "" {
			return nil, fmt.Errorf("%s cannot be a RAID member: %s", found.Path, why)
		}
		out = append(out, *found)
	}
	return out, nil
}

func containsDisk(ds []disk.Disk, p string) bool {
	for _, d := range ds {
		if d.Path == p {
			return true
		}
	}
	return false
}

func names(ds []disk.Disk) string {
	var s []string
	for _, d := range ds {
		s = append(s, d.Path)
	}
	return strings.Join(s, ", ")
}

// partitionPath names partition n of a disk the way the kernel does:
// a "p" separator when the disk name ends in a digit (nvme0n1p1, loop3p1).
func partitionPath(diskPath string, n int) string {
	if last := diskPath[len(diskPath)-1]; last >= '0' && last <= '9' {
		return fmt.Sprintf("%sp%d", diskPath, n)
	}
	return fmt.Sprintf("%s%d", diskPath, n)
}

func waitForNode(ctx context.Context, p string) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := os.Stat(p); err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("device node %s did not appear", p)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// waitUsable waits until the array's sysfs array_state says it is running
// and its first block can be read.
func (m *Manager) waitUsable(ctx context.Context, dev string) (string, string, error) {
	wait := m.Wait
	if wait == 0 {
		wait = 2 * time.Minute
	}
	deadline := time.Now().Add(wait)
	var last string
	for {
		mdPath, err := filepath.EvalSymlinks(filepath.Join(m.root(), dev))
		if err == nil {
			name := filepath.Base(mdPath)
			state := readTrim(filepath.Join(m.root(), "sys", "block", name, "md", "array_state"))
			last = state
			switch state {
			case "clean", "active", "active-idle", "write-pending":
				if f, err := os.Open(mdPath); err == nil {
					buf := make([]byte, 4096)
					_, rerr := f.ReadAt(buf, 0)
					f.Close()
					if rerr == nil {
						return state, "/dev/" + name, nil
					}
				}
			}
		}
		if time.Now().After(deadline) {
			return last, "", fmt.Errorf("%s not usable after %s (array_state %q)", dev, wait, last)
		}
		select {
		case <-ctx.Done():
			return last, "", ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func readTrim(p string) string {
	b, err := os.ReadFile(p)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// forgetPartitions drops the kernel's partitions of a disk whose table was
// wiped, for kernels that keep them after a failed re-read.
func forgetPartitions(o interface {
	OpenForWrite(string, int) (*os.File, error)
}, path string, n int) {
	f, err := o.OpenForWrite(path, 0)
	if err != nil {
		return
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.Mode()&os.ModeDevice != 0 {
		partition.Forget(f, n)
	}
}
