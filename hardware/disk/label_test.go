package disk

import (
	"context"
	"encoding/binary"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fatImage builds the start of a FAT filesystem as mkfs.fat lays it out:
// boot sector with the extended boot record label, and the root directory
// whose first entry is the volume label (rootLabel, "" for none). FAT12 is a
// 1.44 MB floppy (1 reserved sector, 2 FATs of 9 sectors, 224 root entries);
// FAT32 has 32 reserved sectors, 2 FATs of 100 sectors, 1 sector per
// cluster and the root directory in cluster 2.
func fatImage(fat32 bool, bootLabel, rootLabel string) []byte {
	var rootOff int
	if fat32 {
		rootOff = (32 + 2*100) * 512
	} else {
		rootOff = (1 + 2*9) * 512
	}
	b := make([]byte, rootOff+512)
	copy(b, []byte{0xEB, 0x3C, 0x90})
	copy(b[3:], "mkfs.fat")
	binary.LittleEndian.PutUint16(b[0x0B:], 512)
	b[0x0D] = 1
	b[0x10] = 2
	b[0x15] = 0xF0
	pad := func(s string) []byte { return []byte((s + "           ")[:11]) }
	if fat32 {
		binary.LittleEndian.PutUint16(b[0x0E:], 32)
		binary.LittleEndian.PutUint32(b[0x20:], 204800)
		binary.LittleEndian.PutUint32(b[0x24:], 100)
		binary.LittleEndian.PutUint32(b[0x2C:], 2)
		b[0x42] = 0x29
		copy(b[0x47:], pad(bootLabel))
		copy(b[0x52:], "FAT32   ")
	} else {
		binary.LittleEndian.PutUint16(b[0x0E:], 1)
		binary.LittleEndian.PutUint16(b[0x11:], 224)
		binary.LittleEndian.PutUint16(b[0x13:], 2880)
		binary.LittleEndian.PutUint16(b[0x16:], 9)
		b[0x26] = 0x29
		copy(b[0x2B:], pad(bootLabel))
		copy(b[0x36:], "FAT12   ")
	}
	b[510], b[511] = 0x55, 0xAA
	if rootLabel != "" {
		copy(b[rootOff:], pad(rootLabel))
		b[rootOff+11] = 0x08
	}
	return b
}

// isoImage builds an empty system area, a primary volume descriptor with
// the given volume identifier and the descriptor-set terminator.
func isoImage(volID string) []byte {
	b := make([]byte, isoPVDOffset+2*2048)
	pvd := b[isoPVDOffset:]
	pvd[0], pvd[6] = 1, 1
	copy(pvd[1:], "CD001")
	copy(pvd[8:40], "LINUX                           ")
	copy(pvd[40:72], (volID + "                                ")[:32])
	term := b[isoPVDOffset+2048:]
	term[0], term[6] = 255, 1
	copy(term[1:], "CD001")
	return b
}

// extImage builds a boot block and an ext4 superblock carrying label.
func extImage(label string) []byte {
	b := make([]byte, 2048)
	sb := b[extSuperOffset:]
	binary.LittleEndian.PutUint32(sb[0:], 128)  // s_inodes_count
	binary.LittleEndian.PutUint32(sb[4:], 1024) // s_blocks_count_lo
	binary.LittleEndian.PutUint32(sb[24:], 2)   // s_log_block_size: 4 KiB
	binary.LittleEndian.PutUint16(sb[56:], 0xEF53)
	binary.LittleEndian.PutUint32(sb[76:], 1)     // s_rev_level: dynamic
	binary.LittleEndian.PutUint32(sb[96:], 0x2c2) // s_feature_incompat: extents, flex_bg, 64bit... (ext4)
	copy(sb[120:136], label)
	return b
}

func writeImage(t *testing.T, b []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "img")
	require.NoError(t, os.WriteFile(p, b, 0o600))
	return p
}

func TestReadLabels(t *testing.T) {
	tests := []struct {
		name   string
		image  []byte
		want   []fsLabel
		vmedia bool
	}{
		{"FAT12 floppy as mkfs.fat makes it", fatImage(false, "ir-vfd-dev", "ir-vfd-dev"),
			[]fsLabel{{"ir-vfd-dev", "FAT boot sector"}, {"ir-vfd-dev", "FAT root-directory volume label"}}, true},
		{"FAT12 relabelled: only the root directory says so", fatImage(false, "NO NAME", "IR-VFD-DEV"),
			[]fsLabel{{"IR-VFD-DEV", "FAT root-directory volume label"}}, true},
		{"FAT32 boot sector only", fatImage(true, "ir-vfd-dev", ""),
			[]fsLabel{{"ir-vfd-dev", "FAT32 boot sector"}}, true},
		{"FAT12 other label", fatImage(false, "EFI", "EFI"),
			[]fsLabel{{"EFI", "FAT boot sector"}, {"EFI", "FAT root-directory volume label"}}, false},
		{"ISO9660", isoImage("ir-vfd-dev"), []fsLabel{{"ir-vfd-dev", "ISO9660 volume identifier"}}, true},
		{"ISO9660 other label", isoImage("CentOS 7 x86_64"), []fsLabel{{"CentOS 7 x86_64", "ISO9660 volume identifier"}}, false},
		{"ext4", extImage("ir-vfd-dev"), []fsLabel{{"ir-vfd-dev", "ext2/3/4 superblock"}}, true},
		{"ext4 other label", extImage("cloudimg-rootfs"), []fsLabel{{"cloudimg-rootfs", "ext2/3/4 superblock"}}, false},
		{"ext4 longest label", extImage("0123456789abcdef"), []fsLabel{{"0123456789abcdef", "ext2/3/4 superblock"}}, false},
		{"label as a prefix is not the label", extImage("ir-vfd-dev2"), []fsLabel{{"ir-vfd-dev2", "ext2/3/4 superblock"}}, false},
		{"zeroes", make([]byte, 64<<10), nil, false},
		{"empty file", nil, nil, false},
		{"short file", []byte("ir-vfd-dev"), nil, false},
		{"boot signature without a FAT BPB", func() []byte {
			b := make([]byte, 4096)
			b[510], b[511] = 0x55, 0xAA // an MBR, say
			copy(b[0x2B:], "ir-vfd-dev ")
			return b
		}(), nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := writeImage(t, tt.image)
			got := readLabels(p)
			assert.Equal(t, tt.want, got)
			vm, reason := labelVirtualMedia("/dev/vdb", got)
			assert.Equal(t, tt.vmedia, vm)
			if vm {
				assert.Contains(t, reason, VirtualMediaLabel)
				assert.Contains(t, reason, tt.want[0].Source)
				assert.Contains(t, reason, "/dev/vdb")
			}
		})
	}
	assert.Nil(t, readLabels(filepath.Join(t.TempDir(), "missing")))
}

// A hybrid ISO: an MBR in the system area and the PVD at 32 KiB.
func TestReadLabelsHybridISO(t *testing.T) {
	b := isoImage("ir-vfd-dev")
	b[510], b[511] = 0x55, 0xAA
	assert.Equal(t, []fsLabel{{"ir-vfd-dev", "ISO9660 volume identifier"}}, readLabels(writeImage(t, b)))
}

// readLabels reads the first 4 KiB, one root-directory sector and the start
// of the PVD: count what a reader is asked for.
func TestReadLabelsReadsLittle(t *testing.T) {
	r := &countingReader{b: fatImage(false, "ir-vfd-dev", "ir-vfd-dev")}
	head := make([]byte, headBytes)
	n, _ := r.ReadAt(head, 0)
	assert.Len(t, fatLabels(r, head[:n]), 2)
	assert.LessOrEqual(t, r.n, headBytes+maxFATRootRead)
}

type countingReader struct {
	b []byte
	n int
}

func (r *countingReader) ReadAt(p []byte, off int64) (int, error) {
	r.n += len(p)
	if off >= int64(len(r.b)) {
		return 0, os.ErrNotExist
	}
	n := copy(p, r.b[off:])
	return n, nil
}

func TestReadLabelsCtxGivesUp(t *testing.T) {
	// A FIFO with no writer blocks open(2) like a hung device blocks read.
	p := filepath.Join(t.TempDir(), "fifo")
	if err := mkfifo(p); err != nil {
		t.Skip("no mkfifo:", err)
	}
	t.Cleanup(func() {
		// Unblock the abandoned open so the goroutine ends.
		if f, err := os.OpenFile(p, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			f.Close()
		}
	})
	start := time.Now()
	assert.Nil(t, readLabelsCtx(context.Background(), p, 50*time.Millisecond))
	assert.Less(t, time.Since(start), 5*time.Second)
}

func mkfifo(p string) error { return syscall.Mkfifo(p, 0o600) }
