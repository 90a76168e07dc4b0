package hardware

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"

	"github.com/anvil-metal/anvil/hardware/disk"
	"github.com/anvil-metal/anvil/protocol"
	"github.com/jaypipes/ghw"
)

// Inventory builds the node's inventory from root ("/" on the node): CPU,
// memory and NICs through ghw (chrooted to root), disks and md arrays from
// our own sysfs reads, since ghw cannot see model/serial without udev nor md
// membership at all. Parts ghw cannot read are left empty rather than failing
// the whole inventory: an inventory with no CPU model is still useful for
// lookup, and the failures are listed under Extra["errors"].
func Inventory(ctx context.Context, root string) (protocol.Inventory, error) {
	inv := protocol.Inventory{}
	var problems []string
	opts := []any{ghw.WithChroot(root), ghw.WithDisableWarnings(), ghw.WithDisableTools()}

	if cpu, err := ghw.CPU(opts...); err != nil {
		problems = append(problems, fmt.Sprintf("cpu: %v", err))
	} else {
		inv.CPU.Count = int(cpu.TotalHardwareThreads)
		for _, p := range cpu.Processors {
			if p.Model != "" {
				inv.CPU.ModelName = protocol.CleanString(p.Model)
				break
			}
		}
	}
	inv.CPU.Architecture = unameArch(runtime.GOARCH)
	if inv.CPU.ModelName == "" {
		inv.CPU.ModelName = cpuModelFromCPUInfo(filepath.Join(root, "proc", "cpuinfo"))
	}
	if mem, err := ghw.Memory(opts...); err != nil {
		problems = append(problems, fmt.Sprintf("memory: %v", err))
	} else {
		if mem.TotalUsableBytes > 0 {
			inv.Memory.Total = uint64(mem.TotalUsableBytes)
		}
		if mem.TotalPhysicalBytes > 0 {
			inv.Memory.PhysicalMB = uint64(mem.TotalPhysicalBytes) >> 20
		}
	}
	if nw, err := ghw.Network(opts...); err != nil {
		problems = append(problems, fmt.Sprintf("network: %v", err))
	} else {
		for _, n := range nw.NICs {
			if n.IsVirtual {
				continue
			}
			nic := protocol.NIC{Name: n.Name, MACAddress: n.MACAddress}
			dir := filepath.Join(root, "sys", "class", "net", n.Name)
			nic.HasCarrier = readString(filepath.Join(dir, "carrier")) == "1"
			if s, err := strconv.Atoi(readString(filepath.Join(dir, "speed"))); err == nil && s > 0 {
				nic.SpeedMbps = s
			}
			if drv, err := filepath.EvalSymlinks(filepath.Join(dir, "device", "driver")); err == nil {
				nic.Driver = filepath.Base(drv)
			}
			inv.Interfaces = append(inv.Interfaces, nic)
		}
	}
	layout, err := disk.Discover(ctx, root)
	if err != nil {
		return inv, fmt.Errorf("inventory: %w", err)
	}
	for _, d := range layout.Disks {
		if d.MD != nil {
			inv.RAIDArrays = append(inv.RAIDArrays, protocol.RAIDArray{
				Name: d.Name, Level: d.MD.Level, Size: d.Size, Members: d.MD.Members, State: d.MD.ArrayState,
			})
		}
		inv.Disks = append(inv.Disks, d.ToProtocol())
	}
	pci, err := PCIDevices(root, kernelAliases(root))
	if err != nil {
		problems = append(problems, err.Error())
	}
	inv.PCI = pci
	inv.FirmwareMissing = FirmwareMissing(bytes.NewReader(kernelLog(root)))
	inv.SystemVendor = protocol.SystemVendor{
		Manufacturer: readString(filepath.Join(root, "sys", "class", "dmi", "id", "sys_vendor")),
		ProductName:  readString(filepath.Join(root, "sys", "class", "dmi", "id", "product_name")),
		SerialNumber: readString(filepath.Join(root, "sys", "class", "dmi", "id", "product_serial")),
	}
	inv.Boot.CurrentBootMode = "bios"
	if _, err := os.Stat(filepath.Join(root, "sys", "firmware", "efi")); err == nil {
		inv.Boot.CurrentBootMode = "uefi"
	}
	if len(problems) > 0 {
		inv.Extra = map[string]any{"errors": problems}
	}
	return inv, nil
}

func cpuModelFromCPUInfo(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(protocol.CleanString(v))
		}
	}
	return ""
}

// unameArch maps Go's architecture names to the uname -m names IPA reports.
func unameArch(goarch string) string {
	switch goarch {
	case "amd64":
		return "x86_64"
	case "arm64":
		return "aarch64"
	case "386":
		return "i686"
	}
	return goarch
}

// readString reads a sysfs attribute as the inventory reports it: DMI
// strings of odd firmware can hold NULs and bytes that are not UTF-8,
// which the controller refuses to store, so they are cleaned here.
func readString(p string) string {
	b, err := os.ReadFile(p)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(protocol.CleanString(string(b)))
}
