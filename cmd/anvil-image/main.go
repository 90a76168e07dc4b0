// Command anvil-image builds the agent ramdisk: out/image/vmlinuz,
// out/image/initramfs.cpio.gz and out/image/manifest.json (see image/).
//
//	anvil-image [-repo .] [-out out/image] [-cache out/image-cache] [-rebuild] [-no-mdadm]
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
	"strings"
	"syscall"

	"github.com/anvil-metal/anvil/image"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "anvil-image:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("anvil-image", flag.ContinueOnError)
	fs.SetOutput(stderr)
	repo := fs.String("repo", ".", "anvil checkout (Go module with cmd/anvil-agent)")
	out := fs.String("out", "", "output directory (default <repo>/out/image)")
	cache := fs.String("cache", "", "download and base cache (default <repo>/out/image-cache)")
	kernel := fs.String("kernel-package", "linux-image-cloud-amd64", "Debian kernel metapackage")
	modules := fs.String("modules", strings.Join(image.DefaultModules(), ","), "kernel modules to load at boot (with dependencies)")
	noMdadm := fs.Bool("no-mdadm", false, "leave Debian's mdadm (and libc, libudev) out")
	rebuild := fs.Bool("rebuild", false, "rebuild the u-root busybox and the base even if cached")
	verbose := fs.Bool("v", false, "debug logging (u-root's build output)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	level := slog.LevelInfo
	if *verbose {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))

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
	cfg.Modules = nil
	for _, m := range strings.Split(*modules, ",") {
		if m = strings.TrimSpace(m); m != "" {
			cfg.Modules = append(cfg.Modules, m)
		}
	}
	m, err := image.Build(ctx, log, cfg)
	if err != nil {
		return err
	}
	mib := func(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }
	fmt.Fprintf(stdout, "kernel     %s (%s %s)  %s\n", m.Kernel.File.Path, m.Kernel.ImagePackage, m.Kernel.Version, mib(m.Kernel.File.Bytes))
	fmt.Fprintf(stdout, "initramfs  %s  %s gzip, %s uncompressed  sha256 %s\n", m.Initramfs.Path, mib(m.Initramfs.Bytes), mib(m.UncompressedBytes), m.Initramfs.SHA256[:16])
	fmt.Fprintf(stdout, "  base     %s gzip (cached: %v)  u-root %s, %d commands, %d modules (%s)\n",
		mib(m.Base.Bytes), m.Base.Cached, m.Uroot.Version, len(m.Uroot.Commands), m.Modules.Files, mib(m.Modules.Bytes))
	fmt.Fprintf(stdout, "  agent    %s gzip  %s@%s dirty=%v\n", mib(m.Overlay.Bytes), "anvil-agent", short(m.Agent.Revision), m.Agent.Dirty)
	if len(m.Modules.Missing) > 0 {
		fmt.Fprintf(stdout, "  modules not in %s: %s\n", m.Kernel.Release, strings.Join(m.Modules.Missing, " "))
	}
	fmt.Fprintf(stdout, "manifest   %s  (build %s)\n", filepath.Join(cfg.OutDir, "manifest.json"), m.Timings["total"])
	return nil
}

func short(rev string) string {
	if len(rev) > 12 {
		return rev[:12]
	}
	return rev
}
