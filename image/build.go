// Package image builds the anvil agent ramdisk: a Debian cloud kernel and
// an initramfs made of a cached base (u-root's busybox with init and
// debugging tools, the kernel modules the agent needs, mdadm, a CA
// bundle) and an overlay holding just the agent binary, appended as a
// second compressed cpio so that an agent change rebuilds in seconds.
//
// Everything comes from the Go module proxy (u-root) and Debian packages
// (kernel, mdadm, ca-certificates), fetched with apt-get download and
// unpacked with dpkg -x, never installed. Archives are written by our own
// cpio code with fixed metadata, so the same inputs give the same bytes.
package image

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"time"
)

// Config describes one image build.
type Config struct {
	// RepoDir is the anvil module (go.mod, cmd/anvil-agent).
	RepoDir string
	// OutDir receives vmlinuz, initramfs.cpio.gz and manifest.json.
	OutDir string
	// CacheDir keeps downloaded packages and built bases between builds.
	CacheDir string
	// KernelPackage is the Debian kernel metapackage.
	KernelPackage string
	// Modules selects the kernel modules in the image (with their
	// dependencies): classes plus or minus single modules.
	Modules ModuleSelection
	// FirmwareDir is a linux-firmware style tree; the firmware files that
	// included modules ask for are copied from it into lib/firmware.
	// Empty: no firmware (the manifest lists what is missing).
	FirmwareDir string
	// Commands are the u-root commands in the busybox.
	Commands []string
	// Mdadm adds Debian's mdadm (+ libudev, libc) as /sbin/mdadm.
	Mdadm bool
	// CACerts adds /etc/ssl/certs/ca-certificates.crt built from
	// Debian's ca-certificates, so the agent can verify HTTPS image
	// servers.
	CACerts bool
	// AgentPackage is the Go package of the agent.
	AgentPackage string
	// Rebuild ignores cached bases (the downloads stay cached).
	Rebuild bool
	// Compression of the initramfs: Gzip or Zstd; empty (the default)
	// picks zstd when the kernel can unpack it (CONFIG_RD_ZSTD), else
	// gzip. zstd is smaller and unpacks faster at boot.
	Compression Compression
	// Netboot lists first-stage boot binaries copied into OutDir for the
	// controller's boot service (NetbootFiles; nil: none).
	Netboot []NetbootFile
	// ISO also writes the hybrid ISO (ISOName) for virtual media.
	ISO bool
	// SourceDateEpoch is every timestamp in the ISO (0:
	// DefaultSourceDateEpoch).
	SourceDateEpoch int64
}

// DefaultConfig is the standard image for a checkout at repo.
func DefaultConfig(repo string) Config {
	return Config{
		RepoDir:       repo,
		OutDir:        filepath.Join(repo, "out", "image"),
		CacheDir:      filepath.Join(repo, "out", "image-cache"),
		KernelPackage: DefaultKernelPackage,
		Modules:       ModuleSelection{Classes: DefaultClasses()},
		Commands:      DefaultCommands(),
		Mdadm:         true,
		CACerts:       true,
		AgentPackage:  "./cmd/anvil-agent",
		Netboot:       NetbootFiles(),
		ISO:           true,
	}
}

// DefaultKernelPackage is Debian's generic kernel: it has a driver for
// every common server NIC and storage controller. The cloud kernel
// (CloudKernelPackage) boots faster but has none of them (no e1000e, igb,
// ixgbe, i40e, ahci, megaraid_sas, mpt3sas): it suits VM-only fleets.
const (
	DefaultKernelPackage = "linux-image-amd64"
	CloudKernelPackage   = "linux-image-cloud-amd64"
)

// InitramfsBudget is the most the compressed initramfs may weigh (#14):
// it travels over TFTP/HTTP to every node at every boot, and unpacks into
// RAM.
const InitramfsBudget = 20 << 20

// InitramfsName is the initramfs file name in OutDir.
func InitramfsName(c Compression) string { return "initramfs.cpio" + c.Ext() }

// FindInitramfs returns the initramfs in dir, whichever compression it has.
func FindInitramfs(dir string) (string, error) {
	for _, c := range []Compression{Zstd, Gzip} {
		p := filepath.Join(dir, InitramfsName(c))
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("no %s or %s in %s: build the agent ramdisk with `make image`", InitramfsName(Zstd), InitramfsName(Gzip), dir)
}

// DirectKernel is the kernel in dir for a QEMU direct boot under SeaBIOS:
// the PVH kernel (PVHName) where the build wrote one, else vmlinuz. The
// build removes a stale vmlinux, so its presence is enough.
func DirectKernel(dir string) string {
	if p := filepath.Join(dir, PVHName); fileExists(p) {
		return p
	}
	return filepath.Join(dir, "vmlinuz")
}

// AgentPath is where the overlay puts the agent; /bin/uinit links to it.
const AgentPath = "bin/anvil-agent"

// Build builds (or reuses) the base, builds the agent overlay and
// assembles out/: vmlinuz, initramfs.cpio.gz and manifest.json.
func Build(ctx context.Context, log *slog.Logger, cfg Config) (*Manifest, error) {
	m := &Manifest{Timings: map[string]string{}}
	started := time.Now()
	for _, d := range []string{cfg.OutDir, cfg.CacheDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("image: %w", err)
		}
	}
	deb := Debian{CacheDir: cfg.CacheDir, Log: log}

	// Kernel.
	t := time.Now()
	var programs []string
	if cfg.Mdadm {
		programs = append(programs, "mdadm")
	}
	var data []string
	if cfg.CACerts {
		data = append(data, CAPackage)
	}
	plan, err := deb.Resolve(ctx, cfg.KernelPackage, programs, data)
	if err != nil {
		return nil, fmt.Errorf("debian packages: %w", err)
	}
	k, err := deb.FetchKernel(ctx, plan)
	if err != nil {
		return nil, fmt.Errorf("kernel: %w", err)
	}
	kcfg, err := KernelConfig(k.Config)
	if err != nil {
		return nil, err
	}
	if cfg.Compression == "" {
		cfg.Compression = Gzip
		if kcfg[Zstd.KernelConfig()] == "y" {
			cfg.Compression = Zstd
		}
	}
	if opt := cfg.Compression.KernelConfig(); kcfg[opt] != "y" {
		return nil, fmt.Errorf("kernel %s cannot unpack a %s initramfs (%s=%q)", k.Release, cfg.Compression, opt, kcfg[opt])
	}
	m.Kernel.Package, m.Kernel.ImagePackage = k.Meta.Name, k.Image.Name
	m.Kernel.Version, m.Kernel.Release = k.Image.Version, k.Release
	m.Timings["kernel"] = since(t)
	t = time.Now()

	mods, err := ResolveModules(k.ModulesDir(), k.Release, cfg.Modules)
	if err != nil {
		return nil, fmt.Errorf("modules: %w", err)
	}
	if len(mods.Missing) > 0 {
		log.Warn("modules not in this kernel", "release", k.Release, "missing", mods.Missing)
	}
	m.Modules.Load, m.Modules.Builtin, m.Modules.Missing = mods.Load, mods.Builtin, mods.Missing
	m.Modules.Files, m.Modules.Classes, m.Modules.List = len(mods.Files), mods.Classes, mods.Files
	m.Modules.Aliases = bytes.Count(mods.Alias, []byte("\n"))
	if m.Modules.Bytes, err = mods.Size(); err != nil {
		return nil, err
	}
	fw, err := ModuleFirmware(k.ModulesDir(), mods.Files, cfg.FirmwareDir)
	if err != nil {
		return nil, fmt.Errorf("firmware: %w", err)
	}
	m.Firmware.Dir, m.Firmware.Files = cfg.FirmwareDir, fw
	m.Firmware.Present, m.Firmware.Absent, m.Firmware.Lacking = FirmwareSummary(fw)
	for _, f := range fw {
		m.Firmware.Bytes += f.Bytes
	}
	m.Timings["modules"] = since(t)

	var mdadm []Package
	if cfg.Mdadm {
		if mdadm, err = deb.FetchProgram(ctx, plan, "mdadm"); err != nil {
			return nil, fmt.Errorf("mdadm: %w", err)
		}
	}
	var ca *Package
	if cfg.CACerts {
		p, err := deb.Fetch(ctx, CAPackage, plan.Versions[CAPackage])
		if err != nil {
			return nil, fmt.Errorf("%s: %w", CAPackage, err)
		}
		ca = &p
	}

	urootVersion, err := goModuleVersion(ctx, cfg.RepoDir, "github.com/u-root/u-root")
	if err != nil {
		return nil, err
	}
	m.Uroot.Version, m.Uroot.Commands = urootVersion, cfg.Commands
	m.Go = runtime.Version()

	// Base: u-root + modules + mdadm + CA bundle, cached by everything
	// that goes in.
	t = time.Now()
	base, err := BuildBase(ctx, log, BaseInputs{
		RepoDir: cfg.RepoDir, CacheDir: cfg.CacheDir, Commands: cfg.Commands, UrootVersion: urootVersion,
		Kernel: k, Modules: mods, Firmware: fw, Mdadm: mdadm, CACerts: ca, Compression: cfg.Compression, Rebuild: cfg.Rebuild,
	})
	if err != nil {
		return nil, err
	}
	m.Base, m.Mdadm, m.CACerts = base.Part, base.Mdadm, base.CACerts
	if base.CACerts != nil && len(base.CACerts.Rejected) > 0 {
		// Kept in the bundle, but the agent cannot use them.
		log.Warn("CA certificates Go cannot parse", "package", ca.Name, "version", ca.Version, "files", base.CACerts.Rejected)
	}
	if base.Uroot > 0 {
		m.Timings["u-root"] = base.Uroot.Round(time.Millisecond).String()
	}
	m.Timings["base"] = since(t)

	// Overlay: the agent.
	t = time.Now()
	agentBin := filepath.Join(cfg.CacheDir, "anvil-agent")
	if err := BuildAgent(ctx, cfg.RepoDir, cfg.AgentPackage, agentBin); err != nil {
		return nil, err
	}
	if m.Agent.Binary, err = hashFile(agentBin); err != nil {
		return nil, err
	}
	m.Agent.Binary.Path = "/" + AgentPath
	m.Agent.Revision, m.Agent.Dirty = gitRevision(ctx, cfg.RepoDir)
	m.Timings["agent_build"] = since(t)
	t = time.Now()
	overlay := filepath.Join(cfg.CacheDir, "overlay.cpio"+cfg.Compression.Ext())
	if m.Overlay, err = BuildOverlay(agentBin, overlay, cfg.Compression); err != nil {
		return nil, err
	}
	m.Timings["overlay"] = since(t)

	// Assemble.
	initrd := filepath.Join(cfg.OutDir, InitramfsName(cfg.Compression))
	if m.Initramfs, err = Assemble(initrd, filepath.Join(cfg.CacheDir, base.Path), overlay); err != nil {
		return nil, err
	}
	if m.Kernel.File, err = Assemble(filepath.Join(cfg.OutDir, "vmlinuz"), k.Vmlinuz); err != nil {
		return nil, err
	}
	if m.Kernel.PVH, err = writePVH(ctx, log, cfg, k, m.Kernel.File.SHA256); err != nil {
		return nil, err
	}
	if len(cfg.Netboot) > 0 {
		t = time.Now()
		pkgs, files, err := fetchNetboot(ctx, deb, cfg.OutDir, cfg.Netboot)
		if err != nil {
			return nil, err
		}
		m.Netboot = &Netboot{Packages: pkgs, Files: files}
		m.Timings["netboot"] = since(t)
	}
	if cfg.ISO {
		t = time.Now()
		epoch := cfg.SourceDateEpoch
		if epoch == 0 {
			epoch = DefaultSourceDateEpoch
		}
		if m.ISO, err = BuildISO(ctx, deb, ISOInputs{Kernel: k.Vmlinuz, Initramfs: initrd, Out: filepath.Join(cfg.OutDir, ISOName),
			WorkDir: filepath.Join(cfg.CacheDir, "iso"), Epoch: epoch}); err != nil {
			return nil, err
		}
		m.Timings["iso"] = since(t)
	}
	m.Compression = cfg.Compression
	// One initramfs in OutDir: a stale one of the other compression would
	// be served or booted instead.
	for _, c := range []Compression{Gzip, Zstd} {
		if c != cfg.Compression {
			if err := os.Remove(filepath.Join(cfg.OutDir, InitramfsName(c))); err != nil && !errors.Is(err, os.ErrNotExist) {
				return nil, fmt.Errorf("image: %w", err)
			}
		}
	}
	m.UncompressedBytes = m.Base.UncompressedBytes + m.Overlay.UncompressedBytes
	m.Timings["total"] = since(started)
	if err := m.Write(filepath.Join(cfg.OutDir, "manifest.json")); err != nil {
		return nil, err
	}
	return m, nil
}

// writePVH puts the kernel's uncompressed PVH ELF next to vmlinuz (see
// PVHName), or removes a stale one when this kernel has none. Anything
// but a cancelled build only costs the VM boots their speed: it is
// logged, not fatal.
func writePVH(ctx context.Context, log *slog.Logger, cfg Config, k Kernel, sha256 string) (*File, error) {
	out := filepath.Join(cfg.OutDir, PVHName)
	src, err := pvhCached(ctx, cfg.CacheDir, k.Vmlinuz, sha256)
	if err != nil {
		if ctx.Err() != nil {
			return nil, err
		}
		if errors.Is(err, ErrNoPVH) {
			log.Info("no "+PVHName+" for QEMU direct boot", "kernel", k.Release, "why", err)
		} else {
			log.Warn("no "+PVHName+" for QEMU direct boot", "kernel", k.Release, "err", err)
		}
		if err := os.Remove(out); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("image: %w", err)
		}
		return nil, nil
	}
	f, err := Assemble(out, src)
	if err != nil {
		return nil, err
	}
	return &f, nil
}

// BuildOverlay writes the archive holding just the agent binary at
// /bin/anvil-agent (what /bin/uinit in the base points to).
func BuildOverlay(agentBin, file string, c Compression) (Part, error) {
	ov := NewArchive()
	ov.AddDir("bin", 0o755)
	if err := ov.AddFile(AgentPath, agentBin, 0o755); err != nil {
		return Part{}, err
	}
	AddKmodLinks(ov, "/"+AgentPath)
	raw, err := ov.WriteCompressedFile(file, c)
	if err != nil {
		return Part{}, err
	}
	f, err := hashFile(file)
	if err != nil {
		return Part{}, err
	}
	f.Path = filepath.Base(file)
	return Part{File: f, UncompressedBytes: raw}, nil
}

// KernelAliasFile (in lib/modules/<release>/) is the kernel's complete
// modules.alias; modules.alias next to it covers only the image's modules.
const KernelAliasFile = "modules.alias.kernel"

// AddKmodLinks links the names under which the agent binary loads kernel
// modules to target (the agent): /sbin/modprobe, which the kernel runs to
// load a module on demand (RAID personalities, 8021q, crypto), and
// /bin/coldplug (load drivers for the hardware found; for the shell and
// test scripts that replace the agent).
func AddKmodLinks(a *Archive, target string) {
	a.AddSymlink("sbin/modprobe", target)
	a.AddSymlink("bin/coldplug", target)
}

// Assemble concatenates parts into file (the kernel unpacks concatenated
// compressed cpio archives in order) and describes the result.
func Assemble(file string, parts ...string) (File, error) {
	if err := Concat(file, parts...); err != nil {
		return File{}, err
	}
	f, err := hashFile(file)
	if err != nil {
		return File{}, err
	}
	f.Path = filepath.Base(file)
	return f, nil
}

// BaseInputs is everything the base archive is made of.
type BaseInputs struct {
	RepoDir      string // Go module the u-root commands resolve in
	CacheDir     string
	Commands     []string
	UrootVersion string
	Kernel       Kernel
	Modules      ModuleSet
	Firmware     []Firmware // the present ones go to lib/firmware
	Mdadm        []Package  // mdadm and its lib packages; nil leaves it out
	CACerts      *Package   // unpacked ca-certificates; nil leaves the bundle out
	Compression  Compression
	Rebuild      bool // ignore cached u-root and base archives
}

// Base is a built (or cached) base archive.
type Base struct {
	Part
	Mdadm   *Extra
	CACerts *CACerts
	Uroot   time.Duration // time spent building u-root; 0 if cached
}

// BuildBase returns the cached base archive for these inputs, building it
// if needed: u-root's cpio (itself cached by u-root version, Go version and
// commands), the kernel modules, mdadm and the CA bundle, merged into one
// archive.
func BuildBase(ctx context.Context, log *slog.Logger, in BaseInputs) (Base, error) {
	k, mods, mdadm := in.Kernel, in.Modules, in.Mdadm
	var res Base
	urootKey := in.urootKey()
	mdKey := ""
	for _, p := range mdadm {
		mdKey += p.Name + "=" + p.Version + ","
	}
	caKey := ""
	if in.CACerts != nil {
		caKey = in.CACerts.Name + "=" + in.CACerts.Version
	}
	fwKey := ""
	for _, f := range in.Firmware {
		if f.Present {
			fwKey += fmt.Sprintf("%s=%d,", f.File, f.Bytes)
		}
	}
	modKey := sha256Hex(append(append(append(append([]byte(nil), mods.Dep...), mods.Alias...), mods.Softdep...), mods.LoadConf()...))
	baseKey := cacheKey("base-v5", string(in.Compression), urootKey, k.Image.Name, k.Image.Version, modKey, fwKey, mdKey, caKey)
	res.Key = baseKey
	res.Path = "base-" + baseKey + ".cpio" + in.Compression.Ext()
	baseFile := filepath.Join(in.CacheDir, res.Path)
	sizeFile := baseFile + ".size"

	var mdBytes int64
	mdFiles := map[string]string{}
	if len(mdadm) > 0 {
		var roots []string
		for _, p := range mdadm {
			roots = append(roots, p.Root)
		}
		var err error
		if mdFiles, err = ELFClosure(roots, "sbin/mdadm"); err != nil {
			return res, fmt.Errorf("mdadm: %w", err)
		}
		for _, host := range mdFiles {
			st, err := os.Stat(host)
			if err != nil {
				return res, fmt.Errorf("mdadm: %w", err)
			}
			mdBytes += st.Size()
		}
		res.Mdadm = &Extra{Packages: mdadm, Bytes: mdBytes}
		for p := range mdFiles {
			res.Mdadm.Files = append(res.Mdadm.Files, "/"+p)
		}
		sort.Strings(res.Mdadm.Files)
	}
	// Built (in milliseconds) even when the base is cached: the manifest
	// describes it either way.
	var caBundle []byte
	if in.CACerts != nil {
		var info CACerts
		var err error
		if caBundle, info, err = CABundle(*in.CACerts); err != nil {
			return res, err
		}
		res.CACerts = &info
	}

	if !in.Rebuild {
		if sz, err := os.ReadFile(sizeFile); err == nil {
			if f, err := hashFile(baseFile); err == nil {
				res.File, res.Cached = f, true
				res.Path = filepath.Base(baseFile)
				if _, err := fmt.Sscan(string(sz), &res.UncompressedBytes); err == nil {
					log.Info("base cached", "file", baseFile)
					return res, nil
				}
			}
		}
	}

	urootFile := filepath.Join(in.CacheDir, "uroot-"+urootKey+".cpio")
	if _, err := os.Stat(urootFile); in.Rebuild || errors.Is(err, os.ErrNotExist) {
		tmp, err := os.MkdirTemp("", "anvil-image-")
		if err != nil {
			return res, fmt.Errorf("u-root build: %w", err)
		}
		defer os.RemoveAll(tmp)
		log.Info("building u-root busybox (20-40 s)", "u-root", in.UrootVersion, "commands", len(in.Commands))
		t := time.Now()
		out := filepath.Join(tmp, "uroot.cpio")
		if err := BuildUroot(ctx, log, UrootConfig{
			ModuleDir: in.RepoDir, Commands: in.Commands, Uinit: "/" + AgentPath, TempDir: tmp, Output: out,
		}); err != nil {
			return res, err
		}
		if err := Concat(urootFile, out); err != nil {
			return res, err
		}
		res.Uroot = time.Since(t)
	}

	a := NewArchive()
	uf, err := os.Open(urootFile)
	if err != nil {
		return res, fmt.Errorf("base: %w", err)
	}
	defer uf.Close()
	if err := a.AddArchive(uf); err != nil {
		return res, fmt.Errorf("base: u-root archive: %w", err)
	}
	modRoot := "lib/modules/" + k.Release
	// Modules go in one by one zstd-compressed (.ko.zst; the loader
	// decompresses in user space, see kmod.KernelLoader): the kernel then
	// unpacks a ~35 MB initramfs at boot instead of ~70 MB, which under
	// QEMU TCG is most of a second, and only the handful of modules a
	// machine needs are ever decompressed.
	packed, err := CompressModules(k.ModulesDir(), mods.Files)
	if err != nil {
		return res, err
	}
	for i, f := range mods.Files {
		a.AddBytes(modRoot+"/"+f+ModuleExt, packed[i], 0o644)
	}
	a.AddBytes(modRoot+"/modules.dep", SuffixDep(mods.Dep, ModuleExt), 0o644)
	a.AddBytes(modRoot+"/modules.alias", mods.Alias, 0o644)
	a.AddBytes(modRoot+"/modules.softdep", mods.Softdep, 0o644)
	// The kernel's complete alias list, modules not in the image included:
	// with it the agent can name the module a driverless device would
	// need ("add it with -modules +name"), which the image's own
	// modules.alias cannot. ~1.3 MB, ~100 KB compressed.
	if all := filepath.Join(k.ModulesDir(), "modules.alias"); fileExists(all) {
		if err := a.AddFile(modRoot+"/"+KernelAliasFile, all, 0o644); err != nil {
			return res, err
		}
	}
	fwSeen := map[string]bool{}
	for _, f := range in.Firmware {
		if f.Present && !fwSeen[f.File] {
			fwSeen[f.File] = true
			if err := a.AddFile("lib/firmware/"+f.File, f.source, 0o644); err != nil {
				return res, err
			}
		}
	}
	for _, f := range []string{"modules.builtin", "modules.builtin.modinfo"} {
		if err := a.AddFile(modRoot+"/"+f, filepath.Join(k.ModulesDir(), f), 0o644); err != nil {
			return res, err
		}
	}
	a.AddBytes("lib/modules-load.d/anvil.conf", mods.LoadConf(), 0o644)
	paths := make([]string, 0, len(mdFiles))
	for p := range mdFiles {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	first := map[string]string{} // host file -> archive path holding it
	for _, p := range paths {
		if prev, ok := first[mdFiles[p]]; ok {
			// Same file under two names (ld.so in /lib64 and the
			// multiarch dir): link instead of storing it twice.
			a.AddSymlink(p, "/"+prev)
			continue
		}
		first[mdFiles[p]] = p
		if err := a.AddFile(p, mdFiles[p], 0o755); err != nil {
			return res, err
		}
	}
	if caBundle != nil {
		a.AddBytes(CABundlePath, caBundle, 0o644)
	}
	// mdadm and the agent's RAID steps expect these to exist.
	a.AddDir("etc/mdadm", 0o755)
	a.AddDir("run", 0o755)
	a.AddDir("var/log", 0o755)

	raw, err := a.WriteCompressedFile(baseFile, in.Compression)
	if err != nil {
		return res, err
	}
	if err := os.WriteFile(sizeFile, []byte(fmt.Sprint(raw)), 0o644); err != nil {
		return res, fmt.Errorf("base: %w", err)
	}
	f, err := hashFile(baseFile)
	if err != nil {
		return res, err
	}
	res.File, res.UncompressedBytes = f, raw
	res.Path = filepath.Base(baseFile)
	return res, nil
}

// urootKey names the cached u-root archive: everything u-root's build
// depends on.
func (in BaseInputs) urootKey() string {
	_, own := splitStandalone(in.Commands)
	return cacheKey("uroot", in.UrootVersion, runtime.Version(), strings.Join(in.Commands, ","), "/"+AgentPath, "standalone="+strings.Join(own, ","))
}

func cacheKey(parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		h.Write([]byte(p))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

func hashFile(file string) (File, error) {
	f, err := os.Open(file)
	if err != nil {
		return File{}, fmt.Errorf("hash: %w", err)
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return File{}, fmt.Errorf("hash %s: %w", file, err)
	}
	return File{Path: file, Bytes: n, SHA256: hex.EncodeToString(h.Sum(nil))}, nil
}

func sha256Hex(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

func since(t time.Time) string { return time.Since(t).Round(time.Millisecond).String() }
