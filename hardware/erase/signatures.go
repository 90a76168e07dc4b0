package erase

import (
	"bytes"
	"encoding/binary"
	"io"
)

// Signature is one on-disk metadata structure found on a device.
type Signature struct {
	Type   string `json:"type"`   // gpt, gpt-backup, dos, ext, xfs, btrfs, vfat, LVM2_member, linux_raid_member, swap, VMFS, gfs2, ...
	Offset int64  `json:"offset"` // byte offset of the structure
	Detail string `json:"detail,omitempty"`
}

const mdMagic = 0xa92b4efc

// mdOffsets returns where md superblocks of each metadata version live on a
// device of the given size (from mdadm's super0.c / super1.c).
func mdOffsets(size int64) map[string]int64 {
	out := map[string]int64{"1.1": 0, "1.2": 4096}
	if size >= 128<<10 {
		out["0.90"] = (size &^ (64<<10 - 1)) - 64<<10
	}
	if size >= 12<<10 {
		sectors := size / 512
		out["1.0"] = ((sectors - 16) &^ 7) * 512
	}
	return out
}

// btrfsMirrors are the primary and mirror superblock offsets of btrfs.
var btrfsMirrors = []int64{64 << 10, 64 << 20, 256 << 30}

// DetectSignatures looks for the metadata erase_devices_metadata removes, at
// the same offsets blkid/wipefs probe. It is used before a wipe (to record
// what was there) and after it (to prove nothing is left).
func DetectSignatures(r io.ReaderAt, size int64) []Signature {
	var out []Signature
	read := func(off int64, n int) []byte {
		if off < 0 || off+int64(n) > size {
			return nil
		}
		b := make([]byte, n)
		if _, err := r.ReadAt(b, off); err != nil && err != io.EOF {
			return nil
		}
		return b
	}
	head := read(0, 8192)
	if head != nil {
		if head[510] == 0x55 && head[511] == 0xAA {
			out = append(out, Signature{Type: "dos", Offset: 510})
		}
		for _, lbs := range []int64{512, 4096} {
			if bytes.Equal(head[lbs:lbs+8], []byte("EFI PART")) {
				out = append(out, Signature{Type: "gpt", Offset: lbs})
			}
		}
		if bytes.Equal(head[0:4], []byte("XFSB")) {
			out = append(out, Signature{Type: "xfs", Offset: 0})
		}
		if bytes.HasPrefix(head[54:], []byte("FAT1")) || bytes.HasPrefix(head[82:], []byte("FAT32")) {
			out = append(out, Signature{Type: "vfat", Offset: 54})
		}
		if binary.LittleEndian.Uint16(head[1024+56:]) == 0xEF53 {
			out = append(out, Signature{Type: "ext", Offset: 1024 + 56})
		}
		for i := int64(0); i < 4; i++ {
			if bytes.Equal(head[i*512:i*512+8], []byte("LABELONE")) && bytes.Equal(head[i*512+24:i*512+32], []byte("LVM2 001")) {
				out = append(out, Signature{Type: "LVM2_member", Offset: i * 512})
			}
		}
		if bytes.Equal(head[4086:4096], []byte("SWAPSPACE2")) || bytes.Equal(head[4086:4096], []byte("SWAP-SPACE")) {
			out = append(out, Signature{Type: "swap", Offset: 4086})
		}
	}
	for _, lbs := range []int64{512, 4096} {
		if b := read(size-lbs, 8); b != nil && bytes.Equal(b, []byte("EFI PART")) {
			out = append(out, Signature{Type: "gpt-backup", Offset: size - lbs})
		}
	}
	for _, off := range btrfsMirrors {
		if b := read(off+64, 8); b != nil && bytes.Equal(b, []byte("_BHRfS_M")) {
			out = append(out, Signature{Type: "btrfs", Offset: off})
		}
	}
	for _, sb := range sharedSuperblocks(read, 0) {
		out = append(out, Signature{Type: sb.sigType, Offset: sb.off, Detail: sb.what})
	}
	for _, v := range []string{"0.90", "1.0", "1.1", "1.2"} {
		off := mdOffsets(size)[v]
		b := read(off, 8)
		if b == nil || binary.LittleEndian.Uint32(b[0:4]) != mdMagic {
			continue
		}
		major := binary.LittleEndian.Uint32(b[4:8])
		if (v == "0.90" && major == 0) || (v != "0.90" && major == 1) {
			out = append(out, Signature{Type: "linux_raid_member", Offset: off, Detail: "md metadata " + v})
		}
	}
	return out
}

// region is a byte range to zero.
type region struct{ off, n int64 }

// metadataRegions are the ranges erase_devices_metadata zeroes on one device
// of the given size: the first and last MiB (MBR, both GPT copies, the
// superblocks of ext*, xfs, vfat, swap, LVM, md 0.90/1.0/1.1/1.2) and the
// btrfs mirror superblocks. Regions are aligned to align (the logical block
// size, for O_DIRECT) and clipped to the device.
func metadataRegions(size, align int64) []region {
	const mib = 1 << 20
	if align <= 0 {
		align = 512
	}
	var out []region
	add := func(off, n int64) {
		off = off / align * align
		n = (n + align - 1) / align * align
		if off < 0 {
			n += off
			off = 0
		}
		if off >= size {
			return
		}
		if off+n > size {
			n = size - off
		}
		// merge with an overlapping region
		for i := range out {
			if off <= out[i].off+out[i].n && out[i].off <= off+n {
				end := max(out[i].off+out[i].n, off+n)
				out[i].off = min(out[i].off, off)
				out[i].n = end - out[i].off
				return
			}
		}
		out = append(out, region{off, n})
	}
	add(0, mib)
	add(size-mib, mib)
	// VMFS keeps its volume header and filesystem descriptor past the first
	// MiB (wipefs removes them; so do we, once the step is allowed to).
	add(vmfsVolumeOffset, 4096)
	add(vmfsFSOffset, 4096)
	for _, off := range btrfsMirrors[1:] {
		add(off, 4096)
	}
	return out
}
