package hardware

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/anvil-metal/anvil/internal/textlist"
	"github.com/anvil-metal/anvil/protocol"
)

// ErrProtected is matched (errors.Is) by every refusal of the Guard.
var ErrProtected = errors.New("hardware: device is protected")

// ProtectedError explains one refusal: which path, what it resolved to, why.
type ProtectedError struct {
	Path     string
	Resolved string
	Reason   string
}

func (e *ProtectedError) Error() string {
	if e.Resolved != "" && e.Resolved != e.Path {
		return fmt.Sprintf("refusing to write %s (resolves to %s): %s", e.Path, e.Resolved, e.Reason)
	}
	return fmt.Sprintf("refusing to write %s: %s", e.Path, e.Reason)
}

// Is makes errors.Is(err, ErrProtected) true.
func (e *ProtectedError) Is(target error) bool { return target == ErrProtected }

// Environment says whether the process runs in the agent ramdisk, with the
// evidence, so a refusal can tell the operator why.
type Environment struct {
	InRamdisk bool
	Evidence  string
}

// DetectEnvironment decides whether we run inside the agent ramdisk. Two
// things must hold:
//
//   - the process looks like it runs from an initramfs: PID 1, or the root
//     mount's filesystem is rootfs/ramfs/tmpfs (u-root's init runs the agent
//     as a child, so PID 1 alone is not enough);
//   - the kernel command line carries anvil.api=, which only the
//     controller's boot script puts there, or anvil.vmedia, which only the
//     agent ISO's boot loaders put there (its per-node slot then holds
//     anvil.api=). A host that boots diskless with a
//     tmpfs root passes the first test; without this one an agent started
//     there by mistake would erase every disk it can see.
//
// procDir is normally "/proc" (a fixture in tests: self/mountinfo and
// cmdline under it); pid is os.Getpid().
func DetectEnvironment(procDir string, pid int) Environment {
	var initramfs string
	if pid == 1 {
		initramfs = "running as PID 1"
	} else {
		fstype, err := rootFSType(filepath.Join(procDir, "self", "mountinfo"))
		if err != nil {
			return Environment{Evidence: fmt.Sprintf("cannot read mountinfo: %v", err)}
		}
		switch fstype {
		case "rootfs", "ramfs", "tmpfs":
			initramfs = fmt.Sprintf("root filesystem is %s", fstype)
		default:
			return Environment{Evidence: fmt.Sprintf("root filesystem is %s, not a ramdisk", fstype)}
		}
	}
	cmdline := filepath.Join(procDir, "cmdline")
	raw, err := os.ReadFile(cmdline)
	if err != nil {
		return Environment{Evidence: fmt.Sprintf("%s, but cannot read the kernel command line: %v", initramfs, err)}
	}
	if !hasAPIParam(string(raw)) {
		return Environment{Evidence: fmt.Sprintf("%s, but %s has no anvil.api= (not booted by the controller: a diskless host, not the agent ramdisk)", initramfs, cmdline)}
	}
	return Environment{InRamdisk: true, Evidence: initramfs + " and anvil.api= on the kernel command line"}
}

// hasAPIParam reports whether a kernel command line sets anvil.api (or
// IPA's ipa-api-url, which the agent accepts as its alias) to a non-empty
// value, quotes around the parameter or its value allowed, or carries the
// agent ISO's anvil.vmedia.
func hasAPIParam(cmdline string) bool {
	for _, f := range strings.Fields(cmdline) {
		f = strings.TrimPrefix(f, `"`)
		if strings.Trim(f, `"`) == "anvil.vmedia" {
			return true
		}
		for _, key := range []string{"anvil.api=", "ipa-api-url="} {
			if v, ok := strings.CutPrefix(f, key); ok && strings.Trim(v, `"`) != "" {
				return true
			}
		}
	}
	return false
}

// rootFSType returns the filesystem type of the last mount on "/" in a
// mountinfo file (later lines shadow earlier ones).
func rootFSType(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	var fstype string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// 36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 || fields[4] != "/" {
			continue
		}
		for i, fld := range fields {
			if fld == "-" && i+1 < len(fields) {
				fstype = fields[i+1]
				break
			}
		}
	}
	if err := sc.Err(); err != nil {
		return "", err
	}
	if fstype == "" {
		return "", fmt.Errorf("%s: no mount on /", path)
	}
	return fstype, nil
}

// Guard decides which devices may be opened for writing. Every destructive
// code path in the hardware tree opens devices through a Guard, so a test or
// a developer running the agent on a workstation cannot erase a disk it did
// not mean to:
//
//   - with an allow-list, only the listed paths (after resolving symlinks, on
//     both sides) can be written, even inside the ramdisk;
//   - without one, writes are allowed only in the ramdisk;
//   - otherwise every write is refused.
type Guard struct {
	env   Environment
	allow map[string]bool // resolved paths; nil when no allow-list was given
	raw   []string
}

// NewGuard builds a guard. allow may be nil (ramdisk mode). Entries that do
// not exist yet are kept unresolved and compared literally, so a test can
// list a device it is about to create.
func NewGuard(env Environment, allow []string) *Guard {
	g := &Guard{env: env}
	if allow != nil {
		g.allow = map[string]bool{}
		for _, p := range allow {
			p = strings.TrimSpace(p)
			if p == "" {
				continue
			}
			g.raw = append(g.raw, p)
			g.allow[resolve(p)] = true
		}
	}
	return g
}

// ParseAllowList splits a comma-separated allow-list ("/dev/loop3,/dev/loop4").
// An empty string yields nil, meaning "no allow-list".
func ParseAllowList(s string) []string {
	return textlist.Split(s, ",")
}

func resolve(p string) string {
	abs, err := filepath.Abs(p)
	if err != nil {
		abs = p
	}
	if r, err := filepath.EvalSymlinks(abs); err == nil {
		return r
	}
	return filepath.Clean(abs)
}

// String describes the guard's mode for logs and step results.
func (g *Guard) String() string {
	if g.allow != nil {
		return fmt.Sprintf("allow-list %v", g.raw)
	}
	if g.env.InRamdisk {
		return "ramdisk (" + g.env.Evidence + ")"
	}
	return "deny all (" + g.env.Evidence + ")"
}

// Check reports whether path may be written, returning the resolved path to
// open. The error is a *ProtectedError.
func (g *Guard) Check(path string) (string, error) {
	if g == nil {
		return "", &ProtectedError{Path: path, Reason: "no guard configured"}
	}
	r := resolve(path)
	switch {
	case g.allow != nil:
		if !g.listed(r) {
			return r, &ProtectedError{Path: path, Resolved: r, Reason: fmt.Sprintf("not in the device allow-list %v", g.raw)}
		}
	case !g.env.InRamdisk:
		return r, &ProtectedError{Path: path, Resolved: r,
			Reason: "not running in the agent ramdisk (" + g.env.Evidence + ") and no device allow-list given"}
	}
	return r, nil
}

// listed reports whether a resolved path is on the allow-list. Entries are
// resolved again at check time too, so a listed name that did not exist
// when the guard was built (/dev/md/<name> created by the test) counts.
func (g *Guard) listed(resolved string) bool {
	if g.allow[resolved] {
		return true
	}
	for _, p := range g.raw {
		if resolve(p) == resolved {
			return true
		}
	}
	// A partition lies inside its disk: listing the disk lists it.
	if disk := partitionOf(resolved); disk != "" {
		return g.listed(disk)
	}
	return false
}

// partitionOf returns the whole disk a partition device node belongs to
// ("/dev/loop3" for "/dev/loop3p1"), as sysfs tells; "" for anything else.
func partitionOf(dev string) string {
	name, ok := strings.CutPrefix(dev, "/dev/")
	if !ok || strings.Contains(name, "/") {
		return ""
	}
	sys := filepath.Join("/sys/class/block", name)
	if _, err := os.Stat(filepath.Join(sys, "partition")); err != nil {
		return ""
	}
	real, err := filepath.EvalSymlinks(sys)
	if err != nil {
		return ""
	}
	return "/dev/" + filepath.Base(filepath.Dir(real))
}

// Ready returns an error when the guard would refuse every device (no
// ramdisk and no allow-list, an empty allow-list, or no guard at all), so
// a destructive step fails up front with a clear reason instead of
// "succeeding" after skipping everything.
func (g *Guard) Ready() error {
	switch {
	case g == nil:
		return &ProtectedError{Path: "*", Reason: "no device guard configured"}
	case g.allow != nil && len(g.allow) == 0:
		return &ProtectedError{Path: "*", Reason: "the device allow-list is empty"}
	case g.allow == nil && !g.env.InRamdisk:
		return &ProtectedError{Path: "*", Reason: "not running in the agent ramdisk (" + g.env.Evidence + ") and no device allow-list given"}
	}
	return nil
}

// Allows is Check without the details.
func (g *Guard) Allows(path string) bool {
	_, err := g.Check(path)
	return err == nil
}

// OpenForWrite opens an allowed device (or, for tests, a plain file listed in
// the allow-list) read-write with the extra flags given (e.g. O_DIRECT,
// O_EXCL). It never creates files. After opening, the file's identity is
// compared with the resolved path's so a symlink swapped between the check
// and the open is caught.
func (g *Guard) OpenForWrite(path string, flag int) (*os.File, error) {
	r, err := g.Check(path)
	if err != nil {
		return nil, err
	}
	before, err := os.Stat(r)
	if err != nil {
		return nil, fmt.Errorf("open %s for writing: %w", path, err)
	}
	flag &^= os.O_CREATE | os.O_TRUNC | os.O_APPEND | os.O_WRONLY
	f, err := os.OpenFile(r, flag|os.O_RDWR|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open %s for writing: %w", path, err)
	}
	after, err := f.Stat()
	if err != nil || !os.SameFile(before, after) {
		f.Close()
		return nil, &ProtectedError{Path: path, Resolved: r, Reason: "device changed between check and open"}
	}
	return f, nil
}

// ScopeInventory narrows an inventory to the machine the agent may act on.
// In the ramdisk that is the whole machine. Outside it, with an allow-list
// (tests, development), the node is the listed devices: other disks belong
// to the host and are left out, and so is the host's PCI bus (an empty
// list, not nil: the agent looked), so the controller's disk check compares
// what the node is, not what the host running the agent has.
func (g *Guard) ScopeInventory(inv protocol.Inventory) protocol.Inventory {
	if g == nil || g.env.InRamdisk || g.allow == nil {
		return inv
	}
	disks := inv.Disks[:0:0]
	for _, d := range inv.Disks {
		if g.Allows(d.Name) {
			disks = append(disks, d)
		}
	}
	inv.Disks = disks
	inv.PCI = []protocol.PCIDevice{}
	return inv
}
