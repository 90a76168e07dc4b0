package testdev

import (
	"crypto/rand"
	"encoding/binary"
	"os"
	"testing"
)

// WriteMDSuperblock writes a Linux md superblock of the given metadata
// version ("0.90", "1.0", "1.1", "1.2") for a one-of-two-member RAID1 onto
// dev, byte-compatible enough for blkid and mdadm --examine to recognise it
// (including the 1.x checksum blkid verifies). Tests use it instead of
// mdadm --create when the kernel has no md driver (mdadm cannot write a
// superblock without assembling the array).
func WriteMDSuperblock(t testing.TB, dev, version string) {
	t.Helper()
	f, err := os.OpenFile(dev, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, err := f.Seek(0, 2)
	if err != nil {
		t.Fatal(err)
	}
	size := st
	var off int64
	var sb []byte
	switch version {
	case "0.90":
		off = (size &^ (64<<10 - 1)) - 64<<10
		sb = make([]byte, 4096)
		le := binary.LittleEndian
		le.PutUint32(sb[0:], 0xa92b4efc)
		le.PutUint32(sb[4:], 0)  // major
		le.PutUint32(sb[8:], 90) // minor
		rand.Read(sb[20:24])
		le.PutUint32(sb[28:], 1)                // level
		le.PutUint32(sb[32:], uint32(off/1024)) // size in KiB
		le.PutUint32(sb[36:], 1)                // nr_disks
		le.PutUint32(sb[40:], 2)                // raid_disks
		rand.Read(sb[52:64])                    // uuid 1..3
		var sum uint32
		for i := 0; i < 4096; i += 4 {
			sum += le.Uint32(sb[i:])
		}
		le.PutUint32(sb[152:], sum) // sb_csum (word 38)
	case "1.0", "1.1", "1.2":
		switch version {
		case "1.0":
			off = ((size/512 - 16) &^ 7) * 512
		case "1.1":
			off = 0
		default:
			off = 4096
		}
		const maxDev = 2
		sb = make([]byte, 4096)
		le := binary.LittleEndian
		le.PutUint32(sb[0:], 0xa92b4efc)
		le.PutUint32(sb[4:], 1)
		rand.Read(sb[16:32])
		copy(sb[32:64], "anvil:test")
		le.PutUint32(sb[72:], 1) // level
		dataOffset := uint64(0)
		if version != "1.0" {
			dataOffset = 2048
		}
		dataSize := uint64(size/512) - dataOffset - 16
		le.PutUint64(sb[80:], dataSize) // size
		le.PutUint32(sb[92:], 2)        // raid_disks
		le.PutUint64(sb[128:], dataOffset)
		le.PutUint64(sb[136:], dataSize)
		le.PutUint64(sb[144:], uint64(off/512)) // super_offset
		rand.Read(sb[168:184])
		le.PutUint64(sb[200:], 1) // events
		le.PutUint64(sb[208:], ^uint64(0))
		le.PutUint32(sb[220:], maxDev)
		le.PutUint16(sb[256:], 0)      // this device is role 0
		le.PutUint16(sb[258:], 0xffff) // the other is missing
		var sum uint64
		n := 256 + 2*maxDev
		for i := 0; i+4 <= n; i += 4 {
			sum += uint64(le.Uint32(sb[i:]))
		}
		csum := uint32(sum&0xffffffff) + uint32(sum>>32)
		le.PutUint32(sb[216:], csum)
	default:
		t.Fatalf("unknown md metadata version %q", version)
	}
	if _, err := f.WriteAt(sb, off); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
}

// HasMD reports whether the running kernel has the md driver, which RAID
// tests need (mdadm cannot assemble arrays without it).
func HasMD() bool {
	_, err := os.Stat("/proc/mdstat")
	return err == nil
}
