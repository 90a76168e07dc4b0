package image

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/klauspost/compress/zstd"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// note is one ELF note as the kernel's .notes section holds them.
func note(owner string, typ uint32, desc []byte) []byte {
	var b bytes.Buffer
	name := append([]byte(owner), 0)
	for _, v := range []uint32{uint32(len(name)), uint32(len(desc)), typ} {
		_ = binary.Write(&b, binary.LittleEndian, v)
	}
	b.Write(name)
	b.Write(make([]byte, (4-len(name)%4)%4))
	b.Write(desc)
	b.Write(make([]byte, (4-len(desc)%4)%4))
	return b.Bytes()
}

// testELF is a minimal ELF64 x86-64 file whose one program header is a
// PT_NOTE over notes.
func testELF(notes []byte) []byte {
	const ehsize, phsize = 64, 56
	b := make([]byte, ehsize+phsize)
	copy(b, []byte{0x7f, 'E', 'L', 'F', 2, 1, 1})
	le := binary.LittleEndian
	le.PutUint16(b[16:], 2)     // ET_EXEC
	le.PutUint16(b[18:], 62)    // EM_X86_64
	le.PutUint32(b[20:], 1)     // EV_CURRENT
	le.PutUint64(b[32:], 64)    // e_phoff
	le.PutUint16(b[52:], 64)    // e_ehsize
	le.PutUint16(b[54:], 56)    // e_phentsize
	le.PutUint16(b[56:], 1)     // e_phnum
	le.PutUint32(b[64:], 4)     // PT_NOTE
	le.PutUint64(b[64+8:], 120) // p_offset
	le.PutUint64(b[64+32:], uint64(len(notes)))
	le.PutUint64(b[64+40:], uint64(len(notes)))
	return append(b, notes...)
}

// testBzImage wraps payload (a compressed kernel) in a bzImage setup
// header, with the decompressed size after it as the kernel's build does.
func testBzImage(payload []byte, size int) []byte {
	const setupSects = 2
	b := make([]byte, (setupSects+1)*512+16)
	b[0x1f1] = setupSects
	copy(b[0x202:], "HdrS")
	binary.LittleEndian.PutUint16(b[0x206:], 0x20f)
	binary.LittleEndian.PutUint32(b[0x248:], 16)
	binary.LittleEndian.PutUint32(b[0x24c:], uint32(len(payload)+4))
	b = append(b, payload...)
	return binary.LittleEndian.AppendUint32(b, uint32(size))
}

func TestExtractPVH(t *testing.T) {
	pvh := testELF(append(note("Xen", 6, []byte("linux\x00")), note("Xen", xenNotePhys32Entry, []byte{0x50, 0x08, 0, 1, 0, 0, 0, 0})...))
	noPVH := testELF(note("Xen", 6, []byte("linux\x00")))
	gz := func(b []byte) []byte {
		var out bytes.Buffer
		w := gzip.NewWriter(&out)
		_, _ = w.Write(b)
		_ = w.Close()
		return out.Bytes()
	}
	zs := func(b []byte) []byte {
		e, err := zstd.NewWriter(nil)
		require.NoError(t, err)
		defer e.Close()
		return e.EncodeAll(b, nil)
	}
	xz := func(b []byte) []byte {
		if _, err := exec.LookPath("xz"); err != nil {
			t.Skipf("xz not installed: %v", err)
		}
		// As the kernel's build compresses it: x86 BCJ filter, then LZMA2.
		cmd := exec.Command("xz", "--x86", "--lzma2", "--check=crc32", "--stdout")
		cmd.Stdin = bytes.NewReader(b)
		out, err := cmd.Output()
		require.NoError(t, err)
		return out
	}
	cases := []struct {
		name    string
		bz      func() []byte
		want    []byte
		wantErr string
		noPVH   bool
	}{
		{name: "gzip", bz: func() []byte { return testBzImage(gz(pvh), len(pvh)) }, want: pvh},
		{name: "zstd", bz: func() []byte { return testBzImage(zs(pvh), len(pvh)) }, want: pvh},
		{name: "xz with x86 BCJ", bz: func() []byte { return testBzImage(xz(pvh), len(pvh)) }, want: pvh},
		{name: "no PVH note", bz: func() []byte { return testBzImage(gz(noPVH), len(noPVH)) }, noPVH: true},
		{name: "not a bzImage", bz: func() []byte { return bytes.Repeat([]byte{1}, 4096) }, wantErr: "no HdrS"},
		{name: "payload past the end", bz: func() []byte { return testBzImage(gz(pvh), len(pvh))[:1200] }, wantErr: "outside"},
		{name: "unknown compression", bz: func() []byte { return testBzImage([]byte("LZ4?compressed"), 9) }, wantErr: "not handled"},
		{name: "not an ELF", bz: func() []byte { return testBzImage(gz([]byte("plain text")), 10) }, wantErr: "decompressed kernel"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			in, out := filepath.Join(dir, "vmlinuz"), filepath.Join(dir, "vmlinux")
			require.NoError(t, os.WriteFile(in, tc.bz(), 0o644))
			err := ExtractPVH(context.Background(), in, out)
			_, statErr := os.Stat(out)
			switch {
			case tc.noPVH:
				require.ErrorIs(t, err, ErrNoPVH)
				assert.ErrorIs(t, statErr, os.ErrNotExist, "nothing written for a kernel QEMU cannot PVH-boot")
			case tc.wantErr != "":
				require.ErrorContains(t, err, tc.wantErr)
				assert.ErrorIs(t, statErr, os.ErrNotExist)
			default:
				require.NoError(t, err)
				got, err := os.ReadFile(out)
				require.NoError(t, err)
				assert.Equal(t, tc.want, got)
			}
		})
	}
}

func TestHasNoteStopsAtTruncatedNotes(t *testing.T) {
	n := note("Xen", xenNotePhys32Entry, []byte{1, 2, 3, 4})
	assert.True(t, hasNote(n, binary.LittleEndian, "Xen", xenNotePhys32Entry))
	assert.False(t, hasNote(n, binary.LittleEndian, "GNU", xenNotePhys32Entry))
	for i := 0; i < len(n); i++ {
		assert.False(t, hasNote(n[:i], binary.LittleEndian, "Xen", xenNotePhys32Entry), "truncated at %d", i)
	}
	huge := append([]byte(nil), n...)
	binary.LittleEndian.PutUint32(huge, 0xffffffff)
	assert.False(t, hasNote(huge, binary.LittleEndian, "Xen", xenNotePhys32Entry))
}

// TestPVHCachedOncePerKernel: the second call reuses the extraction.
func TestPVHCachedOncePerKernel(t *testing.T) {
	dir := t.TempDir()
	pvh := testELF(note("Xen", xenNotePhys32Entry, make([]byte, 8)))
	var gz bytes.Buffer
	w := gzip.NewWriter(&gz)
	_, _ = w.Write(pvh)
	_ = w.Close()
	in := filepath.Join(dir, "vmlinuz")
	require.NoError(t, os.WriteFile(in, testBzImage(gz.Bytes(), len(pvh)), 0o644))
	h, err := hashFile(in)
	require.NoError(t, err)
	first, err := pvhCached(context.Background(), dir, in, h.SHA256)
	require.NoError(t, err)
	// A changed cache entry is what a second call returns: not redone.
	require.NoError(t, os.WriteFile(first, []byte("cached"), 0o644))
	second, err := pvhCached(context.Background(), dir, in, h.SHA256)
	require.NoError(t, err)
	assert.Equal(t, first, second)
	got, _ := os.ReadFile(second)
	assert.Equal(t, "cached", string(got))
}

// DirectKernel picks vmlinux where the build wrote one, else vmlinuz.
func TestDirectKernel(t *testing.T) {
	dir := t.TempDir()
	assert.Equal(t, filepath.Join(dir, "vmlinuz"), DirectKernel(dir))
	require.NoError(t, os.WriteFile(filepath.Join(dir, PVHName), []byte("elf"), 0o644))
	assert.Equal(t, filepath.Join(dir, PVHName), DirectKernel(dir))
}
