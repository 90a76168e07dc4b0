package diskcheck

import (
	"fmt"
	"slices"
	"strings"

	"github.com/anvil-metal/anvil/protocol"
)

// SizeTolerance is how far (a fraction of the expected size) a seen disk's
// size may be from an expected disk's when neither has a serial or WWN to
// match by (virtio disks without a serial): firmware and HPA settings move
// a disk's reported size a little.
const SizeTolerance = 0.01

// Replacement is an expected disk whose slot (by-path) now holds another
// disk: the old one left the machine, so its data did too.
type Replacement struct {
	Was Disk `json:"was"`
	Now Disk `json:"now"`
}

// Result is the comparison of expected and seen, kept with the node so the
// API and the CLI can show it.
type Result struct {
	Expected []Disk `json:"expected"`
	Seen     []Disk `json:"seen"`
	// Missing expected disks fail the step.
	Missing []Disk `json:"missing,omitempty"`
	// Replaced and Added disks are reported, not failures.
	Replaced []Replacement `json:"replaced,omitempty"`
	Added    []Disk        `json:"added,omitempty"`
	// TooFew: fewer disks seen than properties.disk_count.
	TooFew int `json:"too_few,omitempty"`
	// NoDisks: the agent sees no disk at all.
	NoDisks bool `json:"no_disks,omitempty"`
	// DisklessAllowedBy names the flag that made no disks acceptable.
	DisklessAllowedBy string `json:"diskless_allowed_by,omitempty"`
	// WithoutDriver are storage controllers with no bound driver that no
	// flag acknowledges; Acknowledged those that one does.
	WithoutDriver []protocol.PCIDevice `json:"storage_without_driver,omitempty"`
	Acknowledged  []protocol.PCIDevice `json:"storage_without_driver_acknowledged,omitempty"`
	// PCIUnreported: the agent predates PCI reporting, so controllers
	// without a driver could not be checked.
	PCIUnreported bool `json:"pci_unreported,omitempty"`
}

// Compare matches what the agent sees against the expectation. Disks are
// matched by WWN, then serial; an expected disk with neither is matched by
// size (within SizeTolerance) and model. An unmatched expected disk whose
// by-path slot holds an unmatched seen disk was replaced; otherwise it is
// missing. Seen disks nobody expected were added.
func Compare(e Expectation, seen protocol.Inventory) Result {
	r := Result{Expected: e.Disks}
	for _, d := range seen.Disks {
		if Erasable(d) {
			r.Seen = append(r.Seen, FromProtocol(d))
		}
	}
	claimed := make([]bool, len(r.Seen))
	matched := make([]bool, len(e.Disks))
	passes := []func(exp, s Disk) bool{
		func(exp, s Disk) bool { return exp.WWN != "" && s.WWN != "" && norm(exp.WWN) == norm(s.WWN) },
		func(exp, s Disk) bool {
			return exp.Serial != "" && s.Serial != "" && norm(exp.Serial) == norm(s.Serial)
		},
		func(exp, s Disk) bool {
			return exp.WWN == "" && exp.Serial == "" && exp.Size > 0 && sizeClose(exp.Size, s.Size) &&
				(exp.Model == "" || s.Model == "" || strings.EqualFold(exp.Model, s.Model))
		},
	}
	for _, match := range passes {
		for i, exp := range e.Disks {
			if matched[i] {
				continue
			}
			for j, s := range r.Seen {
				if !claimed[j] && match(exp, s) {
					matched[i], claimed[j] = true, true
					break
				}
			}
		}
	}
	for i, exp := range e.Disks {
		if matched[i] {
			continue
		}
		j := slices.IndexFunc(r.Seen, func(s Disk) bool { return exp.ByPath != "" && s.ByPath == exp.ByPath })
		if j >= 0 && !claimed[j] {
			claimed[j] = true
			r.Replaced = append(r.Replaced, Replacement{Was: exp, Now: r.Seen[j]})
			continue
		}
		r.Missing = append(r.Missing, exp)
	}
	for j, s := range r.Seen {
		if !claimed[j] {
			r.Added = append(r.Added, s)
		}
	}
	if len(r.Seen) == 0 {
		r.NoDisks = true
		r.DisklessAllowedBy = e.Diskless
	}
	if e.MinCount > len(r.Seen) {
		r.TooFew = e.MinCount
	}
	if seen.PCI == nil {
		r.PCIUnreported = true
	}
	for _, d := range protocol.Unbound(seen.PCI, protocol.PCIClassStorage) {
		if acknowledged(e.Acknowledged, d) {
			r.Acknowledged = append(r.Acknowledged, d)
		} else {
			r.WithoutDriver = append(r.WithoutDriver, d)
		}
	}
	return r
}

func sizeClose(want, have uint64) bool {
	diff := float64(want) - float64(have)
	if diff < 0 {
		diff = -diff
	}
	return diff <= float64(want)*SizeTolerance
}

func acknowledged(acks []string, d protocol.PCIDevice) bool {
	addr := strings.ToLower(d.Address)
	return slices.ContainsFunc(acks, func(a string) bool {
		// "00:1f.2" and "0000:00:1f.2" name the same function
		return a == addr || "0000:"+a == addr || a == strings.ToLower(d.VendorDevice())
	})
}

// Failed reports whether the step must fail: an expected disk is missing,
// fewer disks than declared, no disks without the diskless flag, or a
// storage controller without a driver on a node not declared diskless.
func (r Result) Failed() bool {
	if len(r.Missing) > 0 || r.TooFew > 0 {
		return true
	}
	if r.NoDisks && r.DisklessAllowedBy == "" {
		return true
	}
	return len(r.WithoutDriver) > 0 && r.DisklessAllowedBy == ""
}

// Error says why the step fails, naming every missing disk by serial,
// model and size and every controller without a driver with the module it
// would need; "" when it does not fail.
func (r Result) Error() string { return r.ErrorFor("erased") }

// ErrorFor is Error for a guarded step that does what done names to the
// disks ("erased", or "written" for a burn-in), which it did to none.
func (r Result) ErrorFor(done string) string {
	if !r.Failed() {
		return ""
	}
	var parts []string
	if len(r.Missing) > 0 {
		names := make([]string, len(r.Missing))
		for i, d := range r.Missing {
			names[i] = d.Describe()
		}
		parts = append(parts, fmt.Sprintf("%d expected %s not found: %s", len(r.Missing), plural(len(r.Missing), "disk", "disks"), strings.Join(names, "; ")))
	}
	if r.NoDisks && r.DisklessAllowedBy == "" {
		parts = append(parts, fmt.Sprintf("no disks found (set properties.%s=true on a node that has none)", FlagDiskless))
	}
	if r.TooFew > 0 {
		parts = append(parts, fmt.Sprintf("properties.%s is %d but %d %s seen", FlagDiskCount, r.TooFew, len(r.Seen), plural(len(r.Seen), "disk is", "disks are")))
	}
	if len(r.WithoutDriver) > 0 {
		parts = append(parts, describeUnbound(r.WithoutDriver)+
			fmt.Sprintf(" (if it holds nothing to erase, list it in properties.%s)", FlagAcknowledged))
	}
	if len(r.Seen) > 0 && (len(r.Missing) > 0 || r.TooFew > 0) {
		parts = append(parts, "seen: "+describeAll(r.Seen))
	}
	return "disk check failed, nothing was " + done + ": " + strings.Join(parts, "; ")
}

// Summary says in one line what was expected and seen, for the history.
func (r Result) Summary() string {
	var b strings.Builder
	fmt.Fprintf(&b, "expected %d %s", len(r.Expected), plural(len(r.Expected), "disk", "disks"))
	if len(r.Expected) > 0 {
		b.WriteString(" (" + describeAll(r.Expected) + ")")
	}
	fmt.Fprintf(&b, ", seen %d", len(r.Seen))
	if len(r.Seen) > 0 {
		b.WriteString(" (" + describeAll(r.Seen) + ")")
	}
	if len(r.Missing) > 0 {
		b.WriteString("; missing: " + describeAll(r.Missing))
	}
	for _, rep := range r.Replaced {
		fmt.Fprintf(&b, "; replaced: %s by %s", rep.Was.Describe(), rep.Now.Describe())
	}
	if len(r.Added) > 0 && len(r.Expected) > 0 {
		b.WriteString("; added since: " + describeAll(r.Added))
	}
	if r.NoDisks && r.DisklessAllowedBy != "" {
		b.WriteString("; no disks present, allowed by " + r.DisklessAllowedBy)
	}
	if len(r.WithoutDriver) > 0 {
		b.WriteString("; " + describeUnbound(r.WithoutDriver))
	}
	if len(r.Acknowledged) > 0 {
		b.WriteString("; acknowledged: " + describeUnbound(r.Acknowledged))
	}
	if r.PCIUnreported {
		b.WriteString("; the agent does not report PCI devices (an older agent): storage controllers without a driver were not checked")
	}
	return b.String()
}

func describeAll(ds []Disk) string {
	out := make([]string, len(ds))
	for i, d := range ds {
		d.From = nil
		out[i] = d.Describe()
	}
	return strings.Join(out, ", ")
}

func describeUnbound(devs []protocol.PCIDevice) string {
	out := make([]string, len(devs))
	for i, d := range devs {
		switch {
		case len(d.Modules) > 0:
			out[i] = fmt.Sprintf("%s has no driver (the ramdisk's kernel has %s for it, which did not bind: failed to load or blacklisted)", d.Describe(), strings.Join(d.Modules, ", "))
		default:
			out[i] = fmt.Sprintf("%s has no driver (the ramdisk has no module for it)", d.Describe())
		}
	}
	return strings.Join(out, "; ")
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
