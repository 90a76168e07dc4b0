// Command anvil-image builds the agent ramdisk: out/image/vmlinuz,
// out/image/initramfs.cpio.gz and out/image/manifest.json (see image/).
//
//	anvil-image [-repo .] [-out out/image] [-cache out/image-cache] [-kernel-package linux-image-amd64]
//	            [-classes -usb,...] [-modules +name,-name,...] [-firmware DIR] [-rebuild] [-no-mdadm] [-compress gzip|zstd]
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/anvil-metal/anvil/image"
	"github.com/anvil-metal/anvil/internal/cli"
	"github.com/anvil-metal/anvil/internal/textlist"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(cli.Exit(os.Stdout, os.Stderr, "anvil-image", err))
}

const usage = `usage: anvil-image [flags]

Builds the agent ramdisk: vmlinuz, the initramfs and manifest.json in -out,
and the hybrid ISO for virtual media (see image/README.md). Debian's kernel
and modules are downloaded once into -cache. SOURCE_DATE_EPOCH fixes the
build's timestamps.
`

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("anvil-image", flag.ContinueOnError)
	repo := fs.String("repo", ".", "anvil checkout (Go module with cmd/anvil-agent)")
	out := fs.String("out", "", "output directory (default <repo>/out/image)")
	cache := fs.String("cache", "", "download and base cache (default <repo>/out/image-cache)")
	kernel := fs.String("kernel-package", image.DefaultKernelPackage, "Debian kernel metapackage ("+image.CloudKernelPackage+": smaller and faster to boot, but no driver for real servers' NICs and disk controllers)")
	classes := fs.String("classes", "", "module classes: a list replaces the default ("+strings.Join(image.ClassNames(image.DefaultClasses()), ",")+"); -name entries remove one from it")
	modules := fs.String("modules", "", "single modules: +name adds one (with dependencies), -name leaves one out")
	firmware := fs.String("firmware", "", "linux-firmware style directory: firmware files the included modules ask for are copied from it")
	noMdadm := fs.Bool("no-mdadm", false, "leave Debian's mdadm (and libc, libudev) out")
	rebuild := fs.Bool("rebuild", false, "rebuild the u-root busybox and the base even if cached")
	compress := fs.String("compress", "", "initramfs compression: gzip or zstd (default: zstd if the kernel has CONFIG_RD_ZSTD, else gzip)")
	checkRepro := fs.Bool("check-reproducible", false, "then build everything again from scratch (u-root, base, overlay; downloads shared) in a temp dir and fail if the initramfs differs")
	noISO := fs.Bool("no-iso", false, "do not write the hybrid ISO ("+image.ISOName+") for virtual media")
	verbose := fs.Bool("v", false, "debug logging (u-root's build output)")
	if _, err := cli.Parse(fs, usage, args); err != nil {
		return err
	}
	log := cli.Logger(stderr, *verbose)

	abs, err := filepath.Abs(*repo)
	if err != nil {
		return err
	}
	cfg := image.DefaultConfig(abs)
	if *out != "" {
		cfg.OutDir = *out
	}
	if *cache != "" {
		cfg.CacheDir = *cache
	}
	cfg.KernelPackage, cfg.Mdadm, cfg.Rebuild = *kernel, !*noMdadm, *rebuild
	cfg.Compression = image.Compression(*compress)
	cfg.ISO = !*noISO
	if cfg.ISO {
		// As make demo does for QEMU, so the README's one command works on
		// a fresh machine.
		if err := image.EnsureTools(ctx, stderr, "needed for the virtual-media ISO; -no-iso skips it",
			image.Tool{Command: "xorriso", Package: "xorriso"}, image.Tool{Command: "mformat", Package: "mtools"},
			image.Tool{Command: "mcopy", Package: "mtools"}, image.Tool{Command: "mmd", Package: "mtools"}); err != nil {
			return err
		}
	}
	if cfg.SourceDateEpoch, err = image.ParseSourceDateEpoch(os.Getenv("SOURCE_DATE_EPOCH")); err != nil {
		return err
	}
	if cfg.Modules, err = parseSelection(*classes, *modules); err != nil {
		return err
	}
	if *firmware != "" {
		if cfg.FirmwareDir, err = filepath.Abs(*firmware); err != nil {
			return err
		}
		if st, err := os.Stat(cfg.FirmwareDir); err != nil || !st.IsDir() {
			return fmt.Errorf("-firmware %s: not a directory", *firmware)
		}
	}
	m, err := image.Build(ctx, log, cfg)
	if err != nil {
		return err
	}
	mib := func(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }
	fmt.Fprintf(stdout, "kernel     %s (%s %s)  %s\n", m.Kernel.File.Path, m.Kernel.ImagePackage, m.Kernel.Version, mib(m.Kernel.File.Bytes))
	switch m.Kernel.Package {
	case image.DefaultKernelPackage:
		fmt.Fprintf(stdout, "           Debian's generic kernel: drivers for real servers' NICs and storage controllers (-kernel-package %s for VM-only fleets)\n", image.CloudKernelPackage)
	case image.CloudKernelPackage:
		fmt.Fprintf(stdout, "           Debian's cloud kernel: virtio/NVMe VMs only, no e1000e/igb/ixgbe/ahci/megaraid_sas (default: %s)\n", image.DefaultKernelPackage)
	}
	if m.Kernel.PVH != nil {
		fmt.Fprintf(stdout, "           %s  %s: the same kernel uncompressed, for QEMU direct boot (PVH, no in-guest decompression)\n", m.Kernel.PVH.Path, mib(m.Kernel.PVH.Bytes))
	}
	fmt.Fprintf(stdout, "initramfs  %s  %s %s, %s uncompressed  sha256 %s\n", m.Initramfs.Path, mib(m.Initramfs.Bytes), m.Compression, mib(m.UncompressedBytes), m.Initramfs.SHA256[:16])
	fmt.Fprintf(stdout, "  base     %s (cached: %v)  u-root %s, %d commands, %d modules (%s)\n",
		mib(m.Base.Bytes), m.Base.Cached, m.Uroot.Version, len(m.Uroot.Commands), m.Modules.Files, mib(m.Modules.Bytes))
	fmt.Fprintf(stdout, "  agent    %s  %s@%s dirty=%v\n", mib(m.Overlay.Bytes), "anvil-agent", short(m.Agent.Revision), m.Agent.Dirty)
	for _, c := range m.Modules.Classes {
		fmt.Fprintf(stdout, "    class %-9s %4d modules, %4d files with dependencies, %s\n", c.Name, c.Modules, c.Files, mib(c.Bytes))
	}
	atBoot := "nothing by name"
	if len(m.Modules.Load) > 0 {
		atBoot = strings.Join(m.Modules.Load, " ")
	}
	fmt.Fprintf(stdout, "    at boot  %s; drivers by modalias (%d aliases), the rest on demand (/sbin/modprobe)\n", atBoot, m.Modules.Aliases)
	if len(m.Modules.Missing) > 0 {
		fmt.Fprintf(stdout, "  modules not in %s: %s\n", m.Kernel.Release, strings.Join(m.Modules.Missing, " "))
	}
	fmt.Fprintf(stdout, "  firmware %d of %d files asked for by included modules present (%s)", m.Firmware.Present, m.Firmware.Present+m.Firmware.Absent, mib(m.Firmware.Bytes))
	if len(m.Firmware.Lacking) > 0 {
		fmt.Fprintf(stdout, "; modules lacking firmware (add with -firmware DIR): %s", strings.Join(m.Firmware.Lacking, " "))
	}
	fmt.Fprintln(stdout)
	budget := "within"
	if m.Initramfs.Bytes > image.InitramfsBudget {
		budget = "OVER"
	}
	fmt.Fprintf(stdout, "budget     initramfs %s compressed: %s the %s budget\n", mib(m.Initramfs.Bytes), budget, mib(image.InitramfsBudget))
	if m.ISO != nil {
		fmt.Fprintf(stdout, "iso        %s  %s  sha256 %s  BIOS+UEFI hybrid, node slot at byte %d (%s, %s)\n",
			m.ISO.Path, mib(m.ISO.Bytes), m.ISO.SHA256[:16], m.ISO.Slot.Offset, m.ISO.Tool, m.Timings["iso"])
	}
	fmt.Fprintf(stdout, "manifest   %s  (build %s)\n", filepath.Join(cfg.OutDir, "manifest.json"), m.Timings["total"])
	if *checkRepro {
		return checkReproducible(ctx, log, cfg, m, stdout)
	}
	return nil
}

// checkReproducible rebuilds the image in a temp dir with nothing cached
// but the Debian downloads and compares the initramfs hashes.
func checkReproducible(ctx context.Context, log *slog.Logger, cfg image.Config, first *image.Manifest, stdout io.Writer) error {
	tmp, err := os.MkdirTemp("", "anvil-image-repro-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	again := cfg
	again.OutDir, again.CacheDir, again.Rebuild = filepath.Join(tmp, "out"), filepath.Join(tmp, "cache"), true
	if err := os.MkdirAll(again.CacheDir, 0o755); err != nil {
		return err
	}
	for _, d := range []string{"debs", "root"} { // share downloads, nothing built
		if err := os.Symlink(filepath.Join(cfg.CacheDir, d), filepath.Join(again.CacheDir, d)); err != nil {
			return err
		}
	}
	m, err := image.Build(ctx, log, again)
	if err != nil {
		return fmt.Errorf("second build: %w", err)
	}
	if m.Initramfs.SHA256 != first.Initramfs.SHA256 {
		return fmt.Errorf("not reproducible: initramfs sha256 %s, then %s (base %s / %s, overlay %s / %s)",
			first.Initramfs.SHA256, m.Initramfs.SHA256, first.Base.SHA256, m.Base.SHA256, first.Overlay.SHA256, m.Overlay.SHA256)
	}
	fmt.Fprintf(stdout, "reproducible: a from-scratch rebuild gave the same initramfs (sha256 %s)\n", m.Initramfs.SHA256)
	if first.ISO != nil && m.ISO != nil {
		if m.ISO.SHA256 != first.ISO.SHA256 {
			return fmt.Errorf("not reproducible: ISO sha256 %s, then %s", first.ISO.SHA256, m.ISO.SHA256)
		}
		fmt.Fprintf(stdout, "reproducible: and the same ISO (sha256 %s)\n", m.ISO.SHA256)
	}
	return nil
}

// parseSelection reads -classes and -modules.
func parseSelection(classes, modules string) (image.ModuleSelection, error) {
	var sel image.ModuleSelection
	all := image.DefaultClasses()
	byName := map[string]image.ModuleClass{}
	for _, c := range all {
		byName[c.Name] = c
	}
	var named, removed []string
	for _, c := range textlist.Split(classes, ",") {
		if n, ok := strings.CutPrefix(c, "-"); ok {
			removed = append(removed, n)
		} else {
			named = append(named, strings.TrimPrefix(c, "+"))
		}
	}
	for _, n := range append(append([]string(nil), named...), removed...) {
		if _, ok := byName[n]; !ok {
			return sel, fmt.Errorf("-classes: no class %q (have %s)", n, strings.Join(image.ClassNames(all), ", "))
		}
	}
	if len(named) == 0 {
		named = image.ClassNames(all)
	}
	for _, n := range named {
		if !slices.Contains(removed, n) {
			sel.Classes = append(sel.Classes, byName[n])
		}
	}
	for _, m := range textlist.Split(modules, ",") {
		switch {
		case strings.HasPrefix(m, "-"):
			sel.Remove = append(sel.Remove, m[1:])
		case strings.HasPrefix(m, "+"):
			sel.Add = append(sel.Add, m[1:])
		default:
			return sel, fmt.Errorf("-modules: %q: write +%s to add it or -%s to leave it out", m, m, m)
		}
	}
	return sel, nil
}

func short(rev string) string {
	if len(rev) > 12 {
		return rev[:12]
	}
	return rev
}
