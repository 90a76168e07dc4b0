package erase

import (
	"context"
	"fmt"
	"testing"

	"github.com/anvil-metal/anvil/hardware"
	"github.com/anvil-metal/anvil/hardware/disk"
	"github.com/anvil-metal/anvil/hardware/internal/testdev"
)

// BenchmarkOverwriteErase measures the zero-overwrite method (O_DIRECT,
// large aligned buffers, including the sampled verification) on a loop
// device and, in pairs, dd if=/dev/zero bs=4M oflag=direct on the same
// device (testdev.CompareWithDD), on each of testdev.Speeds(). Metrics:
// median MB/s of ours and of dd, and the median ratio (target >= 0.9).
func BenchmarkOverwriteErase(b *testing.B) {
	const size = 256 << 20
	for _, speed := range testdev.Speeds() {
		b.Run(speed.Name, func(b *testing.B) {
			dev := speed.Loop(b, size)
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
			testdev.CompareWithDD(b, dev, size, func() error {
				res, err := e.Erase(context.Background(), plans, pol, nil)
				if err != nil {
					return err
				}
				if m := res.Devices[0].Method; m != MethodOverwrite {
					return fmt.Errorf("erased with %s, want %s", m, MethodOverwrite)
				}
				return nil
			})
		})
	}
}
