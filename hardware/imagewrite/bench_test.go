package imagewrite

import (
	"context"
	"crypto/sha256"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/anvil-metal/anvil/hardware"
	"github.com/anvil-metal/anvil/hardware/internal/testdev"
)

// BenchmarkWriteImage streams a 256 MiB image over HTTP (httptest,
// loopback) to a loop device (--direct-io, fully allocated backing file)
// and compares with dd if=/dev/zero bs=4M oflag=direct to the same device,
// in pairs (testdev.CompareWithDD):
//
//   - raw: the step as it runs, sha256 verified while writing;
//   - raw-nochecksum: the pipeline without the hash (measurement only; the
//     step always verifies), showing what the hash costs;
//   - qcow2: a qemu-img image of the same random data, sha256 verified.
//
// Each on testdev.Speeds(): "fast", the loop device as it is, and
// "1GBps", capped like a disk slower than the hash, as most real ones are.
// With the checksum on, a write cannot beat the hash alone (sha256_MB/s,
// measured over the same bytes: the digest is sequential), so on the
// fast device ratio_vs_dd is bounded by sha256_MB/s / dd_MB/s; on the
// slower one it shows whether the stages overlap.
//
// One Writer serves every iteration, as the agent keeps one: the first,
// cold write pays the page faults of its buffers and is reported apart
// (cold_MB/s).
func BenchmarkWriteImage(b *testing.B) {
	const size = 256 << 20
	img := randomImage(b, size)
	qcow := qcow2Of(b, img)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f := img
		if r.URL.Path == "/qcow2" {
			f = qcow
		}
		w.Header().Set("Content-Length", strconv.Itoa(len(f)))
		w.Write(f)
	}))
	defer srv.Close()
	tests := []struct {
		name, format string
		file         []byte
		skipChecksum bool
	}{
		{"raw", "raw", img, false},
		{"raw-nochecksum", "raw", img, true},
		{"qcow2", "qcow2", qcow, false},
	}
	for _, tt := range tests {
		for _, speed := range testdev.Speeds() {
			b.Run(tt.name+"/"+speed.Name, func(b *testing.B) {
				if tt.file == nil {
					b.Skip("qemu-img not installed")
				}
				dev := speed.Loop(b, size)
				w := &Writer{Opener: hardware.NewGuard(outside, []string{dev}), skipChecksum: tt.skipChecksum}
				req := Request{URL: srv.URL + "/" + tt.format, Checksum: sha256sum(tt.file), Format: tt.format, Device: dev}
				start := time.Now()
				if _, err := w.Write(context.Background(), req, nil); err != nil {
					b.Fatal(err)
				}
				cold := float64(size) / 1e6 / time.Since(start).Seconds()
				testdev.CompareWithDD(b, dev, size, func() error {
					_, err := w.Write(context.Background(), req, nil)
					return err
				})
				b.ReportMetric(cold, "cold_MB/s")
				b.ReportMetric(sha256MBps(tt.file), "sha256_MB/s")
			})
		}
	}
}

// sha256MBps is the hash alone over b: the bound of a verified write.
func sha256MBps(b []byte) float64 {
	start := time.Now()
	sha256.Sum256(b)
	return float64(len(b)) / 1e6 / time.Since(start).Seconds()
}

// qcow2Of converts a raw image with qemu-img (nil without qemu-img).
func qcow2Of(b *testing.B, raw []byte) []byte {
	if _, err := exec.LookPath("qemu-img"); err != nil {
		return nil
	}
	dir := b.TempDir()
	in, out := filepath.Join(dir, "in.raw"), filepath.Join(dir, "out.qcow2")
	if err := os.WriteFile(in, raw, 0o600); err != nil {
		b.Fatal(err)
	}
	qemuImg(b, "convert", "-f", "raw", "-O", "qcow2", in, out)
	q, err := os.ReadFile(out)
	if err != nil {
		b.Fatal(err)
	}
	return q
}

// BenchmarkSHA256 is the checksum alone, the bound of a verified write.
func BenchmarkSHA256(b *testing.B) {
	buf := make([]byte, chunk)
	h := sha256.New()
	b.SetBytes(chunk)
	for i := 0; i < b.N; i++ {
		h.Write(buf)
	}
}
