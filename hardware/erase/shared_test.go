package erase

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/anvil-metal/anvil/hardware"
	"github.com/anvil-metal/anvil/hardware/disk"
	"github.com/anvil-metal/anvil/hardware/internal/testdev"
	"github.com/anvil-metal/anvil/hardware/partition"
	"github.com/anvil-metal/anvil/protocol"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const (
	typeGPFS = "37AFFC90-EF7D-4E96-91C3-2D7AE055B174"
	typeVMFS = "AA31E02A-400F-11DB-9590-000C2911D1B8"
)

// Signature writers: the bytes libblkid recognises (blkid confirms them in
// the loop-device test).

func putVMFSVolume(t testing.TB, w io.WriterAt, base int64) {
	b := make([]byte, 512)
	binary.LittleEndian.PutUint32(b, vmfsVolumeMagic)
	binary.LittleEndian.PutUint32(b[4:], 14) // version
	_, err := w.WriteAt(b, base+vmfsVolumeOffset)
	require.NoError(t, err)
}

func putVMFSFS(t testing.TB, w io.WriterAt, base int64) {
	b := make([]byte, 512)
	binary.LittleEndian.PutUint32(b, vmfsFSMagic)
	binary.LittleEndian.PutUint32(b[4:], 14)
	b[8] = 6                          // VMFS-6
	copy(b[9:25], "0123456789abcdef") // uuid
	copy(b[29:], "datastore1\x00")    // label
	_, err := w.WriteAt(b, base+vmfsFSOffset)
	require.NoError(t, err)
}

func putGFS2(t testing.TB, w io.WriterAt, base int64, format uint32) {
	b := make([]byte, 512)
	be := binary.BigEndian
	be.PutUint32(b, gfsMagic)
	be.PutUint32(b[4:], gfsMetaTypeSB)
	be.PutUint32(b[12:], 100) // mh_format of a superblock
	be.PutUint32(b[24:], format)
	be.PutUint32(b[28:], 1900) // sb_multihost_format
	be.PutUint32(b[36:], 4096) // sb_bsize
	copy(b[0x48:], "lock_dlm")
	copy(b[0x88:], "cluster:fs")
	_, err := w.WriteAt(b, base+gfsOffset)
	require.NoError(t, err)
}

func putMBR(t testing.TB, w io.WriterAt, typ byte, startLBA uint32) {
	mbr := make([]byte, 512)
	e := mbr[446:]
	e[4] = typ
	binary.LittleEndian.PutUint32(e[8:], startLBA)
	binary.LittleEndian.PutUint32(e[12:], 8192)
	mbr[510], mbr[511] = 0x55, 0xAA
	_, err := w.WriteAt(mbr, 0)
	require.NoError(t, err)
}

func putGPT(t testing.TB, w io.WriterAt, size, lbs uint64, types ...string) partition.Layout {
	var parts []partition.Part
	for _, typ := range types {
		parts = append(parts, partition.Part{Type: typ, Size: 4 << 20})
	}
	l, err := partition.WriteGPT(w, size, lbs, parts)
	require.NoError(t, err)
	return l
}

func TestDetectSharedFilesystems(t *testing.T) {
	const size = 16 << 20
	tests := []struct {
		name  string
		build func(t *testing.T, f *os.File)
		want  []string // names found
		where string
	}{
		{"empty", func(*testing.T, *os.File) {}, nil, ""},
		{"GPT, GPFS partition", func(t *testing.T, f *os.File) {
			putGPT(t, f, size, 512, partition.TypeLinuxFS, typeGPFS)
		}, []string{"IBM GPFS"}, "GPT partition 2 has type " + typeGPFS},
		{"GPT with 4 KiB sectors, VMFS partition", func(t *testing.T, f *os.File) {
			putGPT(t, f, size, 4096, typeVMFS)
		}, []string{"VMware VMFS"}, "GPT partition 1"},
		{"only the backup GPT left", func(t *testing.T, f *os.File) {
			putGPT(t, f, size, 512, typeGPFS)
			_, err := f.WriteAt(make([]byte, 1<<20), 0)
			require.NoError(t, err)
		}, []string{"IBM GPFS"}, "GPT partition 1"},
		{"Linux GPT partition holding a VMFS volume", func(t *testing.T, f *os.File) {
			l := putGPT(t, f, size, 512, partition.TypeLinuxFS)
			putVMFSVolume(t, f, int64(l.Start[0]))
		}, []string{"VMware VMFS"}, "VMFS volume header on GPT partition 1"},
		{"MBR type 0xfb", func(t *testing.T, f *os.File) { putMBR(t, f, 0xfb, 2048) }, []string{"VMware VMFS"}, "MBR partition 1 has type 0xfb"},
		{"VMFS filesystem on the whole device", func(t *testing.T, f *os.File) { putVMFSFS(t, f, 0) }, []string{"VMware VMFS"}, "on the device"},
		{"GFS2 on the whole device", func(t *testing.T, f *os.File) { putGFS2(t, f, 0, 1801) }, []string{"Red Hat GFS2"}, "format 1801"},
		{"GFS magic but a journal block, not a superblock", func(t *testing.T, f *os.File) {
			putGFS2(t, f, 0, 1801)
			_, err := f.WriteAt([]byte{0, 0, 0, 9}, gfsOffset+4)
			require.NoError(t, err)
		}, nil, ""},
		{"OCFS2 on an MBR Linux partition", func(t *testing.T, f *os.File) {
			putMBR(t, f, 0x83, 2048)
			_, err := f.WriteAt([]byte("OCFSV2"), 2048*512+4096)
			require.NoError(t, err)
		}, []string{"Oracle OCFS2"}, "MBR partition 1"},
		{"ext4-looking device", func(t *testing.T, f *os.File) {
			_, err := f.WriteAt([]byte{0x53, 0xEF}, 1024+56)
			require.NoError(t, err)
		}, nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "disk.img")
			f, err := os.Create(p)
			require.NoError(t, err)
			defer f.Close()
			require.NoError(t, f.Truncate(size))
			tt.build(t, f)
			found := DetectSharedFilesystems(f, size)
			var names []string
			for _, s := range found {
				names = append(names, s.Name)
			}
			assert.Equal(t, tt.want, names, "%+v", found)
			if tt.where != "" {
				require.NotEmpty(t, found)
				assert.Contains(t, found[0].Where, tt.where)
			}
			viaProber, err := SysProber{}.SharedFilesystems(p)
			require.NoError(t, err)
			assert.Equal(t, found, viaProber)
		})
	}
}

func sum(t *testing.T, dev string) [32]byte {
	t.Helper()
	b, err := os.ReadFile(dev)
	require.NoError(t, err)
	return sha256.Sum256(b)
}

// TestEraseRefusesSharedFilesystems puts shared-storage signatures on loop
// devices (blkid agrees they are what we think) and runs both erase steps
// over them: both refuse before writing anything, naming the device and
// the filesystem, with IPA's ProtectedDeviceError; erase_shared_filesystems
// lets them through.
func TestEraseRefusesSharedFilesystems(t *testing.T) {
	testdev.Need(t, "blkid")
	ctx := context.Background()
	const size = 64 << 20 // blkid does not probe gfs2 below 32 MiB
	open := func(dev string) *os.File {
		f, err := os.OpenFile(dev, os.O_RDWR, 0)
		require.NoError(t, err)
		t.Cleanup(func() { f.Close() })
		return f
	}
	gpfs := testdev.Loop(t, size, false)
	putGPT(t, open(gpfs), size, 512, typeGPFS)
	vmfs := testdev.Loop(t, size, false)
	putVMFSFS(t, open(vmfs), 0)
	gfs2 := testdev.Loop(t, size, false)
	putGFS2(t, open(gfs2), 0, 1801)
	plain := testdev.Loop(t, size, false)
	putMBR(t, open(plain), 0x83, 2048)
	for _, dev := range []string{gpfs, vmfs, gfs2, plain} {
		require.NoError(t, open(dev).Sync())
	}
	assert.Contains(t, blkidTypes(t, vmfs), "TYPE=VMFS")
	assert.Contains(t, blkidTypes(t, gfs2), "TYPE=gfs2")
	assert.Contains(t, blkidTypes(t, gpfs), "PTTYPE=gpt")

	shared := map[string]string{gpfs: "IBM GPFS", vmfs: "VMware VMFS", gfs2: "Red Hat GFS2"}
	all := []string{gpfs, vmfs, gfs2, plain}
	guard := hardware.NewGuard(outside, all)
	var disks []disk.Disk
	before := map[string][32]byte{}
	for _, dev := range all {
		disks = append(disks, discovered(t, dev))
		before[dev] = sum(t, dev)
	}
	unchanged := func() {
		for _, dev := range all {
			assert.Equal(t, before[dev], sum(t, dev), "%s was written", dev)
		}
	}

	t.Run("erase_devices", func(t *testing.T) {
		pol := DefaultPolicy()
		pol.Iterations = 0
		plans := Plan(ctx, disks, pol, SysProber{}, guard)
		for _, p := range plans {
			if name, ok := shared[p.Device]; ok {
				assert.Equal(t, ActionRefuse, p.Action, p.Device)
				require.NotEmpty(t, p.Shared, p.Device)
				assert.Equal(t, name, p.Shared[0].Name)
				assert.Contains(t, p.Reason, p.Device)
				assert.Contains(t, p.Reason, name)
				assert.Contains(t, p.Reason, "erase_shared_filesystems=true")
			} else {
				assert.Equal(t, ActionErase, p.Action, p.Reason)
			}
		}
		_, err := (&Eraser{Opener: guard}).Erase(ctx, plans, pol, nil)
		var pe *protocol.Error
		require.ErrorAs(t, err, &pe)
		assert.Equal(t, protocol.ErrTypeProtectedDevice, pe.Type)
		assert.Contains(t, pe.Details, gpfs+": refusing to erase "+gpfs+": it holds IBM GPFS")
		unchanged()
	})

	t.Run("erase_devices_metadata", func(t *testing.T) {
		res, err := EraseMetadata(ctx, disks, guard, MetadataOptions{Shared: SharedCheck{Prober: SysProber{}}}, nil)
		var pe *protocol.Error
		require.ErrorAs(t, err, &pe)
		assert.Equal(t, protocol.ErrTypeProtectedDevice, pe.Type)
		require.Len(t, res.Devices, 3)
		for _, d := range res.Devices {
			assert.Equal(t, StatusFailed, d.Status)
			assert.Contains(t, d.Reason, shared[d.Device])
		}
		unchanged()
	})

	t.Run("allowed by erase_shared_filesystems", func(t *testing.T) {
		pol, err := DefaultPolicy().WithArgs(map[string]any{"erase_shared_filesystems": true})
		require.NoError(t, err)
		res, err := EraseMetadata(ctx, disks, guard, MetadataOptions{Shared: SharedCheck{Prober: SysProber{}, Allow: pol.EraseSharedFilesystems}}, nil)
		require.NoError(t, err, "%+v", res)
		for _, dev := range all {
			found, err := probeShared(dev)
			require.NoError(t, err)
			assert.Empty(t, found, dev)
		}
		assert.NotContains(t, blkidTypes(t, vmfs), "VMFS")
		assert.NotContains(t, blkidTypes(t, gfs2), "gfs2")
		for _, d := range res.Devices {
			require.NotEmpty(t, d.Wipes)
			if name, ok := shared[d.Device]; ok && name != "IBM GPFS" {
				assert.NotEmpty(t, d.Wipes[len(d.Wipes)-1].Found, "the wipe records the %s superblock", name)
			}
		}
	})
}
