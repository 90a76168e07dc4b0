// Package partition writes GUID partition tables in pure Go. The ramdisk
// has no sgdisk/parted, and software RAID creation needs a partition per
// member disk; tests use it too, to build layouts without host tools.
package partition

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"unicode/utf16"
)

// Well-known partition type GUIDs.
const (
	TypeLinuxFS   = "0FC63DAF-8483-4772-8E79-3D69D8477DE4"
	TypeLinuxRAID = "A19D880F-05FC-4D3B-A006-743F0F84911E"
	TypeEFISystem = "C12A7328-F81F-11D2-BA4B-00A0C93EC93B"
)

// Part is one partition to create. Size 0 means "to the end of the disk".
type Part struct {
	Name  string
	Type  string // type GUID, e.g. TypeLinuxRAID
	Start uint64 // bytes; 0 means right after the previous one (1 MiB aligned)
	Size  uint64 // bytes
}

// Layout is what WriteGPT produced, in bytes.
type Layout struct {
	Start, Size []uint64
}

const (
	entries   = 128
	entrySize = 128
	align     = 1 << 20
)

// ErrTooSmall is returned when the partitions do not fit.
var ErrTooSmall = errors.New("partitions do not fit on the device")

// WriteGPT writes a protective MBR and primary and backup GPTs describing
// parts onto w, a device of size bytes with logical block size lbs (512 or
// 4096). Partitions are aligned to 1 MiB.
func WriteGPT(w io.WriterAt, size, lbs uint64, parts []Part) (Layout, error) {
	if lbs != 512 && lbs != 4096 {
		return Layout{}, fmt.Errorf("unsupported logical block size %d", lbs)
	}
	totalLBA := size / lbs
	entryLBAs := uint64(entries*entrySize) / lbs
	firstUsable := 2 + entryLBAs
	lastLBA := totalLBA - 1
	lastUsable := lastLBA - entryLBAs - 1
	if totalLBA < 2*firstUsable+1 {
		return Layout{}, fmt.Errorf("%w: %d bytes", ErrTooSmall, size)
	}
	table := make([]byte, entries*entrySize)
	var out Layout
	next := uint64(align)
	for i, p := range parts {
		if i >= entries {
			return Layout{}, fmt.Errorf("too many partitions")
		}
		start := p.Start
		if start == 0 {
			start = next
		}
		start = (start + align - 1) / align * align
		end := (lastUsable + 1) * lbs // exclusive, bytes
		if p.Size != 0 {
			end = start + p.Size
		}
		if start < firstUsable*lbs || end > (lastUsable+1)*lbs || end <= start {
			return Layout{}, fmt.Errorf("%w: partition %d (%d+%d) on %d bytes", ErrTooSmall, i+1, start, end-start, size)
		}
		typ, err := parseGUID(p.Type)
		if err != nil {
			return Layout{}, fmt.Errorf("partition %d: %w", i+1, err)
		}
		e := table[i*entrySize : (i+1)*entrySize]
		copy(e[0:16], typ[:])
		if _, err := rand.Read(e[16:32]); err != nil {
			return Layout{}, err
		}
		binary.LittleEndian.PutUint64(e[32:40], start/lbs)
		binary.LittleEndian.PutUint64(e[40:48], end/lbs-1)
		name := utf16.Encode([]rune(p.Name))
		for j := 0; j < len(name) && j < 36; j++ {
			binary.LittleEndian.PutUint16(e[56+2*j:], name[j])
		}
		out.Start = append(out.Start, start)
		out.Size = append(out.Size, end-start)
		next = end
	}
	var diskGUID [16]byte
	if _, err := rand.Read(diskGUID[:]); err != nil {
		return Layout{}, err
	}
	tableCRC := crc32.ChecksumIEEE(table)
	header := func(cur, backup, entriesAt uint64) []byte {
		h := make([]byte, lbs)
		copy(h[0:8], "EFI PART")
		binary.LittleEndian.PutUint32(h[8:12], 0x00010000)
		binary.LittleEndian.PutUint32(h[12:16], 92)
		binary.LittleEndian.PutUint64(h[24:32], cur)
		binary.LittleEndian.PutUint64(h[32:40], backup)
		binary.LittleEndian.PutUint64(h[40:48], firstUsable)
		binary.LittleEndian.PutUint64(h[48:56], lastUsable)
		copy(h[56:72], diskGUID[:])
		binary.LittleEndian.PutUint64(h[72:80], entriesAt)
		binary.LittleEndian.PutUint32(h[80:84], entries)
		binary.LittleEndian.PutUint32(h[84:88], entrySize)
		binary.LittleEndian.PutUint32(h[88:92], tableCRC)
		binary.LittleEndian.PutUint32(h[16:20], crc32.ChecksumIEEE(h[:92]))
		return h
	}
	mbr := make([]byte, lbs)
	pe := mbr[446:462]
	pe[4] = 0xEE
	binary.LittleEndian.PutUint32(pe[8:12], 1)
	binary.LittleEndian.PutUint32(pe[12:16], uint32(min(totalLBA-1, 0xFFFFFFFF)))
	copy(pe[1:4], []byte{0x00, 0x02, 0x00})
	copy(pe[5:8], []byte{0xFF, 0xFF, 0xFF})
	mbr[510], mbr[511] = 0x55, 0xAA
	writes := []struct {
		off  uint64
		data []byte
	}{
		{0, mbr},
		{lbs, header(1, lastLBA, 2)},
		{2 * lbs, table},
		{(lastLBA - entryLBAs) * lbs, table},
		{lastLBA * lbs, header(lastLBA, 1, lastLBA-entryLBAs)},
	}
	for _, wr := range writes {
		if _, err := w.WriteAt(wr.data, int64(wr.off)); err != nil {
			return Layout{}, fmt.Errorf("write GPT at %d: %w", wr.off, err)
		}
	}
	return out, nil
}

// parseGUID encodes a textual GUID in the mixed-endian on-disk form.
func parseGUID(s string) ([16]byte, error) {
	var g [16]byte
	var hex []byte
	for i := 0; i < len(s); i++ {
		if s[i] != '-' {
			hex = append(hex, s[i])
		}
	}
	if len(hex) != 32 {
		return g, fmt.Errorf("bad GUID %q", s)
	}
	var raw [16]byte
	for i := 0; i < 16; i++ {
		var v byte
		for _, c := range hex[2*i : 2*i+2] {
			v <<= 4
			switch {
			case c >= '0' && c <= '9':
				v |= c - '0'
			case c >= 'a' && c <= 'f':
				v |= c - 'a' + 10
			case c >= 'A' && c <= 'F':
				v |= c - 'A' + 10
			default:
				return g, fmt.Errorf("bad GUID %q", s)
			}
		}
		raw[i] = v
	}
	g[0], g[1], g[2], g[3] = raw[3], raw[2], raw[1], raw[0]
	g[4], g[5] = raw[5], raw[4]
	g[6], g[7] = raw[7], raw[6]
	copy(g[8:], raw[8:])
	return g, nil
}
