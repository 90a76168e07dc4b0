package image

import (
	"bufio"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
)

// DefaultModules are the kernel modules the agent may need that a
// distribution kernel builds as modules: NICs, storage controllers, md RAID
// and the virtio RNG (without an entropy source u-root's dhclient blocks
// under QEMU). Names missing from a kernel are reported, not fatal.
func DefaultModules() []string {
	return []string{
		// NICs
		"virtio_pci", "virtio_net", "e1000e", "igb", "ixgbe", "i40e", "mlx5_core",
		// storage: controllers, and the disk drivers on top (nvme is built
		// into the cloud kernel, a module in the generic one; sd_mod gives
		// SATA/SAS/SCSI controllers their /dev/sdX)
		"nvme", "ahci", "virtio_blk", "virtio_scsi", "megaraid_sas", "mpt3sas", "sd_mod",
		// software RAID
		"md_mod", "raid0", "raid1", "raid10",
		// entropy
		"virtio_rng",
	}
}

// ModuleSet is a dependency-closed subset of a kernel's modules, laid out
// the way u-root's init loads them: the .ko files under
// lib/modules/<release>/kernel/..., a modules.dep for just those, and the
// wanted names in lib/modules-load.d/anvil.conf. No .ko sits directly in
// lib/modules/ (u-root's init would then load only those, unordered, and
// ignore modules-load.d).
type ModuleSet struct {
	Release string
	// Load are the requested modules present in the kernel, in request
	// order: the contents of modules-load.d.
	Load []string
	// Builtin are requested modules compiled into the kernel.
	Builtin []string
	// Missing are requested modules the kernel has neither as module nor
	// built in.
	Missing []string
	// Files are the .ko paths relative to lib/modules/<release>, sorted.
	Files []string
	// Dep is the modules.dep for Files.
	Dep []byte
	// dir is the kernel's lib/modules/<release>.
	dir string
}

// normalizeModule maps a module or file name to the kernel's module name
// (dashes and underscores are interchangeable).
func normalizeModule(name string) string {
	name = path.Base(name)
	name = strings.TrimSuffix(name, ".ko")
	return strings.ReplaceAll(name, "-", "_")
}

// ResolveModules reads modulesDir/modules.dep (and modules.builtin) and
// returns wanted plus everything it depends on.
func ResolveModules(modulesDir, release string, wanted []string) (ModuleSet, error) {
	set := ModuleSet{Release: release, dir: modulesDir}
	deps, order, err := readModulesDep(filepath.Join(modulesDir, "modules.dep"))
	if err != nil {
		return set, err
	}
	builtin := map[string]bool{}
	if f, err := os.Open(filepath.Join(modulesDir, "modules.builtin")); err == nil {
		s := bufio.NewScanner(f)
		for s.Scan() {
			builtin[normalizeModule(s.Text())] = true
		}
		f.Close()
	}
	byName := map[string]string{} // module name -> path
	for _, p := range order {
		byName[normalizeModule(p)] = p
	}
	files := map[string]bool{}
	for _, w := range wanted {
		n := normalizeModule(w)
		p, ok := byName[n]
		switch {
		case ok:
			set.Load = append(set.Load, n)
			files[p] = true
			for _, d := range deps[p] {
				files[d] = true
			}
		case builtin[n]:
			set.Builtin = append(set.Builtin, n)
		default:
			set.Missing = append(set.Missing, n)
		}
	}
	for p := range files {
		set.Files = append(set.Files, p)
	}
	sort.Strings(set.Files)
	var dep strings.Builder
	for _, p := range order { // keep depmod's order
		if files[p] {
			fmt.Fprintf(&dep, "%s:", p)
			for _, d := range deps[p] {
				fmt.Fprintf(&dep, " %s", d)
			}
			dep.WriteString("\n")
		}
	}
	set.Dep = []byte(dep.String())
	return set, nil
}

// readModulesDep parses modules.dep: "path: dep1 dep2 ...", with the
// dependencies already transitive (depmod writes the full closure).
func readModulesDep(file string) (map[string][]string, []string, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, nil, fmt.Errorf("modules.dep: %w", err)
	}
	defer f.Close()
	deps := map[string][]string{}
	var order []string
	s := bufio.NewScanner(f)
	s.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for s.Scan() {
		mod, rest, ok := strings.Cut(s.Text(), ":")
		if !ok {
			continue
		}
		deps[mod] = strings.Fields(rest)
		order = append(order, mod)
	}
	if err := s.Err(); err != nil {
		return nil, nil, fmt.Errorf("modules.dep: %w", err)
	}
	return deps, order, nil
}

// LoadConf is the modules-load.d file listing the modules to load at boot.
func (m ModuleSet) LoadConf() []byte {
	var b strings.Builder
	b.WriteString("# Loaded by u-root's init at boot (written by anvil-image).\n")
	for _, n := range m.Load {
		b.WriteString(n + "\n")
	}
	return []byte(b.String())
}

// Size is the total size of the module files.
func (m ModuleSet) Size() (int64, error) {
	var total int64
	for _, f := range m.Files {
		st, err := os.Stat(filepath.Join(m.dir, f))
		if err != nil {
			return 0, fmt.Errorf("module %s: %w", f, err)
		}
		total += st.Size()
	}
	return total, nil
}
