package imagewrite

import (
	"context"
	"crypto/sha256"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/anvil-metal/anvil/hardware"
	"github.com/anvil-metal/anvil/hardware/internal/testdev"
)

// BenchmarkWriteImage streams a raw image over HTTP (httptest, loopback) to
// a loop device with sha256 verification and compares with dd
// if=/dev/zero bs=4M oflag=direct to the same device in the same run.
func BenchmarkWriteImage(b *testing.B) {
	const size = 256 << 20
	dev := testdev.LoopDirect(b, size)
	img := randomImage(b, size)
	sum := sha256sum(img)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(len(img)))
		w.Write(img)
	}))
	defer srv.Close()
	w := &Writer{Opener: hardware.NewGuard(outside, []string{dev})}
	testdev.DDThroughput(b, dev, size)
	var ours, dd time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		if _, err := w.Write(context.Background(), Request{URL: srv.URL, Checksum: sum, Format: "raw", Device: dev}, nil); err != nil {
			b.Fatal(err)
		}
		ours += time.Since(start)
		b.StopTimer()
		mbps := testdev.DDThroughput(b, dev, size)
		dd += time.Duration(float64(size) / 1e6 / mbps * float64(time.Second))
		b.StartTimer()
	}
	b.SetBytes(size)
	oursMBps := float64(size) * float64(b.N) / 1e6 / ours.Seconds()
	ddMBps := float64(size) * float64(b.N) / 1e6 / dd.Seconds()
	b.ReportMetric(oursMBps, "MB/s")
	b.ReportMetric(ddMBps, "dd_MB/s")
	b.ReportMetric(oursMBps/ddMBps, "ratio_vs_dd")
	// The checksum bounds the pipeline: sha256 is sequential, and on this
	// CPU it is slower than the device. Report it so the ratio can be read.
	start := time.Now()
	h := sha256.New()
	h.Write(img)
	shaMBps := float64(size) / 1e6 / time.Since(start).Seconds()
	b.ReportMetric(shaMBps, "sha256_MB/s")
	b.ReportMetric(oursMBps/min(ddMBps, shaMBps), "ratio_vs_bound")
}
