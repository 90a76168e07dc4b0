package testdev

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// DDThroughput writes size bytes of zeros to dev with
// dd if=/dev/zero of=dev bs=4M oflag=direct and returns MB/s (1e6 bytes),
// the yardstick the benchmarks compare against.
func DDThroughput(b *testing.B, dev string, size int64) float64 {
	b.Helper()
	Need(b, "dd")
	count := size / (4 << 20)
	start := time.Now()
	Run(b, "dd", "if=/dev/zero", "of="+dev, "bs=4M", "oflag=direct", "count="+itoa(count), "status=none")
	return float64(count*(4<<20)) / 1e6 / time.Since(start).Seconds()
}

// CompareWithDD runs op b.N times on dev, each run followed by dd writing
// the same number of bytes to the same device, and reports medians: MB/s
// of op and of dd, and ratio_vs_dd, the median of the per-pair ratios.
// Pairs, not totals: the backing storage of a VM drifts (dd alone was
// seen at 1.5 and 4.9 GB/s minutes apart on the same loop device), and a
// pair shares the moment. Only op is timed by the benchmark timer.
func CompareWithDD(b *testing.B, dev string, size int64, op func() error) {
	b.Helper()
	DDThroughput(b, dev, size) // warm up the backing file
	ours, dd, ratio := make([]float64, 0, b.N), make([]float64, 0, b.N), make([]float64, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		if err := op(); err != nil {
			b.Fatal(err)
		}
		o := float64(size) / 1e6 / time.Since(start).Seconds()
		b.StopTimer()
		d := DDThroughput(b, dev, size)
		b.StartTimer()
		ours, dd, ratio = append(ours, o), append(dd, d), append(ratio, o/d)
	}
	b.StopTimer()
	b.SetBytes(size)
	b.ReportMetric(median(ours), "MB/s")
	b.ReportMetric(median(dd), "dd_MB/s")
	b.ReportMetric(median(ratio), "ratio_vs_dd")
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// Speed is a device the benchmarks compare on: the loop device as it is
// (this VM's storage, 1.5-4.9 GB/s with dd), or capped like a real disk.
type Speed struct {
	Name string
	BPS  int64 // write cap in bytes/s; 0: none
}

// Speeds are the devices every benchmark runs on: "fast" and "1GBps", a
// disk slower than the CPU's sha256, as most real disks are.
func Speeds() []Speed { return []Speed{{"fast", 0}, {"1GBps", 1e9}} }

// Loop attaches a direct-I/O loop device of size bytes at this speed.
func (s Speed) Loop(t testing.TB, size int64) string {
	t.Helper()
	dev := LoopDirect(t, size)
	if s.BPS > 0 {
		Throttle(t, dev, s.BPS)
	}
	return dev
}

// blkioWriteBPS is the cgroup v1 blk-throttle rule file of the root
// group: a rule there limits one device for every process.
const blkioWriteBPS = "/sys/fs/cgroup/blkio/blkio.throttle.write_bps_device"

// Throttle caps writes to dev (a device the test created) at bps bytes
// per second with blk-throttle, so it behaves like a disk of that speed:
// the benchmarks use it for a device slower than the CPU's hash, as most
// real disks are. Skips without a cgroup v1 blkio hierarchy. The rule is
// removed at cleanup; a rule a killed test left behind is cleared when a
// loop device with that number is created again (clearThrottle).
func Throttle(t testing.TB, dev string, bps int64) {
	t.Helper()
	rule, err := throttleRule(dev)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(blkioWriteBPS); err != nil {
		t.Skipf("cannot throttle %s: no cgroup v1 blkio throttle (%v)", dev, err)
	}
	if err := os.WriteFile(blkioWriteBPS, []byte(rule+" "+strconv.FormatInt(bps, 10)), 0); err != nil {
		t.Skipf("cannot throttle %s: %v", dev, err)
	}
	t.Cleanup(func() { clearThrottle(dev) })
}

// clearThrottle removes any write limit on dev; best effort (no blkio
// hierarchy means no rule).
func clearThrottle(dev string) {
	if rule, err := throttleRule(dev); err == nil {
		_ = os.WriteFile(blkioWriteBPS, []byte(rule+" 0"), 0)
	}
}

// throttleRule is dev's "major:minor".
func throttleRule(dev string) (string, error) {
	var st unix.Stat_t
	if err := unix.Stat(dev, &st); err != nil {
		return "", fmt.Errorf("stat %s: %w", dev, err)
	}
	return fmt.Sprintf("%d:%d", unix.Major(st.Rdev), unix.Minor(st.Rdev)), nil
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
