// Package diskcheck decides whether an erase step may run: it compares the
// disks a node is expected to have (its last inspection, the disks it had
// when deployed, the operator's properties) with what the agent sees at the
// start of the step, and the storage controllers the agent could not drive.
// Cleaning that cannot see a disk must fail, never report the node clean:
// a disk hidden by a missing driver keeps the previous tenant's data.
//
// The package is pure (no store, no clock): the conductor gathers the
// inputs and acts on the Result.
package diskcheck

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/anvil-metal/anvil/protocol"
)

// Node flags in properties (documented in docs/reference/agent-steps.md, "Cleaning fails closed").
const (
	// FlagDiskless allows a node without any disk (netboot compute): no
	// disk seen is then a success, and storage controllers without a
	// driver are reported but not a failure.
	FlagDiskless = "diskless"
	// FlagAcknowledged lists storage controllers the operator knows have
	// no driver in the ramdisk and hold nothing to erase, by PCI address
	// ("0000:00:1f.2") or vendor:device ("8086:2922"): a list of strings
	// or one comma-separated string.
	FlagAcknowledged = "storage_without_driver_ok"
	// FlagDiskCount declares how many disks the node has; fewer seen is a
	// failure.
	FlagDiskCount = "disk_count"
	// rootDevice is Ironic's root device hints; a serial or WWN hint names
	// a disk that must be there.
	rootDevice = "root_device"
)

// Where an expected disk came from.
const (
	FromInspection = "inspection"
	FromDeploy     = "deploy"
	FromRootHint   = "properties.root_device"
)

// Disk is a disk by the fields that identify it.
type Disk struct {
	Name   string `json:"name,omitempty"`
	Serial string `json:"serial,omitempty"`
	WWN    string `json:"wwn,omitempty"`
	Model  string `json:"model,omitempty"`
	Size   uint64 `json:"size,omitempty"`
	ByPath string `json:"by_path,omitempty"`
	// From lists where the disk was expected from (FromInspection, ...);
	// empty for a seen disk.
	From []string `json:"from,omitempty"`
}

// FromProtocol keeps a reported disk's identifying fields.
func FromProtocol(d protocol.Disk) Disk {
	return Disk{Name: d.Name, Serial: strings.TrimSpace(d.Serial), WWN: strings.TrimSpace(d.WWN),
		Model: strings.TrimSpace(d.Model), Size: d.Size, ByPath: d.ByPath}
}

// Describe names a disk for people: "serial QM00001 (QEMU HARDDISK,
// 64.0 MiB)".
func (d Disk) Describe() string {
	var id string
	switch {
	case d.Serial != "":
		id = "serial " + d.Serial
	case d.WWN != "":
		id = "WWN " + d.WWN
	case d.Name != "":
		id = d.Name
	default:
		id = "disk"
	}
	var attrs []string
	if d.Model != "" {
		attrs = append(attrs, d.Model)
	}
	if d.Size > 0 {
		attrs = append(attrs, FormatSize(d.Size))
	}
	if len(d.From) > 0 {
		attrs = append(attrs, "expected from "+strings.Join(d.From, ", "))
	}
	if len(attrs) == 0 {
		return id
	}
	return id + " (" + strings.Join(attrs, ", ") + ")"
}

// FormatSize prints bytes in binary units with one decimal.
func FormatSize(b uint64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB", "PiB"}
	v, i := float64(b), 0
	for v >= 1024 && i < len(units)-1 {
		v /= 1024
		i++
	}
	if i == 0 {
		return fmt.Sprintf("%d B", b)
	}
	return fmt.Sprintf("%.1f %s", v, units[i])
}

// Expectation is what the controller knows a node has.
type Expectation struct {
	Disks []Disk `json:"disks"`
	// MinCount is properties.disk_count (0: not declared).
	MinCount int `json:"min_count,omitempty"`
	// Diskless names the flag that allows no disks ("" when not set).
	Diskless string `json:"diskless,omitempty"`
	// Acknowledged storage controllers: PCI addresses or vendor:device.
	Acknowledged []string `json:"acknowledged,omitempty"`
}

// Expect gathers the expectation from the node's last inspection inventory
// (nil: never inspected), the disks it had when deployed and its
// properties. A property of the wrong type is an error: guessing would
// either block a good node or let a bad one through.
func Expect(inspected *protocol.Inventory, deployed []protocol.Disk, props map[string]any) (Expectation, error) {
	var e Expectation
	add := func(d Disk, from string) {
		for i := range e.Disks {
			if sameIdentity(e.Disks[i], d) {
				if !slices.Contains(e.Disks[i].From, from) {
					e.Disks[i].From = append(e.Disks[i].From, from)
				}
				fillBlanks(&e.Disks[i], d)
				return
			}
		}
		d.From = []string{from}
		e.Disks = append(e.Disks, d)
	}
	if inspected != nil {
		for _, d := range inspected.Disks {
			if Erasable(d) && !d.Removable {
				add(FromProtocol(d), FromInspection)
			}
		}
	}
	for _, d := range deployed {
		if Erasable(d) && !d.Removable {
			add(FromProtocol(d), FromDeploy)
		}
	}
	if hints, ok := props[rootDevice].(map[string]any); ok {
		for key, field := range map[string]func(*Disk, string){
			"serial": func(d *Disk, v string) { d.Serial = v },
			"wwn":    func(d *Disk, v string) { d.WWN = v },
		} {
			if v, ok := equalityHint(hints[key]); ok {
				var d Disk
				field(&d, v)
				add(d, FromRootHint)
			}
		}
	}
	var err error
	if e.MinCount, err = intProp(props, FlagDiskCount); err != nil {
		return e, err
	}
	diskless, err := boolProp(props, FlagDiskless)
	if err != nil {
		return e, err
	}
	if diskless {
		e.Diskless = "properties." + FlagDiskless
	}
	if e.Acknowledged, err = listProp(props, FlagAcknowledged); err != nil {
		return e, err
	}
	return e, nil
}

// Erasable reports whether a reported disk is real storage that cleaning
// is responsible for: not virtual media, an optical drive, an empty device,
// or one the kernel makes up (ram, zram, md, dm, nbd). Attached loop
// devices count: an agent run outside the ramdisk with a device allow-list
// (tests, development) has loop devices for disks.
func Erasable(d protocol.Disk) bool {
	if d.VirtualMedia || d.Optical || d.Size == 0 {
		return false
	}
	switch d.Controller {
	case "md", "ram", "zram", "dm", "nbd":
		return false
	}
	name := strings.TrimPrefix(d.Name, "/dev/")
	for _, p := range []string{"ram", "zram", "md", "dm-", "nbd"} {
		if strings.HasPrefix(name, p) {
			return false
		}
	}
	return true
}

// equalityHint reads a root device hint that names one value ("X", "s== X",
// "== X"); operators that match several values name no particular disk.
func equalityHint(v any) (string, bool) {
	s, ok := v.(string)
	if !ok {
		return "", false
	}
	s = strings.TrimSpace(s)
	for _, op := range []string{"s==", "=="} {
		if rest, ok := strings.CutPrefix(s, op); ok {
			s = strings.TrimSpace(rest)
			break
		}
	}
	if s == "" || strings.HasPrefix(s, "<") || strings.HasPrefix(s, "s!=") || strings.HasPrefix(s, "!=") {
		return "", false
	}
	return s, true
}

func intProp(props map[string]any, key string) (int, error) {
	switch v := props[key].(type) {
	case nil:
		return 0, nil
	case float64:
		if v >= 0 && v == float64(int(v)) {
			return int(v), nil
		}
	case int:
		if v >= 0 {
			return v, nil
		}
	case string:
		if n, err := strconv.Atoi(strings.TrimSpace(v)); err == nil && n >= 0 {
			return n, nil
		}
	}
	return 0, fmt.Errorf("properties.%s must be a whole number of disks, got %v", key, props[key])
}

func boolProp(props map[string]any, key string) (bool, error) {
	switch v := props[key].(type) {
	case nil:
		return false, nil
	case bool:
		return v, nil
	case string:
		if b, err := strconv.ParseBool(strings.TrimSpace(v)); err == nil {
			return b, nil
		}
	}
	return false, fmt.Errorf("properties.%s must be true or false, got %v", key, props[key])
}

func listProp(props map[string]any, key string) ([]string, error) {
	var raw []string
	switch v := props[key].(type) {
	case nil:
		return nil, nil
	case string:
		raw = strings.Split(v, ",")
	case []any:
		for _, x := range v {
			s, ok := x.(string)
			if !ok {
				return nil, fmt.Errorf("properties.%s must list PCI addresses or vendor:device strings, got %v", key, x)
			}
			raw = append(raw, s)
		}
	default:
		return nil, fmt.Errorf("properties.%s must be a list or a comma-separated string, got %v", key, v)
	}
	var out []string
	for _, s := range raw {
		if s = strings.ToLower(strings.TrimSpace(s)); s != "" {
			out = append(out, s)
		}
	}
	return out, nil
}

func norm(s string) string {
	return strings.TrimPrefix(strings.ToLower(strings.TrimSpace(s)), "0x")
}

// sameIdentity: the same WWN, else the same serial. Disks without either
// have no identity to compare.
func sameIdentity(a, b Disk) bool {
	if a.WWN != "" && b.WWN != "" && norm(a.WWN) == norm(b.WWN) {
		return true
	}
	return a.Serial != "" && b.Serial != "" && norm(a.Serial) == norm(b.Serial)
}

func fillBlanks(dst *Disk, src Disk) {
	for _, f := range []struct {
		d *string
		s string
	}{{&dst.Name, src.Name}, {&dst.Serial, src.Serial}, {&dst.WWN, src.WWN}, {&dst.Model, src.Model}, {&dst.ByPath, src.ByPath}} {
		if *f.d == "" {
			*f.d = f.s
		}
	}
	if dst.Size == 0 {
		dst.Size = src.Size
	}
}
