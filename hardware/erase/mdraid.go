package erase

import (
	"fmt"
	"slices"
	"strings"

	"github.com/anvil-metal/anvil/hardware/disk"
)

// Software RAID is erased the way IPA does it: an array is one device,
// erased through the md driver, which reaches every member's data area
// whatever the RAID level; its members are not erased directly. That
// leaves the arrays themselves in place, which matters when they were just
// built for this node (Metal3 runs create_configuration before the
// automated cleaning that wipes metadata), and no data behind: a disk
// holding members on some partitions has its other partitions erased one
// by one, as the disk as a whole is not.

// mdUnwritable says why writes through array d would not reach its
// members, or "" when they do (and for anything that is not an array).
// Only arrays md reports as running are written: an inactive one has no
// data path, a read-only one refuses.
func mdUnwritable(d disk.Disk) string {
	if d.Controller != "md" {
		return ""
	}
	state := ""
	if d.MD != nil {
		state = d.MD.ArrayState
	}
	switch state {
	case "clean", "active", "active-idle", "write-pending", "read-auto":
		return ""
	case "":
		state = "of unknown state"
	}
	return fmt.Sprintf("software RAID %s is %s, so its members' data cannot be erased through it: run delete_configuration (or assemble the array) before erasing", d.Path, state)
}

// mdMemberReason is the skip reason of a disk that is, or has partitions
// that are, members of software RAID.
func mdMemberReason(d disk.Disk) string {
	arrays := strings.Join(d.MDHolders(), ", ")
	if d.IsWholeMDMember() {
		return fmt.Sprintf("member of software RAID %s, erased through the array", arrays)
	}
	var members, others []string
	for _, p := range d.Partitions {
		if p.IsMDMember() {
			members = append(members, p.Path)
		} else {
			others = append(others, p.Path)
		}
	}
	r := fmt.Sprintf("%s hold(s) members of software RAID %s, erased through the array", strings.Join(members, ", "), arrays)
	if len(others) > 0 {
		r += "; " + strings.Join(others, ", ") + " erased as devices of their own"
	}
	return r
}

// erasedThrough lists the devices whose erasure reaches member disk d (its
// arrays, then its other partitions) and which of d are members.
func erasedThrough(d disk.Disk) (through, members []string) {
	for _, a := range d.MDHolders() {
		through = append(through, "/dev/"+a)
	}
	if d.IsWholeMDMember() {
		return through, []string{d.Path}
	}
	for _, p := range d.Partitions {
		if p.IsMDMember() {
			members = append(members, p.Path)
		} else {
			through = append(through, p.Path)
		}
	}
	return through, members
}

// otherPartitions returns, for a disk some of whose partitions are array
// members (but not the disk itself), its remaining partitions as devices
// to erase on their own, carrying the disk's properties.
func otherPartitions(d disk.Disk) []disk.Disk {
	if !partialMDMember(d) {
		return nil
	}
	var out []disk.Disk
	for _, p := range d.Partitions {
		if p.IsMDMember() {
			continue
		}
		out = append(out, disk.Disk{
			Name: p.Name, Path: p.Path, Size: p.Size, Controller: "partition",
			LogicalBlockSize: d.LogicalBlockSize, PhysicalBlockSize: d.PhysicalBlockSize,
			Rotational: d.Rotational, Removable: d.Removable, ReadOnly: d.ReadOnly || p.ReadOnly,
			Holders: p.Holders, DiscardMaxBytes: d.DiscardMaxBytes,
		})
	}
	return out
}

// partialMDMember reports whether some of d's partitions, but not d
// itself, are array members.
func partialMDMember(d disk.Disk) bool { return d.IsMDMember() && !d.IsWholeMDMember() }

// withoutMDPartitions is d without its member partitions: the rest of a
// partial member disk, judged by the ordinary skip rules.
func withoutMDPartitions(d disk.Disk) disk.Disk {
	d.Partitions = slices.DeleteFunc(slices.Clone(d.Partitions), disk.Partition.IsMDMember)
	return d
}

// mdProtected says which member of array d the guard protects, "" when
// none: writes through the array land on its members, so each must be
// allowed, not just the array's own name.
func mdProtected(d disk.Disk, o Opener) string {
	if d.Controller != "md" || o == nil {
		return ""
	}
	for _, m := range d.Slaves {
		if !o.Allows("/dev/" + m) {
			return "protected by the device guard: member /dev/" + m
		}
	}
	return ""
}
