package image

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"

	"github.com/anvil-metal/anvil/hardware/kmod"
)

// ModuleClass is a group of kernel modules a provisioning ramdisk needs,
// chosen by where they sit in the kernel tree rather than by name, so a
// NIC or controller nobody thought of is still in the image. Entries of
// Include and Exclude are paths under kernel/: a directory ("drivers/ata/",
// trailing slash) or a module file without .ko ("drivers/ata/pata_*"
// style globs allowed). Exclude wins.
type ModuleClass struct {
	Name    string
	Doc     string
	Include []string
	Exclude []string
	// Load are loaded at boot by u-root's init whatever the hardware. The
	// default classes need none: devices' drivers are loaded by the
	// agent's coldplug, and what the kernel asks for (RAID personalities,
	// 8021q, crypto) by /sbin/modprobe, which is the agent.
	Load []string
}

// DefaultClasses are what a provisioning ramdisk needs on real servers.
// Left out everywhere: wireless, sound, GPU, media, Bluetooth. Left out
// within the classes, to stay inside the 20 MiB budget: hardware older
// than about 2010 (10/100 NICs, PATA, parallel SCSI, PCMCIA), SR-IOV
// virtual-function drivers (a bare-metal node sees the physical function)
// and Fibre Channel / iSCSI / FCoE initiators: cleaning must never see SAN
// LUNs, which belong to other machines too.
func DefaultClasses() []ModuleClass {
	return []ModuleClass{
		{
			Name: "ethernet",
			Doc:  "wired NICs (drivers/net/ethernet), their PHYs, virtio/Hyper-V/VMware NICs, 802.1Q VLANs, bonding",
			Include: []string{
				"drivers/net/ethernet/", "drivers/net/phy/", "drivers/net/mdio/", "drivers/net/pcs/",
				"drivers/net/virtio_net", "drivers/net/vmxnet3/", "drivers/net/hyperv/", "net/8021q/", "drivers/net/bonding/",
			},
			Exclude: []string{
				// 10/100, ISA/PCMCIA-era and long-gone vendors.
				"drivers/net/ethernet/3com/", "drivers/net/ethernet/8390/", "drivers/net/ethernet/adaptec/",
				"drivers/net/ethernet/agere/", "drivers/net/ethernet/alteon/", "drivers/net/ethernet/dec/",
				"drivers/net/ethernet/dlink/", "drivers/net/ethernet/fujitsu/", "drivers/net/ethernet/natsemi/",
				"drivers/net/ethernet/packetengines/", "drivers/net/ethernet/rdc/", "drivers/net/ethernet/silan/",
				"drivers/net/ethernet/sis/", "drivers/net/ethernet/smsc/", "drivers/net/ethernet/sun/",
				"drivers/net/ethernet/tehuti/", "drivers/net/ethernet/ti/", "drivers/net/ethernet/via/",
				"drivers/net/ethernet/xircom/", "drivers/net/ethernet/micrel/", "drivers/net/ethernet/neterion/",
				"drivers/net/ethernet/brocade/", "drivers/net/ethernet/cavium/", "drivers/net/ethernet/netronome/",
				"drivers/net/ethernet/stmicro/", "drivers/net/ethernet/myricom/",
				"drivers/net/ethernet/amd/amd8111e", "drivers/net/ethernet/amd/nmclan_cs",
				"drivers/net/ethernet/atheros/atl1", "drivers/net/ethernet/atheros/atl2",
				"drivers/net/ethernet/broadcom/b44", "drivers/net/ethernet/realtek/8139*",
				"drivers/net/ethernet/intel/e100", "drivers/net/ethernet/intel/ixgb/",
				"drivers/net/ethernet/chelsio/cxgb/", "drivers/net/ethernet/chelsio/cxgb3/",
				"drivers/net/ethernet/qlogic/netxen/", "drivers/net/ethernet/qlogic/qla3xxx",
				"drivers/net/ethernet/sfc/falcon/", "drivers/net/ethernet/sfc/siena/",
				// Virtual functions.
				"drivers/net/ethernet/intel/igbvf/", "drivers/net/ethernet/intel/ixgbevf/",
				"drivers/net/ethernet/intel/iavf/", "drivers/net/ethernet/chelsio/cxgb4vf/",
			},
		},
		{
			Name: "storage",
			Doc:  "NVMe, SATA/AHCI, SAS/RAID HBAs, virtio/Hyper-V/VMware disks, sd/sr/sg",
			Include: []string{
				"drivers/nvme/host/", "drivers/ata/", "drivers/scsi/", "drivers/block/virtio_blk", "drivers/cdrom/",
			},
			Exclude: []string{
				"drivers/ata/pata_*", "drivers/scsi/pcmcia/",
				// FC, FCoE and iSCSI initiators (see above).
				"drivers/scsi/lpfc/", "drivers/scsi/qla2xxx/", "drivers/scsi/qla4xxx/", "drivers/scsi/bfa/",
				"drivers/scsi/fnic/", "drivers/scsi/csiostor/", "drivers/scsi/qedf/", "drivers/scsi/qedi/",
				"drivers/scsi/bnx2fc/", "drivers/scsi/bnx2i/", "drivers/scsi/be2iscsi/", "drivers/scsi/cxgbi/",
				"drivers/scsi/fcoe/", "drivers/scsi/libfc/", "drivers/scsi/iscsi_tcp", "drivers/scsi/snic/",
				// Parallel SCSI, tape, changers, test drivers.
				"drivers/scsi/aic7xxx/", "drivers/scsi/sym53c8xx_2/", "drivers/scsi/advansys", "drivers/scsi/BusLogic",
				"drivers/scsi/a100u2w", "drivers/scsi/atp870u", "drivers/scsi/dc395x", "drivers/scsi/dmx3191d",
				"drivers/scsi/initio", "drivers/scsi/qla1280", "drivers/scsi/qlogicfas408", "drivers/scsi/am53c974",
				"drivers/scsi/esp_scsi", "drivers/scsi/wd719x", "drivers/scsi/3w-xxxx", "drivers/scsi/ips",
				"drivers/scsi/st", "drivers/scsi/ch", "drivers/scsi/scsi_debug", "drivers/scsi/xen-scsifront",
			},
		},
		{
			Name:    "virtio",
			Doc:     "virtio PCI transport and entropy source (QEMU/KVM; without entropy DHCP blocks)",
			Include: []string{"drivers/virtio/virtio_pci", "drivers/char/hw_random/virtio-rng"},
		},
		{
			Name:    "md",
			Doc:     "software RAID (md raid0/1/10/456, linear) and device mapper",
			Include: []string{"drivers/md/md-mod", "drivers/md/raid*", "drivers/md/linear", "drivers/md/dm-mod"},
		},
		{
			Name: "usb",
			Doc:  "USB host controllers, USB storage, USB keyboards (HID) for the console",
			Include: []string{
				"drivers/usb/host/", "drivers/usb/storage/", "drivers/usb/core/", "drivers/usb/common/",
				"drivers/hid/hid", "drivers/hid/hid-generic", "drivers/hid/usbhid/",
			},
			Exclude: []string{"drivers/usb/host/sl811*", "drivers/usb/host/u132-hcd"},
		},
		{
			Name: "ipmi",
			Doc:  "in-band IPMI (KCS/SMIC/BT system interface and /dev/ipmi0), for the agent to read the BMC's address",
			Include: []string{
				"drivers/char/ipmi/ipmi_msghandler", "drivers/char/ipmi/ipmi_devintf", "drivers/char/ipmi/ipmi_si",
			},
		},
	}
}

// ClassNames are the names of classes.
func ClassNames(classes []ModuleClass) []string {
	var out []string
	for _, c := range classes {
		out = append(out, c.Name)
	}
	return out
}

// ModuleSelection is what goes into the image: whole classes, plus or
// minus single modules by name.
type ModuleSelection struct {
	Classes []ModuleClass
	Add     []string // modules by name, with their dependencies
	Remove  []string // modules left out even if a class has them
}

// ModuleSet is a dependency-closed subset of a kernel's modules, laid out
// the way u-root's init and the agent's coldplug load them: the .ko files
// under lib/modules/<release>/kernel/..., a modules.dep and modules.alias
// for just those, and the always-loaded names in
// lib/modules-load.d/anvil.conf. No .ko sits directly in lib/modules/
// (u-root's init would then load only those, unordered, and ignore
// modules-load.d).
type ModuleSet struct {
	Release string
	// Load are modules loaded at boot whatever the hardware: the
	// modules-load.d contents.
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
	// Alias is the modules.alias for Files (the agent's coldplug reads it).
	Alias []byte
	// Softdep is the modules.softdep for Files.
	Softdep []byte
	// Classes describes what each class brought in.
	Classes []ClassInfo
	// dir is the kernel's lib/modules/<release>.
	dir string
}

// ClassInfo is one class's share of the image.
type ClassInfo struct {
	Name string `json:"name"`
	// Modules is how many modules the class selected itself; Files how
	// many files it needs with dependencies; Bytes their size
	// (uncompressed; a file needed by two classes counts in both).
	Modules int   `json:"modules"`
	Files   int   `json:"files"`
	Bytes   int64 `json:"bytes"`
	// Added are modules named by the operator (class "added" only).
	Added []string `json:"added,omitempty"`
}

// normalizeModule maps a module or file name to the kernel's module name
// (dashes and underscores are interchangeable).
func normalizeModule(name string) string {
	name = path.Base(name)
	name = strings.TrimSuffix(name, ".ko")
	return strings.ReplaceAll(name, "-", "_")
}

// classMatch reports whether module file p ("kernel/drivers/...ko")
// matches a class entry.
func classMatch(entry, p string) bool {
	rel := strings.TrimPrefix(p, "kernel/")
	if strings.HasSuffix(entry, "/") {
		return strings.HasPrefix(rel, entry)
	}
	ok, _ := path.Match(entry, strings.TrimSuffix(rel, ".ko"))
	return ok
}

func (c ModuleClass) has(p string) bool {
	in := false
	for _, e := range c.Include {
		if classMatch(e, p) {
			in = true
			break
		}
	}
	if !in {
		return false
	}
	for _, e := range c.Exclude {
		if classMatch(e, p) {
			return false
		}
	}
	return true
}

// ResolveModules reads modulesDir's modules.dep, modules.builtin and
// modules.alias and returns the selected modules plus everything they
// depend on.
func ResolveModules(modulesDir, release string, sel ModuleSelection) (ModuleSet, error) {
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
	removed := map[string]bool{}
	for _, r := range sel.Remove {
		removed[normalizeModule(r)] = true
	}
	files := map[string]bool{}
	closure := func(p string, into map[string]bool) {
		into[p] = true
		for _, d := range deps[p] {
			into[d] = true
		}
	}
	// addClass records a class with the files it brings (own) and adds
	// them to the image's.
	addClass := func(info ClassInfo, own map[string]bool) error {
		for p := range own {
			files[p] = true
		}
		info.Files = len(own)
		var err error
		if info.Bytes, err = sizeOf(modulesDir, own); err != nil {
			return err
		}
		set.Classes = append(set.Classes, info)
		return nil
	}
	loadSeen := map[string]bool{}
	for _, c := range sel.Classes {
		info := ClassInfo{Name: c.Name}
		own := map[string]bool{}
		for _, p := range order {
			if c.has(p) && !removed[normalizeModule(p)] {
				info.Modules++
				closure(p, own)
			}
		}
		for _, l := range c.Load {
			n := normalizeModule(l)
			if p, ok := byName[n]; ok && !removed[n] {
				closure(p, own)
				if !loadSeen[n] {
					loadSeen[n] = true
					set.Load = append(set.Load, n)
				}
			}
		}
		if err := addClass(info, own); err != nil {
			return set, err
		}
	}
	if len(sel.Add) > 0 {
		info := ClassInfo{Name: "added"}
		own := map[string]bool{}
		for _, w := range sel.Add {
			n := normalizeModule(w)
			p, ok := byName[n]
			switch {
			case ok:
				info.Modules++
				info.Added = append(info.Added, n)
				closure(p, own)
			case builtin[n]:
				set.Builtin = append(set.Builtin, n)
			default:
				set.Missing = append(set.Missing, n)
			}
		}
		if err := addClass(info, own); err != nil {
			return set, err
		}
	}
	soft, err := resolveSoftdeps(modulesDir, byName, deps, files)
	if err != nil {
		return set, err
	}
	set.Softdep = soft.file
	// u-root's init knows no soft dependencies: what an always-loaded
	// module needs first goes before it in modules-load.d.
	var load []string
	inLoad := map[string]bool{}
	for _, n := range set.Load {
		for _, pre := range soft.pre[n] {
			if !inLoad[pre] {
				inLoad[pre] = true
				load = append(load, pre)
			}
		}
		if !inLoad[n] {
			inLoad[n] = true
			load = append(load, n)
		}
	}
	set.Load = load
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
	names := map[string]bool{}
	for p := range files {
		names[normalizeModule(p)] = true
	}
	if set.Alias, err = filterAliases(filepath.Join(modulesDir, "modules.alias"), names); err != nil {
		return set, err
	}
	return set, nil
}

// softdeps is what resolveSoftdeps found.
type softdeps struct {
	file []byte              // modules.softdep lines of included modules
	pre  map[string][]string // module -> resolved pre modules of it and its dependencies
}

// resolveSoftdeps adds to files the modules that included modules (or
// their dependencies) name in modules.softdep, with their own
// dependencies, until nothing new comes in. Entries may be aliases
// ("crc32c"): they resolve through the kernel's full modules.alias.
func resolveSoftdeps(modulesDir string, byName map[string]string, deps map[string][]string, files map[string]bool) (softdeps, error) {
	out := softdeps{pre: map[string][]string{}}
	f, err := os.Open(filepath.Join(modulesDir, "modules.softdep"))
	if os.IsNotExist(err) {
		return out, nil
	}
	if err != nil {
		return out, fmt.Errorf("modules.softdep: %w", err)
	}
	defer f.Close()
	sd, err := kmod.ParseSoftdeps(f)
	if err != nil {
		return out, err
	}
	aliases := &kmod.AliasTable{}
	if af, err := os.Open(filepath.Join(modulesDir, "modules.alias")); err == nil {
		aliases, err = kmod.ParseAliases(af)
		af.Close()
		if err != nil {
			return out, err
		}
	}
	known := func(n string) bool { _, ok := byName[n]; return ok }
	resolve := func(list []string) []string {
		var mods []string
		for _, s := range list {
			mods = append(mods, kmod.Resolve(s, known, aliases)...)
		}
		return mods
	}
	for changed := true; changed; {
		changed = false
		for p := range files {
			d := sd[normalizeModule(p)]
			for _, m := range resolve(append(append([]string(nil), d.Pre...), d.Post...)) {
				mp, ok := byName[m]
				if !ok || files[mp] {
					continue
				}
				files[mp] = true
				for _, dep := range deps[mp] {
					files[dep] = true
				}
				changed = true
			}
		}
	}
	var names []string
	for p := range files {
		n := normalizeModule(p)
		names = append(names, n)
		var pre []string
		for _, q := range append([]string{p}, deps[p]...) {
			pre = append(pre, resolve(sd[normalizeModule(q)].Pre)...)
		}
		if len(pre) > 0 {
			out.pre[n] = pre
		}
	}
	sort.Strings(names)
	var b strings.Builder
	for _, n := range names {
		d, ok := sd[n]
		if !ok {
			continue
		}
		fmt.Fprintf(&b, "softdep %s", n)
		if len(d.Pre) > 0 {
			fmt.Fprintf(&b, " pre: %s", strings.Join(d.Pre, " "))
		}
		if len(d.Post) > 0 {
			fmt.Fprintf(&b, " post: %s", strings.Join(d.Post, " "))
		}
		b.WriteString("\n")
	}
	out.file = []byte(b.String())
	return out, nil
}

// filterAliases keeps the lines of modules.alias whose module is in
// names. A kernel tree without modules.alias gives an empty one.
func filterAliases(file string, names map[string]bool) ([]byte, error) {
	raw, err := os.ReadFile(file)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("modules.alias: %w", err)
	}
	var out bytes.Buffer
	for _, line := range strings.Split(string(raw), "\n") {
		f := strings.Fields(line)
		if len(f) == 3 && f[0] == "alias" && names[normalizeModule(f[2])] {
			out.WriteString(line + "\n")
		}
	}
	return out.Bytes(), nil
}

func sizeOf(dir string, files map[string]bool) (int64, error) {
	var total int64
	for f := range files {
		st, err := os.Stat(filepath.Join(dir, f))
		if err != nil {
			return 0, fmt.Errorf("module %s: %w", f, err)
		}
		total += st.Size()
	}
	return total, nil
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
	b.WriteString("# Loaded by u-root's init at boot (written by anvil-image); the agent loads the rest by modalias.\n")
	for _, n := range m.Load {
		b.WriteString(n + "\n")
	}
	return []byte(b.String())
}

// Size is the total size of the module files.
func (m ModuleSet) Size() (int64, error) {
	files := map[string]bool{}
	for _, f := range m.Files {
		files[f] = true
	}
	return sizeOf(m.dir, files)
}
