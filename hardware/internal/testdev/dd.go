package testdev

import (
	"testing"
	"time"
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

func itoa(n int64) string {
	if n == 0 {
		return "0"
	}
	var b []byte
	for n > 0 {
		b = append([]byte{byte('0' + n%10)}, b...)
		n /= 10
	}
	return string(b)
}
