// Command vmerase is the guest side of the NVMe erase VM test
// (image/nvme_vm_test.go): started in the agent ramdisk in place of the
// agent, it writes a pattern onto every NVMe namespace, plans and runs
// erase_devices on them with the agent's own code (NVMe Format through the
// admin ioctl, no fallback to overwriting, read-back verification) and
// prints the result as JSON on the console for the host to check.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"

	"github.com/anvil-metal/anvil/hardware"
	"github.com/anvil-metal/anvil/hardware/disk"
	"github.com/anvil-metal/anvil/hardware/erase"
)

// Markers the host looks for on the serial console.
const (
	resultMarker = "VMERASE-RESULT "
	errorMarker  = "VMERASE-ERROR "
)

// pattern is what the host must not find in the disk files afterwards.
const pattern = 0x5a

func main() {
	if err := run(context.Background()); err != nil {
		fmt.Println(errorMarker + err.Error())
	}
}

func run(ctx context.Context) error {
	env := hardware.DetectEnvironment("/proc", os.Getpid())
	if !env.InRamdisk {
		return fmt.Errorf("not in the ramdisk: %s", env.Evidence)
	}
	guard := hardware.NewGuard(env, nil)
	l, err := disk.Discover(ctx, "/")
	if err != nil {
		return err
	}
	var nvme []disk.Disk
	for _, d := range l.Disks {
		if d.Controller == "nvme" {
			nvme = append(nvme, d)
		}
	}
	if len(nvme) == 0 {
		return fmt.Errorf("no NVMe namespace found")
	}
	for _, d := range nvme {
		if err := fill(guard, d); err != nil {
			return err
		}
	}
	pol := erase.DefaultPolicy()
	pol.Iterations = 0 // the overwrite is not what this test is about
	plans := erase.Plan(ctx, nvme, pol, erase.SysProber{}, guard)
	res, err := (&erase.Eraser{Opener: guard, Prober: erase.SysProber{}}).Erase(ctx, plans, pol, nil)
	b, jerr := json.Marshal(res)
	if jerr != nil {
		return jerr
	}
	fmt.Println(resultMarker + string(b))
	return err
}

// fill writes the pattern at the start, middle and end of a namespace.
func fill(g *hardware.Guard, d disk.Disk) error {
	f, err := g.OpenForWrite(d.Path, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	for i := range buf {
		buf[i] = pattern
	}
	size := int64(d.Size)
	for _, off := range []int64{0, size/2 - 1<<19, size - 1<<20} {
		if _, err := f.WriteAt(buf, off); err != nil {
			return fmt.Errorf("fill %s at %d: %w", d.Path, off, err)
		}
	}
	return f.Sync()
}
