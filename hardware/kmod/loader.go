package kmod

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/u-root/u-root/pkg/kmodule"
	"golang.org/x/sys/unix"
)

// KernelLoader loads modules of the running kernel from
// /lib/modules/$(uname -r) (modules.dep, modules.builtin), with u-root's
// kmodule: dependencies first, in parallel, each file once, built-in and
// already loaded modules skipped. u-root knows no soft dependencies, so
// Load loads those first (pre) and after (post) itself, best effort.
type KernelLoader struct {
	prober   *kmodule.Prober
	deps     map[string][]string // module -> modules it depends on (modules.dep)
	paths    map[string]string   // module -> its file, relative to the module tree
	softdeps Softdeps
	aliases  *AliasTable
}

var _ Loader = (*KernelLoader)(nil)

// NewKernelLoader reads modules.dep, modules.softdep (optional) and
// /proc/modules of the kernel whose module tree is dir.
func NewKernelLoader(dir string, aliases *AliasTable) (*KernelLoader, error) {
	p, err := kmodule.NewProber(kmodule.ProbeOpts{})
	if err != nil {
		return nil, fmt.Errorf("kernel modules: %w", err)
	}
	dep, err := os.ReadFile(filepath.Join(dir, "modules.dep"))
	if err != nil {
		return nil, fmt.Errorf("kernel modules: %w", err)
	}
	k := &KernelLoader{prober: p, aliases: aliases, softdeps: Softdeps{}}
	k.deps, k.paths = parseModulesDep(string(dep))
	if f, err := os.Open(filepath.Join(dir, "modules.softdep")); err == nil {
		defer f.Close()
		if k.softdeps, err = ParseSoftdeps(f); err != nil {
			return nil, err
		}
	}
	return k, nil
}

// parseModulesDep reads modules.dep ("kernel/drivers/x/a.ko.zst: dep.ko
// ..."): each module's dependencies by name, and its file.
func parseModulesDep(dep string) (deps map[string][]string, paths map[string]string) {
	deps, paths = map[string][]string{}, map[string]string{}
	for _, line := range strings.Split(dep, "\n") {
		mod, rest, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		var names []string
		for _, d := range strings.Fields(rest) {
			names = append(names, moduleName(d))
		}
		name := moduleName(mod)
		deps[name], paths[name] = names, mod
	}
	return deps, paths
}

// StorageOnly reports whether module is a storage driver the network does
// not need: its file is under a storage class of the kernel tree (ATA,
// SCSI, NVMe, block, CD-ROM, md/dm, Fusion MPT, USB storage) and nothing
// it depends on is under the network's (drivers/net, net/, InfiniBand),
// which keeps iSCSI and FCoE offload drivers (bnx2i, qedf: storage on a
// NIC's silicon) with the NICs. Unknown and built-in modules are not.
func (k *KernelLoader) StorageOnly(module string) bool {
	module = NormalizeName(module)
	if !underAny(k.paths[module], "drivers/ata/", "drivers/scsi/", "drivers/nvme/", "drivers/block/",
		"drivers/cdrom/", "drivers/md/", "drivers/message/", "drivers/usb/storage/") {
		return false
	}
	for _, d := range k.deps[module] {
		if underAny(k.paths[d], "drivers/net/", "net/", "drivers/infiniband/") {
			return false
		}
	}
	return true
}

// underAny reports whether the modules.dep path p ("kernel/drivers/ata/
// ahci.ko", "updates/...") is under one of the trees, relative to its
// first component.
func underAny(p string, trees ...string) bool {
	_, rel, ok := strings.Cut(p, "/")
	if !ok {
		return false
	}
	for _, t := range trees {
		if strings.HasPrefix(rel, t) {
			return true
		}
	}
	return false
}

// moduleName is the module name of a modules.dep path.
func moduleName(p string) string {
	base := filepath.Base(p)
	if i := strings.Index(base, ".ko"); i >= 0 {
		base = base[:i]
	}
	return NormalizeName(base)
}

// Load implements Loader.
func (k *KernelLoader) Load(name string) error {
	name = NormalizeName(name)
	soft := func(pick func(Softdep) []string) {
		for _, m := range append([]string{name}, k.deps[name]...) {
			for _, s := range pick(k.softdeps[m]) {
				for _, r := range Resolve(s, k.known, k.aliases) {
					if r != name {
						_ = k.prober.Probe(r, "") // best effort: one of several (crc32c_intel, crc32c_generic) is enough
					}
				}
			}
		}
	}
	soft(func(d Softdep) []string { return d.Pre })
	if err := k.prober.Probe(name, ""); err != nil {
		return fmt.Errorf("load %s: %w", name, err)
	}
	soft(func(d Softdep) []string { return d.Post })
	return nil
}

func (k *KernelLoader) known(name string) bool {
	_, ok := k.deps[name]
	return ok
}

// ForRunningKernel is a Coldplug over /sys with the running
// kernel's modules.alias and KernelLoader.
func ForRunningKernel(log *slog.Logger) (*Coldplug, error) {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return nil, fmt.Errorf("uname: %w", err)
	}
	release := unix.ByteSliceToString(u.Release[:])
	dir := filepath.Join("/lib/modules", release)
	aliases, err := ReadAliases(filepath.Join(dir, "modules.alias"))
	if err != nil {
		return nil, err
	}
	loader, err := NewKernelLoader(dir, aliases)
	if err != nil {
		return nil, err
	}
	return &Coldplug{Sys: "/sys", Aliases: aliases, Loader: loader, Log: log}, nil
}

// LoadAny loads name if it is a module, else every module an alias of
// which matches it (what the kernel asks for: "md-level-1",
// "crypto-crc32c", "rtnl-link-vlan", "block-major-9-0"). It succeeds when
// at least one loads: of crc32c_intel and crc32c_generic, the first fails
// on CPUs without SSE4.2.
func (k *KernelLoader) LoadAny(name string) error {
	mods := Resolve(name, k.known, k.aliases)
	if len(mods) == 0 {
		return fmt.Errorf("no module and no alias %q", name)
	}
	var errs []error
	for _, m := range mods {
		if err := k.Load(m); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) == len(mods) {
		return errors.Join(errs...)
	}
	return nil
}

// Modprobe is the ramdisk's /sbin/modprobe, which the kernel runs (as
// "modprobe -q -- <name>") to load a module on demand: RAID personalities
// when mdadm creates an array, 8021q for a VLAN, crypto algorithms. It
// takes the first argument that is not an option as the name (module
// parameters after it are not supported) and loads it with LoadAny.
func Modprobe(args []string) error {
	name := ""
	for _, a := range args {
		if !strings.HasPrefix(a, "-") {
			name = a
			break
		}
	}
	if name == "" {
		return errors.New("usage: modprobe [-q] [--] <module or alias>")
	}
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return fmt.Errorf("uname: %w", err)
	}
	dir := filepath.Join("/lib/modules", unix.ByteSliceToString(u.Release[:]))
	aliases, err := ReadAliases(filepath.Join(dir, "modules.alias"))
	if err != nil {
		return err
	}
	k, err := NewKernelLoader(dir, aliases)
	if err != nil {
		return err
	}
	return k.LoadAny(name)
}
