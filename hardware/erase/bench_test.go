package erase

import (
	"context"
	"testing"
	"time"

	"github.com/anvil-metal/anvil/hardware"
	"github.com/anvil-metal/anvil/hardware/disk"
	"github.com/anvil-metal/anvil/hardware/internal/testdev"
)

// BenchmarkOverwriteErase measures the zero-overwrite method (O_DIRECT,
// large aligned buffers, including the sampled verification) on a loop
// device and, in the same run, dd if=/dev/zero bs=4M oflag=direct on the
// same device. Metrics: MB/s of ours, of dd, and the ratio (target >= 0.9).
func BenchmarkOverwriteErase(b *testing.B) {
	const size = 256 << 20
	dev := testdev.LoopDirect(b, size)
	guard := hardware.NewGuard(outside, []string{dev})
	l, err := disk.Discover(context.Background(), "/")
	if err != nil {
		b.Fatal(err)
	}
	d, ok := l.Find(dev)
	if !ok {
		b.Fatalf("%s not discovered", dev)
	}
	pol := DefaultPolicy()
	pol.Iterations, pol.AllowZeroOut = 0, false
	plans := Plan(context.Background(), []disk.Disk{d}, pol, nil, guard)
	e := &Eraser{Opener: guard}
	testdev.DDThroughput(b, dev, size) // warm up the backing file
	var ours, dd time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		res, err := e.Erase(context.Background(), plans, pol, nil)
		ours += time.Since(start)
		if err != nil || res.Devices[0].Method != MethodOverwrite {
			b.Fatalf("erase: %v %+v", err, res.Devices[0])
		}
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
}
