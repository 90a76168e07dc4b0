package hardware

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"syscall"

	"github.com/anvil-metal/anvil/hardware/kmod"
	"github.com/anvil-metal/anvil/protocol"
)

// PCIDevices lists root/sys/bus/pci/devices with each function's bound
// driver. For unbound devices the modules of the running kernel whose
// aliases match the device's modalias are named (aliases may be nil), so an
// operator reading the inventory learns whether the image lacks a driver or
// one failed to load. The list is never nil: an empty list means "looked,
// found nothing", which the controller tells apart from an older agent that
// does not look.
func PCIDevices(root string, aliases *kmod.AliasTable) ([]protocol.PCIDevice, error) {
	dir := filepath.Join(root, "sys", "bus", "pci", "devices")
	entries, err := os.ReadDir(dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return []protocol.PCIDevice{}, nil // no PCI bus (some VMs, arm boards)
		}
		return []protocol.PCIDevice{}, fmt.Errorf("pci: %w", err)
	}
	out := make([]protocol.PCIDevice, 0, len(entries))
	for _, e := range entries {
		p := filepath.Join(dir, e.Name())
		d := protocol.PCIDevice{
			Address: e.Name(),
			Vendor:  hexID(readString(filepath.Join(p, "vendor"))),
			Device:  hexID(readString(filepath.Join(p, "device"))),
			Class:   hexID(readString(filepath.Join(p, "class"))),
		}
		if drv, err := filepath.EvalSymlinks(filepath.Join(p, "driver")); err == nil {
			d.Driver = filepath.Base(drv)
		}
		if d.Driver == "" {
			if alias := readString(filepath.Join(p, "modalias")); alias != "" {
				d.Modules = aliases.Match(alias)
			}
		}
		out = append(out, d)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Address < out[j].Address })
	return out, nil
}

// hexID turns sysfs's "0x8086" into lspci's "8086".
func hexID(s string) string { return strings.ToLower(strings.TrimPrefix(strings.TrimSpace(s), "0x")) }

// kernelAliases reads the running kernel's modules.alias under root; nil
// when there is none (modules are then not named).
func kernelAliases(root string) *kmod.AliasTable {
	release := readString(filepath.Join(root, "proc", "sys", "kernel", "osrelease"))
	if release == "" {
		return nil
	}
	f, err := os.Open(filepath.Join(root, "lib", "modules", release, "modules.alias"))
	if err != nil {
		return nil
	}
	defer f.Close()
	t, err := kmod.ParseAliases(f)
	if err != nil {
		return nil
	}
	return t
}

// The kernel's firmware loader says "Direct firmware load for X failed
// with error -2" (and, with the fallback, "firmware: failed to load X").
var firmwareRE = regexp.MustCompile(`(?:Direct firmware load for (\S+) failed|firmware: failed to load (\S+))`)

// FirmwareMissing names each firmware file the kernel log says could not
// be loaded, once, in order of first mention. Lines may be /dev/kmsg
// records ("6,339,5140900,-;text") or dmesg text.
func FirmwareMissing(r io.Reader) []string {
	var out []string
	seen := map[string]bool{}
	s := bufio.NewScanner(r)
	s.Buffer(make([]byte, 0, 8192), 1<<20)
	for s.Scan() {
		m := firmwareRE.FindStringSubmatch(s.Text())
		if m == nil {
			continue
		}
		name := m[1]
		if name == "" {
			name = m[2]
		}
		if !seen[name] {
			seen[name] = true
			out = append(out, name)
		}
	}
	return out
}

// kernelLog reads what the kernel log holds now from root/dev/kmsg without
// waiting for new records (a fixture root holds a plain file there).
// /dev/kmsg returns one record per read and EAGAIN at the end; EPIPE means
// records were overwritten while reading and reading goes on. Raw system
// calls, not os.File: Go would park a non-blocking read of a character
// device in its poller until the next kernel message.
func kernelLog(root string) []byte {
	fd, err := syscall.Open(filepath.Join(root, "dev", "kmsg"), syscall.O_RDONLY|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil
	}
	defer syscall.Close(fd)
	var buf bytes.Buffer
	rec := make([]byte, 8192)
	for buf.Len() < 8<<20 {
		n, err := syscall.Read(fd, rec)
		if errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil || n <= 0 {
			break
		}
		buf.Write(rec[:n])
		if rec[n-1] != '\n' {
			buf.WriteByte('\n')
		}
	}
	return buf.Bytes()
}
