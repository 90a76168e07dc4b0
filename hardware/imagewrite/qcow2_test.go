package imagewrite

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/anvil-metal/anvil/hardware"
	"github.com/anvil-metal/anvil/hardware/internal/testdev"
	"github.com/anvil-metal/anvil/protocol"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// rawImage writes a sparse raw disk of size bytes whose 64 KiB stripes
// cycle through random data, compressible text, a hole (never written, so
// qemu-img leaves it unallocated) and half random/half hole, and returns
// its path.
func rawImage(t testing.TB, dir string, size int64) string {
	t.Helper()
	p := filepath.Join(dir, "disk.raw")
	f, err := os.Create(p)
	require.NoError(t, err)
	defer f.Close()
	require.NoError(t, f.Truncate(size))
	const stripe = 64 << 10
	buf := make([]byte, stripe)
	for off, i := int64(0), 0; off < size; off, i = off+stripe, i+1 {
		n := min(stripe, size-off)
		switch i % 4 {
		case 0:
			_, err = rand.Read(buf[:n])
		case 1:
			var b bytes.Buffer
			for b.Len() < int(n) {
				fmt.Fprintf(&b, "anvil stripe %d line %d\n", i, b.Len())
			}
			copy(buf, b.Bytes())
		case 2:
			continue
		case 3:
			n /= 2
			_, err = rand.Read(buf[:n])
		}
		require.NoError(t, err)
		_, err = f.WriteAt(buf[:n], off)
		require.NoError(t, err)
	}
	return p
}

// sparseData writes 1 MiB pieces (half random, half text) at the given offsets of a sparse
// raw file (for images whose L1 needs several L2 tables).
func sparseData(t testing.TB, dir string, size int64, at ...int64) string {
	t.Helper()
	p := filepath.Join(dir, "sparse.raw")
	f, err := os.Create(p)
	require.NoError(t, err)
	defer f.Close()
	require.NoError(t, f.Truncate(size))
	for _, off := range at {
		b := make([]byte, 1<<20)
		_, err := rand.Read(b[:len(b)/2])
		require.NoError(t, err)
		copy(b[len(b)/2:], bytes.Repeat([]byte("compressible "), len(b)))
		_, err = f.WriteAt(b, off)
		require.NoError(t, err)
	}
	return p
}

func qemuImg(t testing.TB, args ...string) {
	t.Helper()
	testdev.Need(t, "qemu-img")
	out, err := exec.Command("qemu-img", args...).CombinedOutput()
	require.NoError(t, err, "qemu-img %s: %s", strings.Join(args, " "), out)
}

// convertQcow2 converts the raw image to qcow2 at img with qemu-img's
// extra options and returns the qcow2 file's bytes.
func convertQcow2(t testing.TB, raw, img string, opts ...string) []byte {
	t.Helper()
	qemuImg(t, append(append([]string{"convert", "-O", "qcow2"}, opts...), raw, img)...)
	file, err := os.ReadFile(img)
	require.NoError(t, err)
	return file
}

// garbageFile is a target pre-filled with 0xCC, so holes must be zeroed.
func garbageFile(t testing.TB, size int64) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "target")
	f, err := os.Create(p)
	require.NoError(t, err)
	require.NoError(t, f.Close())
	testdev.Fill(t, p, 0, size, 0xCC)
	return p
}

// sameAsRaw compares the target's first len(raw) bytes with the raw image
// and checks that the rest still holds the garbage it was filled with.
func sameAsRaw(t testing.TB, raw, target string) {
	t.Helper()
	want, err := os.Open(raw)
	require.NoError(t, err)
	defer want.Close()
	got, err := os.Open(target)
	require.NoError(t, err)
	defer got.Close()
	st, err := want.Stat()
	require.NoError(t, err)
	a, b := make([]byte, 1<<20), make([]byte, 1<<20)
	for off := int64(0); off < st.Size(); off += int64(len(a)) {
		n := min(int64(len(a)), st.Size()-off)
		_, err := want.ReadAt(a[:n], off)
		require.NoError(t, err)
		_, err = got.ReadAt(b[:n], off)
		require.NoError(t, err)
		if !bytes.Equal(a[:n], b[:n]) {
			i := 0
			for a[i] == b[i] {
				i++
			}
			t.Fatalf("target differs from the raw image at byte %d: got 0x%02x, want 0x%02x", off+int64(i), b[i], a[i])
		}
	}
	tail := make([]byte, 1<<20)
	n, _ := got.ReadAt(tail, st.Size())
	assert.Equal(t, bytes.Repeat([]byte{0xCC}, n), tail[:n], "the device past the virtual size is untouched")
}

func TestWriteQcow2(t *testing.T) {
	testdev.Need(t, "qemu-img")
	dir := t.TempDir()
	small := rawImage(t, dir, 24<<20)
	big := sparseData(t, dir, 1100<<20, 0, 300<<20, 513<<20, 1099<<20)
	tests := []struct {
		name       string
		raw        string
		opts       []string
		compressed bool
		noHoles    bool // clusters larger than the raw image's holes
	}{
		{"v3, 64K clusters", small, nil, false, false},
		{"v3, 64K clusters, compressed", small, []string{"-c"}, true, false},
		{"v2, 64K clusters", small, []string{"-o", "compat=0.10"}, false, false},
		{"v2, 64K clusters, compressed", small, []string{"-c", "-o", "compat=0.10"}, true, false},
		{"v3, 4K clusters", small, []string{"-o", "cluster_size=4096"}, false, false},
		{"v3, 4K clusters, compressed", small, []string{"-c", "-o", "cluster_size=4096"}, true, false},
		{"v2, 4K clusters, compressed", small, []string{"-c", "-o", "compat=0.10,cluster_size=4096"}, true, false},
		{"v3, 512-byte clusters", small, []string{"-o", "cluster_size=512"}, false, false},
		{"v3, zstd compressed", small, []string{"-c", "-o", "compression_type=zstd"}, true, false},
		{"v3, 2M clusters", small, []string{"-o", "cluster_size=2M"}, false, true},
		{"1.1 GiB sparse, several L2 tables", big, nil, false, false},
		{"1.1 GiB sparse, 4K clusters, compressed", big, []string{"-c", "-o", "cluster_size=4096"}, true, false},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			file := convertQcow2(t, tt.raw, filepath.Join(dir, fmt.Sprintf("img%d.qcow2", i)), tt.opts...)
			srv := serve(t, map[string][]byte{"/img": file})
			st, err := os.Stat(tt.raw)
			require.NoError(t, err)
			dev := garbageFile(t, st.Size()+1<<20)
			w := &Writer{Opener: hardware.NewGuard(outside, []string{dev})}
			var reports int
			res, err := w.Write(context.Background(), Request{URL: srv.URL + "/img", Checksum: sha256sum(file), Device: dev},
				func(hardware.Progress) { reports++ })
			require.NoError(t, err)
			assert.Equal(t, "qcow2", res.Format)
			assert.Equal(t, sha256sum(file), res.Checksum)
			assert.Equal(t, int64(len(file)), res.BytesDownloaded)
			require.NotNil(t, res.Qcow2)
			assert.Equal(t, st.Size(), res.Qcow2.VirtualSize)
			if !tt.noHoles {
				assert.Positive(t, res.Qcow2.BytesZeroed, "the image has holes")
			}
			t.Logf("%d bytes, %+v", len(file), *res.Qcow2)
			if tt.compressed {
				assert.Positive(t, res.Qcow2.CompressedClusters)
			}
			assert.Equal(t, st.Size(), res.BytesWritten+res.Qcow2.BytesZeroed, "every guest byte written exactly once: %+v", res.Qcow2)
			assert.Positive(t, reports)
			sameAsRaw(t, tt.raw, dev)
		})
	}
}

// TestWriteQcow2ToLoopDevice zeroes holes with BLKZEROOUT on a real block
// device that held garbage, and auto-detects the format. With 512-byte
// clusters and data runs that start and end off 4 KiB boundaries, the
// writers mix O_DIRECT writes with buffered ones that drop the flag on
// the shared file while the other writer may be busy.
func TestWriteQcow2ToLoopDevice(t *testing.T) {
	testdev.Need(t, "qemu-img")
	dir := t.TempDir()
	tests := []struct {
		name string
		raw  string
		opts []string
	}{
		{"16K clusters, compressed", rawImage(t, dir, 20<<20), []string{"-c", "-o", "cluster_size=16k"}},
		{"512-byte clusters, unaligned runs", unalignedRuns(t, dir, 20<<20), []string{"-o", "cluster_size=512"}},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			file := convertQcow2(t, tt.raw, filepath.Join(dir, fmt.Sprintf("img%d.qcow2", i)), tt.opts...)
			dev := testdev.Loop(t, 21<<20, false)
			testdev.Fill(t, dev, 0, 21<<20, 0xCC)
			srv := serve(t, map[string][]byte{"/img": file})
			w := &Writer{Opener: hardware.NewGuard(outside, []string{dev})}
			res, err := w.Write(context.Background(), Request{URL: srv.URL + "/img", Checksum: sha512sum(file), Format: "auto", Device: dev}, nil)
			require.NoError(t, err)
			assert.Equal(t, "qcow2", res.Format)
			assert.Positive(t, res.Qcow2.BytesZeroed)
			sameAsRaw(t, tt.raw, dev)
		})
	}
}

// unalignedRuns writes a raw image of size bytes whose data runs start
// and end on 512-byte boundaries that are not 4 KiB ones, between whole
// 64 KiB stripes of random data and zeros.
func unalignedRuns(t testing.TB, dir string, size int64) string {
	t.Helper()
	img := make([]byte, size)
	const stripe = 64 << 10
	for off, i := int64(0), 0; off < size; off, i = off+stripe, i+1 {
		switch i % 3 {
		case 0:
			_, err := rand.Read(img[off : off+stripe])
			require.NoError(t, err)
		case 1:
			at := off + 512*int64(1+i%7)
			_, err := rand.Read(img[at : at+512*int64(1+i%13)])
			require.NoError(t, err)
		}
	}
	p := filepath.Join(dir, "unaligned.raw")
	require.NoError(t, os.WriteFile(p, img, 0o600))
	return p
}

// synthQcow2 builds a v3 qcow2 image by hand with one L2 table mapping
// len(data) clusters, either in qemu-img's order (L1, L2, data) or with
// the L2 table after the data and gap filler clusters in between.
func synthQcow2(cs int64, data [][]byte, l2First bool, gap int) []byte {
	be := binary.BigEndian
	n := int64(len(data))
	out := make([]byte, 2*cs) // header, L1
	copy(out, qcow2Magic)
	be.PutUint32(out[4:], 3)
	be.PutUint32(out[20:], uint32(bitsOf(cs)))
	be.PutUint64(out[24:], uint64(n*cs))
	be.PutUint32(out[36:], 1)
	be.PutUint64(out[40:], uint64(cs))
	be.PutUint32(out[96:], 4)
	be.PutUint32(out[100:], 104)
	l2 := make([]byte, cs)
	var l2At, dataAt int64
	if l2First {
		l2At, dataAt = 2*cs, 3*cs
	} else {
		dataAt, l2At = 2*cs, (2+n+int64(gap))*cs
	}
	be.PutUint64(out[cs:], uint64(l2At)|1<<63)
	for i := int64(0); i < n; i++ {
		be.PutUint64(l2[i*8:], uint64(dataAt+i*cs)|1<<63)
	}
	var body []byte
	for _, d := range data {
		body = append(body, d...)
	}
	if l2First {
		return append(append(out, l2...), body...)
	}
	out = append(out, body...)
	out = append(out, make([]byte, int64(gap)*cs)...)
	return append(out, l2...)
}

func bitsOf(cs int64) int {
	b := 0
	for int64(1)<<b < cs {
		b++
	}
	return b
}

func TestWriteQcow2StreamOrder(t *testing.T) {
	const cs = 4096
	data := make([][]byte, 8)
	var want []byte
	for i := range data {
		data[i] = randomImage(t, cs)
		want = append(want, data[i]...)
	}
	tests := []struct {
		name       string
		img        []byte
		wantErr    string
		lookBehind int64
	}{
		{"L2 before its data", synthQcow2(cs, data, true, 0), "", 0},
		{"L2 just after its data: look-behind window", synthQcow2(cs, data, false, 3), "", 8},
		{"L2 far after its data", synthQcow2(cs, data, false, lookBehind/cs+10), "not streamable", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := serve(t, map[string][]byte{"/img": tt.img})
			dev := target(t, 8*cs)
			w := &Writer{Opener: hardware.NewGuard(outside, []string{dev})}
			res, err := w.Write(context.Background(), Request{URL: srv.URL + "/img", Checksum: sha256sum(tt.img), Format: "qcow2", Device: dev}, nil)
			got, rerr := os.ReadFile(dev)
			require.NoError(t, rerr)
			if tt.wantErr != "" {
				var pe *protocol.Error
				require.ErrorAs(t, err, &pe)
				assert.Contains(t, pe.Message, tt.wantErr)
				assert.Contains(t, pe.Message, "qemu-img convert -O qcow2")
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.lookBehind, res.Qcow2.LookBehindClusters)
			assert.True(t, bytes.Equal(want, got))
		})
	}
}

func TestWriteQcow2Refuses(t *testing.T) {
	testdev.Need(t, "qemu-img")
	dir := t.TempDir()
	raw := rawImage(t, dir, 4<<20)
	base := filepath.Join(dir, "base.qcow2")
	qemuImg(t, "convert", "-O", "qcow2", raw, base)
	create := func(name string, args ...string) []byte {
		p := filepath.Join(dir, name)
		qemuImg(t, append(append([]string{"create", "-f", "qcow2"}, args...), p)...)
		b, err := os.ReadFile(p)
		require.NoError(t, err)
		return b
	}
	good, err := os.ReadFile(base)
	require.NoError(t, err)
	corrupt := bytes.Clone(good)
	binary.BigEndian.PutUint64(corrupt[72:], incompatCorrupt)
	unknown := bytes.Clone(good)
	binary.BigEndian.PutUint64(unknown[72:], 1<<9)
	// Encrypted images are made by hand: qemu-img's LUKS creation times
	// its key derivation and fails on a loaded machine.
	luks := bytes.Clone(good)
	binary.BigEndian.PutUint32(luks[32:], 2) // crypt_method LUKS
	cryptoExt := bytes.Clone(good)
	hlen := binary.BigEndian.Uint32(cryptoExt[100:])
	binary.BigEndian.PutUint32(cryptoExt[hlen:], extCrypto)
	binary.BigEndian.PutUint32(cryptoExt[hlen+4:], 16)
	binary.BigEndian.PutUint64(cryptoExt[hlen+8:], 0x30000)
	binary.BigEndian.PutUint64(cryptoExt[hlen+16:], 0x1000)
	binary.BigEndian.PutUint64(cryptoExt[hlen+24:], 0)
	files := map[string][]byte{
		"/backing":  create("overlay.qcow2", "-b", base, "-F", "qcow2", "-o", "size=4M"),
		"/luks":     luks,
		"/cryptext": cryptoExt,
		"/datafile": create("ext.qcow2", "-o", "data_file="+filepath.Join(dir, "ext.raw")+",size=4M"),
		"/extl2":    create("extl2.qcow2", "-o", "extended_l2=on,size=4M"),
		"/corrupt":  corrupt,
		"/unknown":  unknown,
		"/big":      create("big.qcow2", "-o", "size=64M"),
		"/trunc":    good[:len(good)-70000],
		"/good":     good,
	}
	srv := serve(t, files)
	tests := []struct {
		path, checksum, want string
		headWiped            bool
	}{
		{"/backing", "", "backing file", false},
		{"/luks", "", "encrypted (crypt_method 2)", false},
		{"/cryptext", "", "encrypted (LUKS header extension)", false},
		{"/datafile", "", "external data file", false},
		{"/extl2", "", "extended L2", false},
		{"/corrupt", "", "marked corrupt", false},
		{"/unknown", "", "bit 9", false},
		{"/big", "", "larger than", false},
		{"/trunc", "", "truncated qcow2 image", true},
		{"/good", sha256sum([]byte("something else")), "checksum mismatch", true},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			dev := target(t, 8<<20)
			sum := tt.checksum
			if sum == "" {
				sum = sha256sum(files[tt.path])
			}
			w := &Writer{Opener: hardware.NewGuard(outside, []string{dev})}
			_, err := w.Write(context.Background(), Request{URL: srv.URL + tt.path, Checksum: sum, Device: dev}, nil)
			failedCleanly(t, dev, err, protocol.ErrTypeImageWrite, tt.want, tt.headWiped)
		})
	}
}

// FuzzQcow2 feeds arbitrary bytes through the header parser and the
// streaming reader: it must never panic, never allocate beyond the input,
// and never write outside the virtual disk.
func FuzzQcow2(f *testing.F) {
	cs := int64(512)
	d := [][]byte{bytes.Repeat([]byte{1}, 512), bytes.Repeat([]byte{2}, 512)}
	f.Add(synthQcow2(cs, d, true, 0))
	f.Add(synthQcow2(cs, d, false, 1))
	f.Add(synthQcow2(4096, [][]byte{make([]byte, 4096)}, true, 0))
	if _, err := exec.LookPath("qemu-img"); err == nil {
		dir := f.TempDir()
		raw := filepath.Join(dir, "r.raw")
		b := bytes.Repeat([]byte("fuzz seed "), 6000)
		if err := os.WriteFile(raw, b, 0o600); err == nil {
			for i, opts := range [][]string{{"-o", "cluster_size=512"}, {"-c", "-o", "cluster_size=1024"}, {"-o", "compat=0.10,cluster_size=512"}} {
				img := filepath.Join(dir, fmt.Sprintf("s%d.qcow2", i))
				args := append(append([]string{"convert", "-f", "raw", "-O", "qcow2"}, opts...), raw, img)
				if exec.Command("qemu-img", args...).Run() == nil {
					if s, err := os.ReadFile(img); err == nil {
						f.Add(s)
					}
				}
			}
		}
	}
	f.Fuzz(runFuzzOne)
}

func runFuzzOne(t *testing.T, data []byte) {
	{
		h, err := parseQcow2Header(data)
		if err != nil || h.size > 64<<20 {
			return // Write refuses images larger than the device first
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		out := make(chan *block, 2)
		e := &emitter{ctx: ctx, pool: newPool(alignedHeap(2*int(max(64<<10, h.clusterSize))), int(max(64<<10, h.clusterSize))), out: out}
		q := newQcow2Stream(h, bytes.NewReader(data), e)
		done := make(chan error, 1)
		go func() {
			var bad error
			for b := range out {
				if bad == nil && (b.off < 0 || b.off+int64(b.n) > h.size) {
					bad = fmt.Errorf("write of %d bytes at %d outside the %d-byte disk", b.n, b.off, h.size)
				}
				b.release()
			}
			done <- bad
		}()
		_ = q.run()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		for _, z := range q.holes() {
			if z.off < 0 || z.n <= 0 || z.off+z.n > h.size {
				t.Fatalf("hole %+v outside the %d-byte disk", z, h.size)
			}
		}
	}
}
