package erase

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// SharedFilesystem is a shared-storage filesystem (or a partition typed for
// one) found on a device. On a SAN LUN such a filesystem is usually mounted
// by other hosts at the same time, so erasing "our" disk would destroy their
// data: IPA refuses these devices with ProtectedDeviceError, and so do we
// unless the step's arguments say erase_shared_filesystems=true.
type SharedFilesystem struct {
	Name  string `json:"name"`  // e.g. "IBM GPFS", "VMware VMFS"
	Where string `json:"where"` // what was found where, for the operator
}

// Shared-storage partition type GUIDs (GPT) and MBR partition types. IPA
// guards the same set: GPFS and VMFS partitions; plus GFS2 by filesystem.
var sharedPartitionGUIDs = map[string]string{
	"37AFFC90-EF7D-4E96-91C3-2D7AE055B174": "IBM GPFS",
	"AA31E02A-400F-11DB-9590-000C2911D1B8": "VMware VMFS",
}

var sharedMBRTypes = map[byte]string{
	0xfb: "VMware VMFS",
}

// Superblock magics (the offsets libblkid probes), relative to the start
// of the device or of a partition.
const (
	vmfsVolumeOffset = 1 << 20 // LVM-like volume header, magic 0xc001d00d (LE)
	vmfsVolumeMagic  = 0xc001d00d
	vmfsFSOffset     = 2 << 20 // filesystem descriptor, magic 0x2fabf15e (LE)
	vmfsFSMagic      = 0x2fabf15e
	gfsOffset        = 64 << 10 // GFS/GFS2 superblock, big-endian meta header
	gfsMagic         = 0x01161970
	gfsMetaTypeSB    = 1
)

// ocfs2Offsets are where OCFS2 puts its "OCFSV2" superblock signature (one
// per possible block size). OCFS2 is a shared-disk cluster filesystem like
// GFS2; IPA does not list it, we refuse it too for the same reason.
var ocfs2Offsets = []int64{1 << 10, 2 << 10, 4 << 10, 8 << 10}

// partitionStart is one partition table entry, for the superblock probes.
type partitionStart struct {
	label string
	off   int64
}

// DetectSharedFilesystems looks for shared-storage filesystems on a device
// of the given size: GPT partition type GUIDs (primary and backup table,
// 512-byte and 4 KiB sectors), MBR partition types, and the VMFS, GFS/GFS2
// and OCFS2 superblocks on the device itself and at the start of every
// partition the tables list. It only reads.
func DetectSharedFilesystems(r io.ReaderAt, size int64) []SharedFilesystem {
	read := func(off int64, n int) []byte {
		if off < 0 || n <= 0 || off+int64(n) > size {
			return nil
		}
		b := make([]byte, n)
		if _, err := r.ReadAt(b, off); err != nil && err != io.EOF {
			return nil
		}
		return b
	}
	var out []SharedFilesystem
	seen := map[string]bool{}
	add := func(name, where string) {
		if !seen[name+where] {
			seen[name+where] = true
			out = append(out, SharedFilesystem{Name: name, Where: where})
		}
	}
	starts := []partitionStart{{label: "the device", off: 0}}
	for _, p := range gptPartitions(read, size) {
		if name, ok := sharedPartitionGUIDs[p.typeGUID]; ok {
			add(name, fmt.Sprintf("GPT partition %d has type %s", p.index, p.typeGUID))
		}
		starts = append(starts, partitionStart{label: fmt.Sprintf("GPT partition %d", p.index), off: p.start})
	}
	if mbr := read(0, 512); mbr != nil && mbr[510] == 0x55 && mbr[511] == 0xAA {
		for i := 0; i < 4; i++ {
			e := mbr[446+16*i : 446+16*(i+1)]
			typ, lba := e[4], binary.LittleEndian.Uint32(e[8:])
			if typ == 0 || typ == 0xee { // empty, or GPT's protective entry
				continue
			}
			if name, ok := sharedMBRTypes[typ]; ok {
				add(name, fmt.Sprintf("MBR partition %d has type 0x%02x", i+1, typ))
			}
			starts = append(starts, partitionStart{label: fmt.Sprintf("MBR partition %d", i+1), off: int64(lba) * 512})
		}
	}
	for _, s := range starts {
		for _, sb := range sharedSuperblocks(read, s.off) {
			add(sb.name, sb.what+" on "+s.label)
		}
	}
	return out
}

// sharedSuperblock is a shared-storage filesystem superblock at off.
type sharedSuperblock struct {
	name, what, sigType string // sigType is blkid's TYPE
	off                 int64
}

// sharedSuperblocks probes the VMFS, GFS/GFS2 and OCFS2 superblocks of a
// device or partition starting at base.
func sharedSuperblocks(read func(int64, int) []byte, base int64) []sharedSuperblock {
	le, be := binary.LittleEndian, binary.BigEndian
	var out []sharedSuperblock
	if b := read(base+vmfsVolumeOffset, 4); b != nil && le.Uint32(b) == vmfsVolumeMagic {
		out = append(out, sharedSuperblock{"VMware VMFS", "VMFS volume header", "VMFS_volume_member", base + vmfsVolumeOffset})
	}
	if b := read(base+vmfsFSOffset, 4); b != nil && le.Uint32(b) == vmfsFSMagic {
		out = append(out, sharedSuperblock{"VMware VMFS", "VMFS filesystem descriptor", "VMFS", base + vmfsFSOffset})
	}
	if b := read(base+gfsOffset, 32); b != nil && be.Uint32(b) == gfsMagic && be.Uint32(b[4:]) == gfsMetaTypeSB {
		// sb_fs_format follows the 24-byte meta header.
		switch f := be.Uint32(b[24:]); {
		case f >= 1800 && f < 1900:
			out = append(out, sharedSuperblock{"Red Hat GFS2", fmt.Sprintf("GFS2 superblock (format %d)", f), "gfs2", base + gfsOffset})
		case f >= 1300 && f < 1400:
			out = append(out, sharedSuperblock{"Red Hat GFS", fmt.Sprintf("GFS superblock (format %d)", f), "gfs", base + gfsOffset})
		}
	}
	for _, o := range ocfs2Offsets {
		if b := read(base+o, 6); b != nil && string(b) == "OCFSV2" {
			out = append(out, sharedSuperblock{"Oracle OCFS2", "OCFS2 superblock", "ocfs2", base + o})
			break
		}
	}
	return out
}

type gptEntry struct {
	index    int
	typeGUID string
	start    int64
}

// gptPartitions reads the used entries of the first valid GPT it finds
// (primary then backup, 512-byte then 4 KiB sectors). Counts and sizes
// come from a possibly corrupt header, so they are bounded.
func gptPartitions(read func(int64, int) []byte, size int64) []gptEntry {
	for _, lbs := range []int64{512, 4096} {
		for _, hdrOff := range []int64{lbs, size - lbs} {
			h := read(hdrOff, 92)
			if h == nil || !bytes.Equal(h[:8], []byte("EFI PART")) {
				continue
			}
			le := binary.LittleEndian
			entriesLBA, n, esz := le.Uint64(h[72:]), le.Uint32(h[80:]), le.Uint32(h[84:])
			if n == 0 || n > 1024 || esz < 128 || esz > 4096 || entriesLBA > uint64(size/lbs) {
				continue
			}
			tbl := read(int64(entriesLBA)*lbs, int(n*esz))
			if tbl == nil {
				continue
			}
			var out []gptEntry
			for i := 0; i < int(n); i++ {
				e := tbl[i*int(esz):]
				if bytes.Equal(e[:16], make([]byte, 16)) {
					continue
				}
				first := le.Uint64(e[32:])
				out = append(out, gptEntry{index: i + 1, typeGUID: guidString(e[:16]), start: int64(min(first, uint64(size/lbs))) * lbs})
			}
			return out
		}
	}
	return nil
}

// guidString formats an on-disk (mixed-endian) GUID the way partition
// type GUIDs are written.
func guidString(b []byte) string {
	le := binary.LittleEndian
	return strings.ToUpper(fmt.Sprintf("%08x-%04x-%04x-%x-%x", le.Uint32(b[0:]), le.Uint16(b[4:]), le.Uint16(b[6:]), b[8:10], b[10:16]))
}

// SharedStorageError refuses a device that holds a shared-storage
// filesystem (IPA's ProtectedDeviceError).
type SharedStorageError struct {
	Device string
	Found  []SharedFilesystem
	Err    error // the device could not be read to check
}

func (e *SharedStorageError) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("refusing to erase %s: cannot read it to check for shared-storage filesystems (%v); "+
			"set erase_shared_filesystems=true in the step's arguments to erase it without the check", e.Device, e.Err)
	}
	var what []string
	for _, f := range e.Found {
		what = append(what, f.Name+" ("+f.Where+")")
	}
	return fmt.Sprintf("refusing to erase %s: it holds %s, a shared-storage filesystem other hosts may be using; "+
		"set erase_shared_filesystems=true in the step's arguments to erase it anyway", e.Device, strings.Join(what, ", "))
}

// probeShared opens path read-only and looks for shared filesystems.
func probeShared(path string) ([]SharedFilesystem, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	size, err := deviceSize(f)
	if err != nil {
		return nil, err
	}
	return DetectSharedFilesystems(f, int64(size)), nil
}

// SharedCheck says how devices holding shared-storage filesystems are
// treated by the erase steps.
type SharedCheck struct {
	Prober Prober // reads the devices; nil skips the check (planning tests only)
	Allow  bool   // erase_shared_filesystems: erase them anyway
}

// refusal checks a device before it is erased. It returns nil when erasing
// may go on: Allow is set, there is no prober, or nothing was found. A
// device that cannot be read is refused too: we cannot tell whether other
// hosts' data is on it.
func (c SharedCheck) refusal(path string) *SharedStorageError {
	if c.Allow || c.Prober == nil {
		return nil
	}
	found, err := c.Prober.SharedFilesystems(path)
	if err != nil {
		return &SharedStorageError{Device: path, Err: err}
	}
	if len(found) == 0 {
		return nil
	}
	return &SharedStorageError{Device: path, Found: found}
}
