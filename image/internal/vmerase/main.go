// Command vmerase is the guest side of the erase VM tests
// (image/nvme_vm_test.go): started in the agent ramdisk in place of the
// agent, it writes a pattern onto the NVMe namespaces, plans and runs
// erase_devices on them with the agent's own code and prints the result as
// JSON on the console for the host to check. Without arguments it erases
// the namespaces themselves (NVMe Format through the admin ioctl, no
// fallback to overwriting); with "raid" it first partitions them (a small
// partition outside the array, then a member), builds a RAID1 over the
// members with mdadm, fills the array and the other partitions, and erases
// whatever the plan makes of that layout.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"

	"github.com/anvil-metal/anvil/hardware"
	"github.com/anvil-metal/anvil/hardware/disk"
	"github.com/anvil-metal/anvil/hardware/erase"
	"github.com/anvil-metal/anvil/hardware/partition"
)

// Markers the host looks for on the serial console.
const (
	resultMarker = "VMERASE-RESULT "
	errorMarker  = "VMERASE-ERROR "
)

// pattern is what the host must not find in the disk files afterwards.
const pattern = 0x5a

func main() {
	run := run
	if len(os.Args) > 1 && os.Args[1] == "raid" {
		run = runRAID
	}
	if err := run(context.Background()); err != nil {
		fmt.Println(errorMarker + err.Error())
	}
}

// ramdisk returns the guard of the ramdisk (every disk) and the disks.
func ramdisk(ctx context.Context) (*hardware.Guard, *disk.Layout, error) {
	env := hardware.DetectEnvironment("/proc", os.Getpid())
	if !env.InRamdisk {
		return nil, nil, fmt.Errorf("not in the ramdisk: %s", env.Evidence)
	}
	l, err := disk.Discover(ctx, "/")
	if err != nil {
		return nil, nil, err
	}
	return hardware.NewGuard(env, nil), l, nil
}

// eraseAndReport plans and runs erase_devices on disks (a single zero
// pass: the overwrite is not what these tests are about) and prints the
// result for the host.
func eraseAndReport(ctx context.Context, guard *hardware.Guard, disks []disk.Disk) error {
	pol := erase.DefaultPolicy()
	pol.Iterations = 0
	plans := erase.Plan(ctx, disks, pol, erase.SysProber{}, guard)
	res, err := (&erase.Eraser{Opener: guard, Prober: erase.SysProber{}}).Erase(ctx, plans, pol, nil)
	b, jerr := json.Marshal(res)
	if jerr != nil {
		return jerr
	}
	fmt.Println(resultMarker + string(b))
	return err
}

func run(ctx context.Context) error {
	guard, l, err := ramdisk(ctx)
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
		size := int64(d.Size)
		if err := fill(guard, d.Path, []int64{0, size/2 - 1<<19, size - 1<<20}, size); err != nil {
			return err
		}
	}
	return eraseAndReport(ctx, guard, nvme)
}

// espSize is the partition each disk keeps outside the array.
const espSize = 8 << 20

func runRAID(ctx context.Context) error {
	guard, l, err := ramdisk(ctx)
	if err != nil {
		return err
	}
	var members []string
	for _, d := range l.Disks {
		if d.Controller != "nvme" {
			continue
		}
		f, err := guard.OpenForWrite(d.Path, 0)
		if err != nil {
			return err
		}
		lay, err := partition.WriteGPT(f, d.Size, d.LogicalBlockSize, []partition.Part{
			{Name: "esp", Size: espSize, Type: partition.TypeEFISystem},
			{Name: "member", Type: partition.TypeLinuxRAID},
		})
		if err == nil {
			err = partition.Activate(f, lay)
		}
		f.Close()
		if err != nil {
			return fmt.Errorf("partition %s: %w", d.Path, err)
		}
		members = append(members, d.Path+"p2")
	}
	if len(members) != 2 {
		return fmt.Errorf("want 2 NVMe namespaces, found %d", len(members))
	}
	args := append([]string{"--create", "/dev/md0", "--level=1", "--raid-devices=2", "--metadata=1.2", "--run", "--assume-clean"}, members...)
	if out, err := exec.CommandContext(ctx, "mdadm", args...).CombinedOutput(); err != nil {
		return fmt.Errorf("mdadm %v: %w: %s", args, err, out)
	}
	if _, l, err = ramdisk(ctx); err != nil {
		return err
	}
	for _, d := range l.Disks {
		switch {
		case d.Controller == "md":
			if err := fillAll(guard, d.Path, int64(d.Size)); err != nil {
				return err
			}
		case d.Controller == "nvme":
			for _, p := range d.Partitions {
				if p.Number == 1 {
					if err := fillAll(guard, p.Path, int64(p.Size)); err != nil {
						return err
					}
				}
			}
		}
	}
	return eraseAndReport(ctx, guard, l.Disks)
}

// fillAll writes the pattern over the whole device.
func fillAll(g *hardware.Guard, path string, size int64) error {
	var offs []int64
	for off := int64(0); off < size; off += 1 << 20 {
		offs = append(offs, off)
	}
	return fill(g, path, offs, size)
}

// fill writes 1 MiB of the pattern at each offset, none past size.
func fill(g *hardware.Guard, path string, offs []int64, size int64) error {
	f, err := g.OpenForWrite(path, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	for i := range buf {
		buf[i] = pattern
	}
	for _, off := range offs {
		n := min(int64(len(buf)), size-off)
		if _, err := f.WriteAt(buf[:n], off); err != nil {
			return fmt.Errorf("fill %s at %d: %w", path, off, err)
		}
	}
	return f.Sync()
}
