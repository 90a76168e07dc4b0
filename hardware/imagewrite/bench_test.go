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

// BenchmarkWriteImage streams an image over HTTP (httptest, loopback) to a
// loop device (--direct-io, fully allocated backing file) and compares
// with dd if=/dev/zero bs=4M oflag=direct to the same device, alternating
// in the same run:
//
//   - raw: the step as it runs, sha256 verified while writing;
//   - raw-nochecksum: the pipeline without the hash (measurement only; the
//     step always verifies), showing what the hash costs;
//   - qcow2: a qemu-img image of the same random data, sha256 verified.
//
// sha256_MB/s is the hash alone over the same bytes on this CPU: with the
// checksum on, the write cannot beat it (the digest is sequential).
func BenchmarkWriteImage(b *testing.B) {
	const size = 256 << 20
	img := randomImage(b, size)
	qcow := qcow2Of(b, img)
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
		b.Run(tt.name, func(b *testing.B) {
			if tt.file == nil {
				b.Skip("qemu-img not installed")
			}
			dev := testdev.LoopDirect(b, size)
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Length", strconv.Itoa(len(tt.file)))
				w.Write(tt.file)
			}))
			defer srv.Close()
			w := &Writer{Opener: hardware.NewGuard(outside, []string{dev}), skipChecksum: tt.skipChecksum}
			req := Request{URL: srv.URL, Checksum: sha256sum(tt.file), Format: tt.format, Device: dev}
			testdev.DDThroughput(b, dev, size)
			var ours, dd time.Duration
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				start := time.Now()
				if _, err := w.Write(context.Background(), req, nil); err != nil {
					b.Fatal(err)
				}
				ours += time.Since(start)
				b.StopTimer()
				mbps := testdev.DDThroughput(b, dev, size)
				dd += time.Duration(float64(size) / 1e6 / mbps * float64(time.Second))
				b.StartTimer()
			}
			b.StopTimer()
			b.SetBytes(size)
			oursMBps := float64(size) * float64(b.N) / 1e6 / ours.Seconds()
			ddMBps := float64(size) * float64(b.N) / 1e6 / dd.Seconds()
			start := time.Now()
			h := sha256.New()
			h.Write(tt.file)
			shaMBps := float64(len(tt.file)) / 1e6 / time.Since(start).Seconds()
			b.ReportMetric(oursMBps, "MB/s")
			b.ReportMetric(ddMBps, "dd_MB/s")
			b.ReportMetric(oursMBps/ddMBps, "ratio_vs_dd")
			b.ReportMetric(shaMBps, "sha256_MB/s")
		})
	}
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
