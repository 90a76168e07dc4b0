package disk

import (
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"os"
	"strings"
	"time"
)

// fsLabel is a filesystem label read from a device, with where it was found
// ("FAT boot sector", "ISO9660 volume identifier", ...).
type fsLabel struct {
	Label  string
	Source string
}

// labelProbeTimeout bounds how long Discover waits for one device's label
// read: a failing or security-locked drive can keep a read in the kernel's
// error handling for minutes. The read is abandoned, not cancelled (block
// devices are not pollable); its goroutine ends when the kernel gives up.
const labelProbeTimeout = 5 * time.Second

// Offsets of what readLabels looks at. Together they are under 5 KiB per
// device: the first 4 KiB, one FAT root-directory sector and the first 72
// bytes of the ISO9660 primary volume descriptor.
const (
	headBytes      = 4096
	isoPVDOffset   = 16 * 2048 // system area is 16 sectors of 2048 bytes
	isoPVDBytes    = 72        // type, "CD001", version, system id, volume id
	extSuperOffset = 1024
	maxFATRootRead = 512
)

// readLabelsCtx runs readLabels on path, giving up after timeout or when
// ctx ends (no labels then).
func readLabelsCtx(ctx context.Context, path string, timeout time.Duration) []fsLabel {
	ch := make(chan []fsLabel, 1)
	go func() { ch <- readLabels(path) }()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case ls := <-ch:
		return ls
	case <-t.C:
	case <-ctx.Done():
	}
	return nil
}

// readLabels reads the filesystem labels a udev-less system cannot get from
// /dev/disk/by-label: FAT12/16/32 (boot sector and root-directory volume
// entry), ISO9660 (primary volume descriptor) and ext2/3/4 (superblock). The
// device is opened read-only and only a few KiB are read; any error means
// "no label".
func readLabels(path string) []fsLabel {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	head := make([]byte, headBytes)
	n, err := f.ReadAt(head, 0)
	if err != nil && err != io.EOF {
		return nil
	}
	head = head[:n]
	var out []fsLabel
	out = append(out, fatLabels(f, head)...)
	if l := extLabel(head); l != "" {
		out = append(out, fsLabel{l, "ext2/3/4 superblock"})
	}
	pvd := make([]byte, isoPVDBytes)
	if n, _ := f.ReadAt(pvd, isoPVDOffset); n == isoPVDBytes {
		if l := isoLabel(pvd); l != "" {
			out = append(out, fsLabel{l, "ISO9660 volume identifier"})
		}
	}
	return out
}

// extLabel returns the volume name of an ext2/3/4 superblock (magic 0xEF53
// at superblock+56, s_volume_name at superblock+120, 16 bytes).
func extLabel(head []byte) string {
	sb := extSuperOffset
	if len(head) < sb+136 || binary.LittleEndian.Uint16(head[sb+56:]) != 0xEF53 {
		return ""
	}
	return cString(head[sb+120 : sb+136])
}

// isoLabel returns the volume identifier of an ISO9660 primary volume
// descriptor (type 1, "CD001", version 1; identifier at 40, 32 bytes).
func isoLabel(pvd []byte) string {
	if len(pvd) < 72 || pvd[0] != 1 || string(pvd[1:6]) != "CD001" || pvd[6] != 1 {
		return ""
	}
	return strings.TrimRight(cString(pvd[40:72]), " ")
}

// fatLabels returns the volume labels of a FAT12/16/32 filesystem: the one in
// the extended boot record (0x2B, or 0x47 on FAT32) and the volume-label
// entry of the root directory's first sector, which is what blkid prefers
// (some tools update only one of the two).
func fatLabels(f io.ReaderAt, bs []byte) []fsLabel {
	if len(bs) < 512 || bs[510] != 0x55 || bs[511] != 0xAA {
		return nil
	}
	bps := uint64(binary.LittleEndian.Uint16(bs[0x0B:]))
	spc := uint64(bs[0x0D])
	reserved := uint64(binary.LittleEndian.Uint16(bs[0x0E:]))
	nfats := uint64(bs[0x10])
	rootEntries := uint64(binary.LittleEndian.Uint16(bs[0x11:]))
	fatSz := uint64(binary.LittleEndian.Uint16(bs[0x16:]))
	switch bps {
	case 512, 1024, 2048, 4096:
	default:
		return nil
	}
	if spc == 0 || spc&(spc-1) != 0 || reserved == 0 || nfats == 0 || nfats > 4 {
		return nil
	}
	fat32 := rootEntries == 0 && fatSz == 0
	var out []fsLabel
	ebr, kind := 0x26, "FAT"
	if fat32 {
		ebr, kind = 0x42, "FAT32"
		fatSz = uint64(binary.LittleEndian.Uint32(bs[0x24:]))
	}
	if fatSz == 0 {
		return nil
	}
	if bs[ebr] == 0x29 {
		if l := fatName(bs[ebr+5 : ebr+16]); l != "" {
			out = append(out, fsLabel{l, kind + " boot sector"})
		}
	}
	rootOff := (reserved + nfats*fatSz) * bps
	if fat32 {
		rootCluster := uint64(binary.LittleEndian.Uint32(bs[0x2C:]))
		if rootCluster < 2 {
			return out
		}
		rootOff += (rootCluster - 2) * spc * bps
	}
	sector := make([]byte, min(bps, maxFATRootRead))
	if n, _ := f.ReadAt(sector, int64(rootOff)); n != len(sector) {
		return out
	}
	for e := 0; e+32 <= len(sector); e += 32 {
		ent := sector[e : e+32]
		if ent[0] == 0x00 {
			break // end of directory
		}
		attr := ent[11]
		if ent[0] == 0xE5 || attr == 0x0F || attr&0x08 == 0 {
			continue // deleted, long-name part, or not a volume label
		}
		if l := fatName(ent[:11]); l != "" {
			out = append(out, fsLabel{l, kind + " root-directory volume label"})
		}
		break
	}
	return out
}

// fatName is an 11-byte space-padded FAT name; "NO NAME" means none.
func fatName(b []byte) string {
	s := strings.TrimRight(cString(b), " ")
	if s == "NO NAME" {
		return ""
	}
	return s
}

func cString(b []byte) string {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return string(b)
}
