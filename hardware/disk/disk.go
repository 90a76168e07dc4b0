// Package disk discovers block devices from a sysfs tree under a root
// directory ("/" on the node, a snapshot directory in tests). It reads sysfs
// directly rather than relying on ghw for disks because in the udev-less
// ramdisk ghw reports model, serial and WWN as "unknown", has no disk-level
// read-only flag, no holders/slaves and no md knowledge.
package disk

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/anvil-metal/anvil/protocol"
)

// VirtualMediaLabel is the filesystem label IPA gives its own virtual-media
// config drive; a disk carrying it is never erased or deployed onto.
const VirtualMediaLabel = "ir-vfd-dev"

// Disk is one whole block device with what erase, RAID and root-device
// selection need to know about it.
type Disk struct {
	Name               string      `json:"name"` // nvme0n1
	Path               string      `json:"path"` // /dev/nvme0n1 (as seen on the node)
	Major              int         `json:"major"`
	Minor              int         `json:"minor"`
	Size               uint64      `json:"size"` // bytes
	LogicalBlockSize   uint64      `json:"logical_block_size"`
	PhysicalBlockSize  uint64      `json:"physical_block_size"`
	Rotational         bool        `json:"rotational"`
	Removable          bool        `json:"removable"`
	ReadOnly           bool        `json:"read_only"`
	Optical            bool        `json:"optical,omitempty"` // CD/DVD/BD drive (see isOptical): not a disk to erase, deploy onto or RAID
	Vendor             string      `json:"vendor,omitempty"`
	Model              string      `json:"model,omitempty"`
	Serial             string      `json:"serial,omitempty"`
	WWN                string      `json:"wwn,omitempty"`
	Firmware           string      `json:"firmware,omitempty"`
	Controller         string      `json:"controller"` // nvme, sata, scsi, usb, virtio, mmc, loop, md, dm, xen
	Driver             string      `json:"driver,omitempty"`
	Holders            []string    `json:"holders,omitempty"` // e.g. md0 when a whole-disk RAID member
	Slaves             []string    `json:"slaves,omitempty"`  // members, for md/dm devices
	Partitions         []Partition `json:"partitions,omitempty"`
	ByPath             string      `json:"by_path,omitempty"`
	VirtualMedia       bool        `json:"virtual_media,omitempty"`
	VirtualMediaReason string      `json:"virtual_media_reason,omitempty"`
	DiscardMaxBytes    uint64      `json:"discard_max_bytes,omitempty"`
	WriteZeroesMax     uint64      `json:"write_zeroes_max_bytes,omitempty"`
	MD                 *MDInfo     `json:"md,omitempty"`
}

// Partition of a disk.
type Partition struct {
	Name   string `json:"name"` // nvme0n1p1
	Path   string `json:"path"` // /dev/nvme0n1p1
	Number int    `json:"number"`
	Start  uint64 `json:"start"` // bytes from the start of the disk
	Size   uint64 `json:"size"`
	// ReadOnly is the partition's own ro flag OR its disk's: some kernels
	// and drivers do not expose ro on partitions (IPA StoryBoard 2008696).
	ReadOnly bool     `json:"read_only"`
	Holders  []string `json:"holders,omitempty"`
}

// MDInfo is what sysfs says about a Linux software RAID array.
type MDInfo struct {
	Level      string   `json:"level"`       // raid1
	ArrayState string   `json:"array_state"` // clean, active, inactive, ...
	Metadata   string   `json:"metadata,omitempty"`
	Members    []string `json:"members"` // slave device names
	SyncAction string   `json:"sync_action,omitempty"`
	Degraded   bool     `json:"degraded,omitempty"`
}

// IsMDMember reports whether the disk or one of its partitions is held by an
// md array; such a disk must not be erased before the RAID is torn down.
func (d Disk) IsMDMember() bool {
	if d.IsWholeMDMember() {
		return true
	}
	for _, p := range d.Partitions {
		if p.IsMDMember() {
			return true
		}
	}
	return false
}

// IsWholeMDMember reports whether the disk itself, not a partition of it,
// is held by an md array.
func (d Disk) IsWholeMDMember() bool { return hasMD(d.Holders) }

// IsMDMember reports whether the partition is held by an md array.
func (p Partition) IsMDMember() bool { return hasMD(p.Holders) }

// MDHolders lists the md arrays using the disk or its partitions.
func (d Disk) MDHolders() []string {
	var out []string
	add := func(hs []string) {
		for _, h := range hs {
			if strings.HasPrefix(h, "md") && !slices.Contains(out, h) {
				out = append(out, h)
			}
		}
	}
	add(d.Holders)
	for _, p := range d.Partitions {
		add(p.Holders)
	}
	slices.Sort(out)
	return out
}

func hasMD(hs []string) bool {
	for _, h := range hs {
		if strings.HasPrefix(h, "md") {
			return true
		}
	}
	return false
}

// Layout is everything Discover found.
type Layout struct {
	Disks []Disk `json:"disks"` // whole disks including md arrays, by name
}

// Find returns the disk with the given name or /dev path.
func (l *Layout) Find(nameOrPath string) (Disk, bool) {
	n := strings.TrimPrefix(nameOrPath, "/dev/")
	for _, d := range l.Disks {
		if d.Name == n {
			return d, true
		}
	}
	return Disk{}, false
}

// Arrays returns the md arrays.
func (l *Layout) Arrays() []Disk {
	var out []Disk
	for _, d := range l.Disks {
		if d.MD != nil {
			out = append(out, d)
		}
	}
	return out
}

// Physical returns the disks that are not md/dm virtual devices.
func (l *Layout) Physical() []Disk {
	var out []Disk
	for _, d := range l.Disks {
		if d.Controller != "md" && d.Controller != "dm" {
			out = append(out, d)
		}
	}
	return out
}

// ignored are kernel devices that are never disks we manage.
func ignored(name string) bool {
	for _, p := range []string{"ram", "zram", "nbd", "fd"} {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// Discover enumerates block devices under root/sys/class/block. Zero-sized
// devices (unattached loop devices, empty card readers) are left out.
func Discover(ctx context.Context, root string) (*Layout, error) {
	classDir := filepath.Join(root, "sys", "class", "block")
	entries, err := os.ReadDir(classDir)
	if err != nil {
		return nil, fmt.Errorf("discover block devices: %w", err)
	}
	links := readDevLinks(root)
	disks := map[string]*Disk{}
	type part struct {
		parent string
		p      Partition
	}
	var parts []part
	for _, e := range entries {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		name := e.Name()
		if ignored(name) {
			continue
		}
		dir := filepath.Join(classDir, name)
		if exists(filepath.Join(dir, "partition")) {
			parent := parentOf(root, dir, name)
			p := Partition{
				Name:    name,
				Path:    "/dev/" + name,
				Number:  int(readUint(filepath.Join(dir, "partition"))),
				Start:   readUint(filepath.Join(dir, "start")) * 512,
				Size:    readUint(filepath.Join(dir, "size")) * 512,
				Holders: listDir(filepath.Join(dir, "holders")),
			}
			p.ReadOnly = readUint(filepath.Join(dir, "ro")) == 1
			parts = append(parts, part{parent: parent, p: p})
			continue
		}
		d, err := readDisk(ctx, root, dir, name, links)
		if err != nil {
			return nil, err
		}
		if d.Size == 0 {
			continue
		}
		disks[name] = d
	}
	for _, pt := range parts {
		d, ok := disks[pt.parent]
		if !ok {
			continue // partition of an ignored or empty device
		}
		pt.p.ReadOnly = pt.p.ReadOnly || d.ReadOnly
		d.Partitions = append(d.Partitions, pt.p)
	}
	l := &Layout{}
	for _, d := range disks {
		slices.SortFunc(d.Partitions, func(a, b Partition) int { return a.Number - b.Number })
		l.Disks = append(l.Disks, *d)
	}
	slices.SortFunc(l.Disks, func(a, b Disk) int { return strings.Compare(a.Name, b.Name) })
	return l, nil
}

// parentOf finds the disk a partition belongs to: in real sysfs the class
// link resolves to .../block/<disk>/<part>; failing that, strip the
// partition suffix from the name.
func parentOf(root, dir, name string) string {
	if r, err := filepath.EvalSymlinks(dir); err == nil && strings.HasPrefix(r, filepath.Clean(root)) {
		if p := filepath.Base(filepath.Dir(r)); p != "block" && p != "." {
			return p
		}
	}
	trimmed := strings.TrimRight(name, "0123456789")
	if strings.HasSuffix(trimmed, "p") && len(trimmed) > 1 && trimmed[len(trimmed)-2] >= '0' && trimmed[len(trimmed)-2] <= '9' {
		trimmed = trimmed[:len(trimmed)-1] // nvme0n1p1, mmcblk0p1, loop0p1
	}
	return trimmed
}

func readDisk(ctx context.Context, root, dir, name string, links devLinks) (*Disk, error) {
	d := &Disk{
		Name:              name,
		Path:              "/dev/" + name,
		Size:              readUint(filepath.Join(dir, "size")) * 512,
		LogicalBlockSize:  readUint(filepath.Join(dir, "queue", "logical_block_size")),
		PhysicalBlockSize: readUint(filepath.Join(dir, "queue", "physical_block_size")),
		Rotational:        readUint(filepath.Join(dir, "queue", "rotational")) == 1,
		Removable:         readUint(filepath.Join(dir, "removable")) == 1,
		ReadOnly:          readUint(filepath.Join(dir, "ro")) == 1,
		DiscardMaxBytes:   readUint(filepath.Join(dir, "queue", "discard_max_bytes")),
		WriteZeroesMax:    readUint(filepath.Join(dir, "queue", "write_zeroes_max_bytes")),
		Holders:           listDir(filepath.Join(dir, "holders")),
		Slaves:            listDir(filepath.Join(dir, "slaves")),
		ByPath:            links.byPath[name],
	}
	if d.LogicalBlockSize == 0 {
		d.LogicalBlockSize = 512
	}
	if d.PhysicalBlockSize == 0 {
		d.PhysicalBlockSize = d.LogicalBlockSize
	}
	if mm := readString(filepath.Join(dir, "dev")); mm != "" {
		if a, b, ok := strings.Cut(mm, ":"); ok {
			d.Major, _ = strconv.Atoi(a)
			d.Minor, _ = strconv.Atoi(b)
		}
	}
	resolved, _ := filepath.EvalSymlinks(dir)
	dev := filepath.Join(dir, "device")
	if drv, err := filepath.EvalSymlinks(filepath.Join(dev, "driver")); err == nil {
		d.Driver = filepath.Base(drv)
	}
	d.Controller = controllerOf(name, resolved, d.Driver)
	d.Optical = isOptical(name, d.Major, readString(filepath.Join(dev, "type")))

	switch {
	case strings.HasPrefix(name, "nvme"):
		// The namespace's "device" is the controller, which carries the
		// identity that udev would otherwise provide.
		d.Model = readString(filepath.Join(dev, "model"))
		d.Serial = readString(filepath.Join(dev, "serial"))
		d.Firmware = readString(filepath.Join(dev, "firmware_rev"))
		d.WWN = readString(filepath.Join(dir, "wwid"))
	case strings.HasPrefix(name, "md"):
		d.MD = readMD(dir, d.Slaves)
	default:
		d.Vendor = readString(filepath.Join(dev, "vendor"))
		d.Model = readString(filepath.Join(dev, "model"))
		d.Firmware = readString(filepath.Join(dev, "rev"))
		d.Serial = readString(filepath.Join(dir, "serial")) // virtio-blk, mmc
		if d.Serial == "" {
			d.Serial = vpdSerial(filepath.Join(dev, "vpd_pg80"))
		}
		if d.Serial == "" {
			d.Serial = readString(filepath.Join(dev, "serial"))
		}
		d.WWN = wwnFromWWID(readString(filepath.Join(dev, "wwid")))
	}
	if d.Serial == "" && links.serial[name] != "" {
		d.Serial = protocol.CleanString(links.serial[name]) // a link name may be any bytes
	}
	d.VirtualMedia, d.VirtualMediaReason = virtualMedia(d, links)
	if !d.VirtualMedia {
		// No udev (the ramdisk) means no by-label links: read the label
		// from the device. Done even when by-label exists, since a link
		// names only one of several devices carrying the same label.
		d.VirtualMedia, d.VirtualMediaReason = labelVirtualMedia(d.Path, readLabelsCtx(ctx, filepath.Join(root, "dev", name), labelProbeTimeout))
	}
	return d, nil
}

func readMD(dir string, slaves []string) *MDInfo {
	md := filepath.Join(dir, "md")
	info := &MDInfo{
		Level:      readString(filepath.Join(md, "level")),
		ArrayState: readString(filepath.Join(md, "array_state")),
		Metadata:   readString(filepath.Join(md, "metadata_version")),
		SyncAction: readString(filepath.Join(md, "sync_action")),
		Members:    slaves,
	}
	info.Degraded = readUint(filepath.Join(md, "degraded")) > 0
	return info
}

// controllerOf names the transport. The resolved sysfs path tells USB and
// ATA apart from other SCSI, which the name alone cannot.
func controllerOf(name, resolved, driver string) string {
	switch {
	case strings.HasPrefix(name, "nvme"):
		return "nvme"
	case strings.HasPrefix(name, "md"):
		return "md"
	case strings.HasPrefix(name, "dm-"):
		return "dm"
	case strings.HasPrefix(name, "loop"):
		return "loop"
	case strings.HasPrefix(name, "vd"):
		return "virtio"
	case strings.HasPrefix(name, "xvd"):
		return "xen"
	case strings.HasPrefix(name, "mmcblk"):
		return "mmc"
	case strings.HasPrefix(name, "sd"), strings.HasPrefix(name, "sr"):
		switch {
		case strings.Contains(resolved, "/usb"):
			return "usb"
		case strings.Contains(resolved, "/ata"):
			return "sata"
		case driver == "virtio_scsi" || strings.Contains(resolved, "/virtio"):
			return "virtio-scsi"
		}
		return "scsi"
	}
	return "unknown"
}

// scsiCDROMMajor is the block major of the sr driver (SCSI_CDROM_MAJOR).
const scsiCDROMMajor = 11

// isOptical tells CD/DVD/BD drives from disks: the SCSI peripheral device
// type in device/type (5 CD/DVD, 4 WORM; both bound by sr), the sr name or
// the sr major. Whatever its read-only flag says, such a drive is never
// erased, deployed onto or made a RAID member; IPA does not even list it
// (lsblk TYPE=rom). A BMC's virtual CD is optical and virtual media.
func isOptical(name string, major int, scsiType string) bool {
	return scsiType == "5" || scsiType == "4" || major == scsiCDROMMajor || strings.HasPrefix(name, "sr")
}

// labelVirtualMedia checks labels read from the device itself (path as the
// node sees it) for IPA's virtual-media label. FAT and ISO9660 tools may
// upper-case it, so the comparison ignores case.
func labelVirtualMedia(path string, labels []fsLabel) (bool, string) {
	for _, l := range labels {
		if strings.EqualFold(l.Label, VirtualMediaLabel) {
			return true, fmt.Sprintf("carries the virtual-media label %s (%s read from %s)", VirtualMediaLabel, l.Source, path)
		}
	}
	return false, ""
}

// virtualMedia decides whether a disk is a BMC's virtual CD/floppy/USB stick
// or IPA's own config drive, from by-label links and vendor/model strings
// (labelVirtualMedia covers labels read from the device). The removable bit
// alone is not evidence (USB disks have it too), so this wants a label or a
// BMC vendor/model string on a USB-attached or optical device.
func virtualMedia(d *Disk, links devLinks) (bool, string) {
	if links.byLabel[VirtualMediaLabel] == d.Name {
		return true, "carries the virtual-media label " + VirtualMediaLabel + " (/dev/disk/by-label)"
	}
	if d.Controller != "usb" && !d.Optical {
		return false, ""
	}
	// Whole words only: "ilo" must not match "Pilot", nor "ami" "Samsung".
	words := strings.FieldsFunc(strings.ToLower(d.Vendor+" "+d.Model), func(r rune) bool {
		return (r < 'a' || r > 'z') && (r < '0' || r > '9')
	})
	for _, w := range words {
		switch {
		case strings.HasPrefix(w, "virtual"), w == "idrac", w == "ami", w == "ilo", w == "cimc", w == "avocent", w == "aten":
			return true, fmt.Sprintf("BMC virtual media (vendor %q, model %q)", d.Vendor, d.Model)
		}
	}
	return false, ""
}

// wwnFromWWID turns a SCSI wwid ("naa.5000c500a1b2c3d4") into the 0x form
// Ironic's hints use; other designators are returned as they are.
func wwnFromWWID(w string) string {
	if rest, ok := strings.CutPrefix(w, "naa."); ok {
		return "0x" + strings.ToLower(rest)
	}
	return w
}

// vpdSerial decodes VPD page 0x80 (unit serial number): 4-byte header with
// the page length in bytes 2–3, then ASCII.
func vpdSerial(path string) string {
	b, err := os.ReadFile(path)
	if err != nil || len(b) < 4 || b[1] != 0x80 {
		return ""
	}
	n := int(binary.BigEndian.Uint16(b[2:4]))
	if 4+n > len(b) {
		n = len(b) - 4
	}
	return strings.TrimSpace(protocol.CleanString(string(b[4 : 4+n])))
}

// devLinks are the udev-style /dev/disk symlinks, when present (a ramdisk
// without udev has none; the code must not depend on them).
type devLinks struct {
	byPath  map[string]string // device name → by-path link name
	byLabel map[string]string // label → device name
	serial  map[string]string // device name → serial from by-id (last resort)
}

func readDevLinks(root string) devLinks {
	l := devLinks{byPath: map[string]string{}, byLabel: map[string]string{}, serial: map[string]string{}}
	walk := func(sub string, fn func(link, target string)) {
		dir := filepath.Join(root, "dev", "disk", sub)
		entries, err := os.ReadDir(dir)
		if err != nil {
			return
		}
		for _, e := range entries {
			t, err := os.Readlink(filepath.Join(dir, e.Name()))
			if err != nil {
				continue
			}
			fn(e.Name(), filepath.Base(t))
		}
	}
	walk("by-path", func(link, target string) {
		if cur, ok := l.byPath[target]; !ok || len(link) < len(cur) {
			l.byPath[target] = "/dev/disk/by-path/" + link
		}
	})
	walk("by-label", func(link, target string) { l.byLabel[unescapeUdev(link)] = target })
	return l
}

// unescapeUdev undoes udev's \x2f-style escaping in link names.
func unescapeUdev(s string) string {
	if !strings.Contains(s, `\x`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) && s[i+1] == 'x' {
			if v, err := strconv.ParseUint(s[i+2:i+4], 16, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// readString reads a sysfs attribute; a device's model or serial can hold
// NULs or bytes that are not UTF-8, which the controller refuses to store.
func readString(p string) string {
	b, err := os.ReadFile(p)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(protocol.CleanString(string(b)))
}

func readUint(p string) uint64 {
	v, err := strconv.ParseUint(readString(p), 10, 64)
	if err != nil {
		return 0
	}
	return v
}

func listDir(p string) []string {
	entries, err := os.ReadDir(p)
	if err != nil {
		return nil // absent holders/ or slaves/ simply means none
	}
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	return out
}
