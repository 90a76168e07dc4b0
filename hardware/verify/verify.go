// Package verify compares the machine the agent sees with what the
// controller expects of it: the node's properties, its last inspection and
// an optional operator-declared hardware profile. It is pure: the caller
// gathers both sides (the generic manager's deploy.verify_hardware step), so
// every rule is table-tested without a machine.
package verify

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/anvil-metal/anvil/protocol"
)

// Sources of an expectation, named in every difference so an operator
// knows which record to correct when the change is intended.
const (
	SourceProperties = "properties"
	SourceInspection = "inspection"
	SourceProfile    = "hardware_profile"
)

// Expected is what the controller believes the node has.
type Expected struct {
	CPUs     int    // properties.cpus; 0 = not set
	CPUArch  string // properties.cpu_arch
	MemoryMB uint64 // properties.memory_mb
	LocalGB  uint64 // properties.local_gb: the root disk's size in GiB, less one (as inspection sets it)
	// RootDeviceHints are properties.root_device; they must match a disk.
	RootDeviceHints map[string]any
	// Inspected is the node's last inspection inventory; nil when the
	// node was never inspected (then only properties and profile count).
	Inspected *protocol.Inventory
	Profile   *Profile
}

// Profile is the operator's declaration of a hardware model, shared by many
// nodes (properties.hardware_profile, or the step's hardware_profile
// argument from a deploy template or the CLI). Zero fields are not checked.
type Profile struct {
	CPUModel   string `json:"cpu_model,omitempty"`    // substring of the CPU model name, case-insensitive
	DIMMCount  int    `json:"dimm_count,omitempty"`   // populated DIMM slots (SMBIOS type 17)
	DIMMSizeMB uint64 `json:"dimm_size_mb,omitempty"` // size of every populated DIMM
	DiskCount  int    `json:"disk_count,omitempty"`   // physical disks (no md, loop, optical, virtual media, removable)
	// DiskModels each name one disk model (case-insensitive substring);
	// a model listed twice needs two disks.
	DiskModels []string `json:"disk_models,omitempty"`
	// NICModels each name one network PCI function as vendor:device
	// ("8086:1572"); listed twice, two functions.
	NICModels []string `json:"nic_models,omitempty"`
	// Exact makes improvements (more disks, memory, CPUs or devices than
	// expected) failures too: every node of the profile must be the same.
	Exact bool `json:"exact,omitempty"`
}

// Seen is what the agent found now.
type Seen struct {
	Inventory protocol.Inventory
	// RootDisk is the disk the root device hints select (or, without
	// hints, the largest disk, as inspection computes local_gb); nil when
	// none. RootError says why no disk matched the hints.
	RootDisk  *protocol.Disk
	RootError string
	// DIMMs from SMBIOS; nil when the firmware does not say (then DIMM
	// expectations are reported as unknown, not failed).
	DIMMs []DIMM
}

// DIMM is one populated memory module.
type DIMM struct {
	Locator string `json:"locator"`
	SizeMB  uint64 `json:"size_mb"`
}

// Difference is one way the machine is not what was expected.
type Difference struct {
	Kind     string `json:"kind"`             // cpus, cpu_arch, cpu_model, memory, dimm, local_gb, root_device, disk, nic, pci
	Device   string `json:"device,omitempty"` // disk serial, MAC, PCI address, DIMM locator
	Source   string `json:"source"`           // properties, inspection, hardware_profile
	Expected string `json:"expected"`
	Seen     string `json:"seen"`
	// Improvement marks a difference in the node's favour (a disk added,
	// more memory): reported, failed only under an exact profile.
	Improvement bool `json:"improvement,omitempty"`
	// Failure says whether this difference fails the step.
	Failure bool `json:"failure"`
}

// String is the line the step's error lists: "disk QM00002 (inspection):
// 10 GiB QEMU HARDDISK → missing".
func (d Difference) String() string {
	name := d.Kind
	if d.Device != "" {
		name += " " + d.Device
	}
	s := fmt.Sprintf("%s (%s): %s → %s", name, d.Source, d.Expected, d.Seen)
	if d.Improvement && !d.Failure {
		s += " (improvement, accepted)"
	}
	return s
}

// Result is the comparison's outcome.
type Result struct {
	Differences []Difference `json:"differences"`
	// Memory is how memory was compared, for the evidence.
	Memory *MemoryCheck `json:"memory,omitempty"`
}

// Failures are the differences that fail the step.
func (r Result) Failures() []Difference {
	var out []Difference
	for _, d := range r.Differences {
		if d.Failure {
			out = append(out, d)
		}
	}
	return out
}

// Compare lists every difference between exp and seen.
func Compare(exp Expected, seen Seen) Result {
	c := &comparison{exact: exp.Profile != nil && exp.Profile.Exact}
	inv := seen.Inventory
	if exp.CPUs > 0 {
		c.count("cpus", "", SourceProperties, exp.CPUs, inv.CPU.Count, "")
	}
	if exp.CPUArch != "" && !strings.EqualFold(exp.CPUArch, inv.CPU.Architecture) {
		c.add(Difference{Kind: "cpu_arch", Source: SourceProperties, Expected: exp.CPUArch, Seen: orNone(inv.CPU.Architecture)}, false)
	}
	var res Result
	if exp.MemoryMB > 0 {
		m := compareMemory(exp.MemoryMB, inv.Memory)
		res.Memory = &m
		if m.ShortMB > m.MarginMB {
			c.add(Difference{Kind: "memory", Source: SourceProperties, Expected: fmt.Sprintf("%d MiB", exp.MemoryMB),
				Seen: fmt.Sprintf("%d MiB %s (%d MiB short; %d MiB accepted)", m.SeenMB, m.Basis, m.ShortMB, m.MarginMB)}, false)
		} else if m.SeenMB > exp.MemoryMB+m.MarginMB {
			c.add(Difference{Kind: "memory", Source: SourceProperties, Expected: fmt.Sprintf("%d MiB", exp.MemoryMB),
				Seen: fmt.Sprintf("%d MiB %s", m.SeenMB, m.Basis)}, true)
		}
	}
	c.root(exp, seen)
	if exp.Inspected != nil {
		c.disks(exp.Inspected.Disks, inv.Disks)
		c.nics(exp.Inspected.Interfaces, inv.Interfaces)
		c.pci(exp.Inspected.PCI, inv.PCI)
	}
	if exp.Profile != nil {
		c.profile(*exp.Profile, seen)
	}
	res.Differences = c.diffs
	return res
}

type comparison struct {
	exact bool
	diffs []Difference
}

// add records a difference; an improvement fails only under an exact profile.
func (c *comparison) add(d Difference, improvement bool) {
	d.Improvement = improvement
	d.Failure = !improvement || c.exact
	c.diffs = append(c.diffs, d)
}

// count compares a number where more is an improvement.
func (c *comparison) count(kind, device, source string, want, got int, unit string) {
	if want == got {
		return
	}
	c.add(Difference{Kind: kind, Device: device, Source: source, Expected: strconv.Itoa(want) + unit, Seen: strconv.Itoa(got) + unit}, got > want)
}

func (c *comparison) root(exp Expected, seen Seen) {
	if len(exp.RootDeviceHints) > 0 && seen.RootDisk == nil {
		why := seen.RootError
		if why == "" {
			why = "no disk matches"
		}
		c.add(Difference{Kind: "root_device", Source: SourceProperties, Expected: fmt.Sprintf("a disk matching %v", exp.RootDeviceHints), Seen: why}, false)
		return
	}
	if exp.LocalGB == 0 {
		return
	}
	var got uint64
	if seen.RootDisk != nil && seen.RootDisk.Size>>30 > 0 {
		got = seen.RootDisk.Size>>30 - 1
	}
	if got == exp.LocalGB {
		return
	}
	desc := "no root disk"
	if seen.RootDisk != nil {
		desc = fmt.Sprintf("%d GiB (root disk %s)", got, diskName(*seen.RootDisk))
	}
	c.add(Difference{Kind: "local_gb", Source: SourceProperties, Expected: fmt.Sprintf("%d GiB", exp.LocalGB), Seen: desc}, got > exp.LocalGB)
}

// Physical reports whether a disk is one the comparison counts: md arrays,
// loop devices, optical drives, virtual media and removable media come and
// go without the server changing.
func Physical(d protocol.Disk) bool {
	return d.Controller != "md" && d.Controller != "loop" && !d.Optical && !d.VirtualMedia && !d.Removable
}

func physical(ds []protocol.Disk) []protocol.Disk {
	var out []protocol.Disk
	for _, d := range ds {
		if Physical(d) {
			out = append(out, d)
		}
	}
	return out
}

// diskName is the disk's identity in messages: its serial when it has
// one (names move between boots), else its device name.
func diskName(d protocol.Disk) string {
	if d.Serial != "" {
		return d.Serial
	}
	return d.Name
}

func describeDisk(d protocol.Disk) string {
	s := gib(d.Size)
	if d.Model != "" {
		s += " " + d.Model
	}
	return s + " at " + d.Name
}

func gib(b uint64) string {
	if b >= 1<<30 {
		return fmt.Sprintf("%.1f GiB", float64(b)/(1<<30))
	}
	return fmt.Sprintf("%d MiB", b>>20)
}

// disks matches inspected disks to present ones by serial, or by name and
// size for disks without a serial.
func (c *comparison) disks(want, have []protocol.Disk) {
	want, have = physical(want), physical(have)
	used := make([]bool, len(have))
	find := func(w protocol.Disk) int {
		for i, h := range have {
			if used[i] {
				continue
			}
			if w.Serial != "" && h.Serial == w.Serial {
				return i
			}
		}
		if w.Serial != "" {
			return -1
		}
		for i, h := range have {
			if !used[i] && h.Serial == "" && h.Name == w.Name && h.Size == w.Size {
				return i
			}
		}
		return -1
	}
	for _, w := range want {
		i := find(w)
		if i < 0 {
			c.add(Difference{Kind: "disk", Device: diskName(w), Source: SourceInspection, Expected: describeDisk(w), Seen: "missing"}, false)
			continue
		}
		used[i] = true
		if h := have[i]; h.Size != w.Size {
			c.add(Difference{Kind: "disk", Device: diskName(w), Source: SourceInspection, Expected: gib(w.Size), Seen: gib(h.Size)}, h.Size > w.Size)
		}
	}
	for i, h := range have {
		if !used[i] {
			c.add(Difference{Kind: "disk", Device: diskName(h), Source: SourceInspection, Expected: "absent", Seen: "added: " + describeDisk(h)}, true)
		}
	}
}

func (c *comparison) nics(want, have []protocol.NIC) {
	byMAC := map[string]protocol.NIC{}
	for _, h := range have {
		byMAC[strings.ToLower(h.MACAddress)] = h
	}
	seen := map[string]bool{}
	for _, w := range want {
		mac := strings.ToLower(w.MACAddress)
		seen[mac] = true
		h, ok := byMAC[mac]
		if !ok {
			c.add(Difference{Kind: "nic", Device: w.MACAddress, Source: SourceInspection, Expected: "present (" + w.Name + ")", Seen: "missing"}, false)
			continue
		}
		if w.SpeedMbps > 0 && h.SpeedMbps != w.SpeedMbps {
			got := "no link"
			if h.SpeedMbps > 0 {
				got = fmt.Sprintf("%d Mb/s", h.SpeedMbps)
			}
			c.add(Difference{Kind: "nic", Device: w.MACAddress, Source: SourceInspection, Expected: fmt.Sprintf("%d Mb/s link", w.SpeedMbps), Seen: got}, h.SpeedMbps > w.SpeedMbps)
		}
	}
	for _, h := range have {
		if mac := strings.ToLower(h.MACAddress); !seen[mac] {
			c.add(Difference{Kind: "nic", Device: h.MACAddress, Source: SourceInspection, Expected: "absent", Seen: "added (" + h.Name + ")"}, true)
		}
	}
}

// pci compares PCI functions by address and vendor:device: a card moved to
// another slot reads as one missing and one added.
func (c *comparison) pci(want, have []protocol.PCIDevice) {
	if want == nil {
		return // an agent that did not report PCI devices inspected this node
	}
	key := func(p protocol.PCIDevice) string { return p.Address + " " + p.VendorDevice() }
	present := map[string]bool{}
	for _, h := range have {
		present[key(h)] = true
	}
	expected := map[string]bool{}
	for _, w := range want {
		expected[key(w)] = true
		if !present[key(w)] {
			c.add(Difference{Kind: "pci", Device: w.Address, Source: SourceInspection, Expected: w.KindName() + " " + w.VendorDevice(), Seen: "missing"}, false)
		}
	}
	for _, h := range have {
		if !expected[key(h)] {
			c.add(Difference{Kind: "pci", Device: h.Address, Source: SourceInspection, Expected: "absent", Seen: "added: " + h.KindName() + " " + h.VendorDevice()}, true)
		}
	}
}

func (c *comparison) profile(p Profile, seen Seen) {
	inv := seen.Inventory
	if p.CPUModel != "" && !strings.Contains(strings.ToLower(inv.CPU.ModelName), strings.ToLower(p.CPUModel)) {
		c.add(Difference{Kind: "cpu_model", Source: SourceProfile, Expected: p.CPUModel, Seen: orNone(inv.CPU.ModelName)}, false)
	}
	if p.DIMMCount > 0 || p.DIMMSizeMB > 0 {
		c.dimms(p, seen.DIMMs)
	}
	disks := physical(inv.Disks)
	if p.DiskCount > 0 {
		c.count("disk_count", "", SourceProfile, p.DiskCount, len(disks), " disks")
	}
	models := make([]string, len(disks))
	for i, d := range disks {
		models[i] = d.Model
	}
	c.multiset("disk_model", SourceProfile, p.DiskModels, models, func(want, have string) bool {
		return strings.Contains(strings.ToLower(have), strings.ToLower(want))
	})
	var nics []string
	for _, d := range inv.PCI {
		if d.BaseClass() == protocol.PCIClassNetwork {
			nics = append(nics, d.VendorDevice())
		}
	}
	c.multiset("nic_model", SourceProfile, p.NICModels, nics, strings.EqualFold)
}

func (c *comparison) dimms(p Profile, dimms []DIMM) {
	if dimms == nil {
		c.add(Difference{Kind: "dimm", Source: SourceProfile, Expected: fmt.Sprintf("%d DIMMs of %d MiB", p.DIMMCount, p.DIMMSizeMB), Seen: "unknown: the firmware lists no memory devices (SMBIOS type 17)"}, false)
		return
	}
	if p.DIMMCount > 0 {
		c.count("dimm_count", "", SourceProfile, p.DIMMCount, len(dimms), " DIMMs")
	}
	if p.DIMMSizeMB > 0 {
		for _, d := range dimms {
			if d.SizeMB != p.DIMMSizeMB {
				c.add(Difference{Kind: "dimm", Device: d.Locator, Source: SourceProfile, Expected: fmt.Sprintf("%d MiB", p.DIMMSizeMB), Seen: fmt.Sprintf("%d MiB", d.SizeMB)}, d.SizeMB > p.DIMMSizeMB)
			}
		}
	}
}

// multiset checks that each wanted item is matched by a distinct present
// one; present items left over are improvements.
func (c *comparison) multiset(kind, source string, want, have []string, match func(want, have string) bool) {
	if len(want) == 0 {
		return
	}
	used := make([]bool, len(have))
	for _, w := range want {
		i := slices.IndexFunc(have, func(h string) bool { return match(w, h) })
		for i >= 0 && used[i] {
			j := slices.IndexFunc(have[i+1:], func(h string) bool { return match(w, h) })
			if j < 0 {
				i = -1
				break
			}
			i += 1 + j
		}
		if i < 0 {
			c.add(Difference{Kind: kind, Source: source, Expected: w, Seen: "missing (present: " + orNone(strings.Join(have, ", ")) + ")"}, false)
			continue
		}
		used[i] = true
	}
	for i, h := range have {
		if !used[i] {
			c.add(Difference{Kind: kind, Source: source, Expected: "not listed", Seen: "added: " + orNone(h)}, true)
		}
	}
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}
