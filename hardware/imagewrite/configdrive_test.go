package imagewrite

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"encoding/binary"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/diskfs/go-diskfs/backend/file"
	"github.com/diskfs/go-diskfs/filesystem/iso9660"
	"github.com/diskfs/go-diskfs/partition/gpt"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/hardware"
	"github.com/anvil-metal/anvil/protocol"
)

const mib = 1 << 20

// testISO builds an ISO9660 image labelled label with
// openstack/latest/meta_data.json, through go-diskfs (independently of
// the code under test).
func testISO(t *testing.T, label, meta string) []byte {
	t.Helper()
	dir := t.TempDir()
	out, err := os.Create(filepath.Join(dir, "cd.iso"))
	require.NoError(t, err)
	defer out.Close()
	ws := filepath.Join(dir, "ws")
	require.NoError(t, os.Mkdir(ws, 0o700))
	fsys, err := iso9660.Create(file.New(out, false), 0, 0, 2048, ws)
	require.NoError(t, err)
	require.NoError(t, fsys.Mkdir("/openstack/latest"))
	f, err := fsys.OpenFile("/openstack/latest/meta_data.json", os.O_CREATE|os.O_RDWR)
	require.NoError(t, err)
	_, err = f.Write([]byte(meta))
	require.NoError(t, err)
	require.NoError(t, f.Close())
	require.NoError(t, fsys.Finalize(iso9660.FinalizeOptions{RockRidge: true, VolumeIdentifier: label}))
	b, err := os.ReadFile(out.Name())
	require.NoError(t, err)
	return b
}

func inline(t *testing.T, iso []byte) string {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	_, err := zw.Write(iso)
	require.NoError(t, err)
	require.NoError(t, zw.Close())
	return base64.StdEncoding.EncodeToString(buf.Bytes())
}

// gptDisk makes a disk file of diskBytes holding a GPT image of
// imageBytes (its backup header at the image's end, as a whole-disk image
// written to a larger disk has it) with the given partitions (MiB ranges);
// each partition is filled with its number.
func gptDisk(t testing.TB, imageBytes, diskBytes int64, parts ...[2]uint64) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "disk")
	f, err := os.Create(p)
	require.NoError(t, err)
	defer f.Close()
	require.NoError(t, f.Truncate(imageBytes))
	tbl := &gpt.Table{LogicalSectorSize: 512, PhysicalSectorSize: 512, ProtectiveMBR: true}
	for i, r := range parts {
		tbl.Partitions = append(tbl.Partitions, &gpt.Partition{Index: i + 1, Start: r[0] * 2048, End: r[1]*2048 - 1, Type: gpt.LinuxFilesystem, Name: "p"})
	}
	w, err := file.New(f, false).Writable()
	require.NoError(t, err)
	require.NoError(t, tbl.Write(w, imageBytes))
	for i, r := range parts {
		_, err := f.WriteAt(bytes.Repeat([]byte{byte(i + 1)}, mib), int64(r[0])*mib)
		require.NoError(t, err)
	}
	require.NoError(t, f.Truncate(diskBytes))
	return p
}

// mbrDisk makes a disk file with an MBR of the given partitions (MiB
// ranges).
func mbrDisk(t testing.TB, diskBytes int64, parts ...[2]uint32) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "disk")
	mbr := make([]byte, 512)
	for i, r := range parts {
		e := mbr[446+16*i:]
		e[4] = 0x83
		binary.LittleEndian.PutUint32(e[8:], r[0]*2048)
		binary.LittleEndian.PutUint32(e[12:], (r[1]-r[0])*2048)
	}
	mbr[510], mbr[511] = 0x55, 0xAA
	require.NoError(t, os.WriteFile(p, mbr, 0o600))
	require.NoError(t, os.Truncate(p, diskBytes))
	return p
}

// readMeta reads openstack/latest/meta_data.json of the ISO at off.
func readMeta(t *testing.T, dev string, off, size int64) string {
	t.Helper()
	// go-diskfs's reader misreads an ISO at an offset: read a copy.
	d, err := os.Open(dev)
	require.NoError(t, err)
	defer d.Close()
	b := make([]byte, size)
	_, err = d.ReadAt(b, off)
	require.NoError(t, err)
	p := filepath.Join(t.TempDir(), "part.iso")
	require.NoError(t, os.WriteFile(p, b, 0o600))
	f, err := os.Open(p)
	require.NoError(t, err)
	defer f.Close()
	fsys, err := iso9660.Read(file.New(f, true), size, 0, 2048)
	require.NoError(t, err)
	assert.Equal(t, "config-2", strings.TrimRight(fsys.Label(), " \x00"))
	meta, err := fsys.ReadFile("openstack/latest/meta_data.json")
	require.NoError(t, err)
	return string(meta)
}

func writeCD(t *testing.T, dev, cd string) (ConfigDriveResult, error) {
	w := &Writer{Opener: hardware.NewGuard(outside, []string{dev})}
	return w.WriteConfigDrive(context.Background(), dev, cd, nil)
}

func TestConfigDriveNewGPTPartition(t *testing.T) {
	iso := testISO(t, "config-2", `{"uuid":"u1"}`)
	dev := gptDisk(t, 40*mib, 200*mib, [2]uint64{1, 10}, [2]uint64{10, 39})
	res, err := writeCD(t, dev, inline(t, iso))
	require.NoError(t, err)
	assert.Equal(t, ConfigDriveResult{Partition: 3, Table: "gpt", Created: true, OffsetBytes: 200*mib - 64*mib,
		SizeBytes: 64*mib - 33*512, ISOBytes: int64(len(iso)), Source: "inline"}, res)
	assert.Equal(t, `{"uuid":"u1"}`, readMeta(t, dev, res.OffsetBytes, int64(len(iso))))

	// An independent reader sees the new partition, and the backup table
	// at the disk's end agrees (the primary destroyed, it is read instead).
	f, err := os.OpenFile(dev, os.O_RDWR, 0)
	require.NoError(t, err)
	defer f.Close()
	tbl, err := gpt.Read(file.New(f, true), 512, 512)
	require.NoError(t, err)
	require.Len(t, tbl.Partitions, 3)
	p := tbl.Partitions[2]
	assert.Equal(t, uint64(136*2048), p.Start)
	assert.Equal(t, uint64(200*2048-34), p.End, "up to the last usable sector")
	assert.Equal(t, "config-2", p.Name)
	assert.Equal(t, gpt.LinuxFilesystem, p.Type)
	assert.Equal(t, uint64(10*2048-1), tbl.Partitions[0].End, "existing partitions kept")
	_, err = f.WriteAt(make([]byte, 512), 512)
	require.NoError(t, err)
	bk, err := gpt.Read(file.New(f, true), 512, 512)
	require.NoError(t, err)
	assert.True(t, bk.RecoveredFromBackup)
	require.Len(t, bk.Partitions, 3)
	assert.Equal(t, p.Start, bk.Partitions[2].Start)
	// the partitions' data is untouched, the protective MBR covers the disk
	b := make([]byte, mib)
	_, err = f.ReadAt(b, 10*mib)
	require.NoError(t, err)
	assert.Equal(t, bytes.Repeat([]byte{2}, mib), b)
	_, err = f.ReadAt(b[:512], 0)
	require.NoError(t, err)
	assert.Equal(t, uint32(200*2048-1), binary.LittleEndian.Uint32(b[446+12:]))
	// the image's old backup header (its last sector) is gone
	_, err = f.ReadAt(b[:8], 40*mib-512)
	require.NoError(t, err)
	assert.NotEqual(t, "EFI PART", string(b[:8]))
}

func TestConfigDriveOverwritesExistingPartition(t *testing.T) {
	dev := gptDisk(t, 48*mib, 48*mib, [2]uint64{1, 30}, [2]uint64{30, 40})
	old := testISO(t, "config-2", `{"uuid":"old"}`)
	f, err := os.OpenFile(dev, os.O_RDWR, 0)
	require.NoError(t, err)
	_, err = f.WriteAt(old, 30*mib)
	require.NoError(t, err)
	require.NoError(t, f.Close())
	before, err := os.ReadFile(dev)
	require.NoError(t, err)

	iso := testISO(t, "config-2", `{"uuid":"new"}`)
	res, err := writeCD(t, dev, inline(t, iso))
	require.NoError(t, err)
	assert.Equal(t, 2, res.Partition)
	assert.False(t, res.Created)
	assert.Equal(t, int64(30*mib), res.OffsetBytes)
	assert.Equal(t, `{"uuid":"new"}`, readMeta(t, dev, res.OffsetBytes, int64(len(iso))))
	after, err := os.ReadFile(dev)
	require.NoError(t, err)
	assert.True(t, bytes.Equal(before[:30*mib], after[:30*mib]), "the table and the first partition are unchanged")
	assert.True(t, bytes.Equal(before[40*mib:], after[40*mib:]), "the backup table is unchanged")
}

func TestConfigDriveNewMBRPartition(t *testing.T) {
	iso := testISO(t, "config-2", `{"uuid":"m"}`)
	dev := mbrDisk(t, 100*mib, [2]uint32{1, 20})
	res, err := writeCD(t, dev, inline(t, iso))
	require.NoError(t, err)
	assert.Equal(t, ConfigDriveResult{Partition: 2, Table: "msdos", Created: true, OffsetBytes: 36 * mib, SizeBytes: 64 * mib,
		ISOBytes: int64(len(iso)), Source: "inline"}, res)
	b, err := os.ReadFile(dev)
	require.NoError(t, err)
	e := b[446+16:]
	assert.Equal(t, byte(0x83), e[4])
	assert.Equal(t, uint32(36*2048), binary.LittleEndian.Uint32(e[8:]))
	assert.Equal(t, uint32(64*2048), binary.LittleEndian.Uint32(e[12:]))
	assert.Equal(t, `{"uuid":"m"}`, readMeta(t, dev, res.OffsetBytes, int64(len(iso))))
}

func TestConfigDriveSmallFreeSpace(t *testing.T) {
	// 10 MiB free after the image: the partition takes what there is.
	iso := testISO(t, "config-2", `{}`)
	dev := mbrDisk(t, 30*mib, [2]uint32{1, 20})
	res, err := writeCD(t, dev, inline(t, iso))
	require.NoError(t, err)
	assert.Equal(t, int64(20*mib), res.OffsetBytes)
	assert.Equal(t, int64(10*mib), res.SizeBytes)
}

func TestConfigDriveRefusals(t *testing.T) {
	iso := testISO(t, "config-2", `{}`)
	good := inline(t, iso)
	for name, tc := range map[string]struct {
		dev     func(t *testing.T) string
		cd      string
		wantErr string
		badArgs bool
	}{
		"no partition table": {dev: func(t *testing.T) string { return target(t, 8*mib) }, cd: good, wantErr: "has no partition table"},
		"MBR full": {dev: func(t *testing.T) string {
			return mbrDisk(t, 8*mib, [2]uint32{1, 2}, [2]uint32{2, 3}, [2]uint32{3, 4}, [2]uint32{4, 5})
		}, cd: good, wantErr: "already has 4 primary partitions"},
		"no room":     {dev: func(t *testing.T) string { return mbrDisk(t, 21*mib, [2]uint32{1, 21}) }, cd: good, wantErr: "no room for the configdrive"},
		"bad base64":  {dev: func(t *testing.T) string { return mbrDisk(t, 8*mib) }, cd: "H4sI*", wantErr: "not base64 encoded", badArgs: true},
		"not gzipped": {dev: func(t *testing.T) string { return mbrDisk(t, 8*mib) }, cd: base64.StdEncoding.EncodeToString(iso), wantErr: "not gzipped", badArgs: true},
		"ftp URL":     {dev: func(t *testing.T) string { return mbrDisk(t, 8*mib) }, cd: "ftp://192.0.2.1/cd", wantErr: "only http:// and https://", badArgs: true},
	} {
		t.Run(name, func(t *testing.T) {
			dev := tc.dev(t)
			before, err := os.ReadFile(dev)
			require.NoError(t, err)
			_, err = writeCD(t, dev, tc.cd)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.wantErr)
			var pe *protocol.Error
			require.ErrorAs(t, err, &pe)
			if tc.badArgs {
				assert.Equal(t, protocol.ErrTypeInvalidArgs, pe.Type)
			} else {
				assert.Equal(t, protocol.ErrTypeImageWrite, pe.Type)
			}
			after, err := os.ReadFile(dev)
			require.NoError(t, err)
			assert.True(t, bytes.Equal(before, after), "nothing written")
		})
	}
}

func TestConfigDriveFromURL(t *testing.T) {
	iso := testISO(t, "config-2", `{"uuid":"url"}`)
	srv := serve(t, map[string][]byte{"/cd.b64": []byte(inline(t, iso)), "/cd.iso": iso, "/cd.gz": gz(t, iso), "/bad.b64": []byte("H4sIAAAA")})
	for name, tc := range map[string]struct {
		path, wantErr string
	}{
		"base64 gzipped": {path: "/cd.b64"},
		"raw ISO":        {path: "/cd.iso"},
		"gzipped ISO":    {path: "/cd.gz"},
		"not found":      {path: "/missing", wantErr: "HTTP 404 Not Found"},
		"bad content":    {path: "/bad.b64", wantErr: "configdrive: " + srv.URL + "/bad.b64: configdrive"},
	} {
		t.Run(name, func(t *testing.T) {
			dev := mbrDisk(t, 100*mib, [2]uint32{1, 20})
			res, err := writeCD(t, dev, srv.URL+tc.path)
			if tc.wantErr != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tc.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, srv.URL+tc.path, res.Source)
			assert.Equal(t, `{"uuid":"url"}`, readMeta(t, dev, res.OffsetBytes, int64(len(iso))))
		})
	}
}

func TestLinuxFSType(t *testing.T) {
	// the on-disk bytes are the GUID sgdisk calls 8300
	b := linuxFSType()
	const h = "0123456789ABCDEF"
	var s strings.Builder
	for _, idx := range []int{3, 2, 1, 0, -1, 5, 4, -1, 7, 6, -1, 8, 9, -1, 10, 11, 12, 13, 14, 15} {
		if idx < 0 {
			s.WriteByte('-')
			continue
		}
		s.WriteByte(h[b[idx]>>4])
		s.WriteByte(h[b[idx]&15])
	}
	assert.Equal(t, strings.ToUpper(string(gpt.LinuxFilesystem)), s.String())
}

// memDisk is a sparse disk in memory for the fuzz test: its first bytes
// are held, the rest reads as zeros and takes writes without keeping them.
type memDisk struct {
	head []byte
	size int64
}

func (m *memDisk) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 || off+int64(len(p)) > m.size {
		return 0, io.EOF
	}
	clear(p)
	if off < int64(len(m.head)) {
		copy(p, m.head[off:])
	}
	return len(p), nil
}

func (m *memDisk) WriteAt(p []byte, off int64) (int, error) {
	if off < 0 || off+int64(len(p)) > m.size {
		return 0, io.ErrShortWrite
	}
	if off < int64(len(m.head)) {
		copy(m.head[off:], p)
	}
	return len(p), nil
}

// FuzzPlaceConfigDrive: the partition tables come from the downloaded
// image. Whatever they hold, placing a configdrive never panics, and a
// success places it inside the disk, past sector 0, in at most 64 MiB.
func FuzzPlaceConfigDrive(f *testing.F) {
	head := func(path string) []byte {
		b, err := os.ReadFile(path)
		require.NoError(f, err)
		return b[:64<<10]
	}
	f.Add(head(gptDisk(f, 8*mib, 8*mib, [2]uint64{1, 4})), uint16(16))
	f.Add(head(mbrDisk(f, 8*mib, [2]uint32{1, 4})), uint16(16))
	f.Add(head(mbrDisk(f, 8*mib, [2]uint32{1, 2}, [2]uint32{2, 3}, [2]uint32{3, 4}, [2]uint32{4, 5})), uint16(8))
	f.Fuzz(func(t *testing.T, head []byte, mibs uint16) {
		size := int64(mibs%4096+1) * mib
		disk := &memDisk{head: make([]byte, 64<<10), size: size}
		copy(disk.head, head)
		iso := make([]byte, 4096)
		var res ConfigDriveResult
		if err := placeConfigDrive(disk, size, 512, iso, &res); err != nil {
			return
		}
		assert.Positive(t, res.OffsetBytes)
		assert.LessOrEqual(t, res.OffsetBytes+int64(len(iso)), size)
		assert.LessOrEqual(t, res.SizeBytes, int64(protocol.MaxConfigDriveBytes))
	})
}
