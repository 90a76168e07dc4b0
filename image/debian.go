package image

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
)

// Debian fetches binary packages with apt-get download and unpacks them
// with dpkg -x into a cache directory. Nothing is installed on the host;
// the host's apt configuration (sources, proxy) decides where they come
// from.
type Debian struct {
	// CacheDir keeps the .deb files and their unpacked trees
	// (<CacheDir>/<name>_<version>/).
	CacheDir string
	Log      *slog.Logger
}

// Package is one downloaded and unpacked Debian package.
type Package struct {
	Name    string `json:"name"`
	Version string `json:"version"`
	Deb     string `json:"-"` // path of the .deb
	Root    string `json:"-"` // where it was unpacked
}

// Candidates returns the version apt would download for each name (one
// apt-cache call for all of them).
func (d Debian) Candidates(ctx context.Context, names ...string) (map[string]string, error) {
	out, err := run(ctx, "", "apt-cache", append([]string{"policy"}, names...)...)
	if err != nil {
		return nil, err
	}
	versions := parsePolicy(out)
	for _, n := range names {
		if versions[n] == "" {
			return nil, fmt.Errorf("apt has no candidate for %s (run apt-get update?)", n)
		}
	}
	return versions, nil
}

// parsePolicy reads the Candidate: line of each package in apt-cache
// policy output.
func parsePolicy(out string) map[string]string {
	versions := map[string]string{}
	cur := ""
	for _, line := range strings.Split(out, "\n") {
		if !strings.HasPrefix(line, " ") && strings.HasSuffix(line, ":") {
			cur = strings.TrimSuffix(line, ":")
			continue
		}
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "Candidate:"); ok && cur != "" {
			if v = strings.TrimSpace(v); v != "" && v != "(none)" {
				versions[cur] = v
			}
		}
	}
	return versions
}

// Depends lists, for each name, the packages it depends on (first
// alternative only, virtual packages skipped), in one apt-cache call.
func (d Debian) Depends(ctx context.Context, names ...string) (map[string][]string, error) {
	out, err := run(ctx, "", "apt-cache", append([]string{"depends", "--no-recommends", "--no-suggests"}, names...)...)
	if err != nil {
		return nil, err
	}
	return parseDepends(out), nil
}

// parseDepends reads apt-cache depends output: a package name at column
// 0, then its indented dependencies.
func parseDepends(out string) map[string][]string {
	deps := map[string][]string{}
	cur := ""
	for _, line := range strings.Split(out, "\n") {
		if !strings.HasPrefix(line, " ") {
			cur = strings.TrimSpace(line)
			continue
		}
		line = strings.TrimPrefix(strings.TrimSpace(line), "|")
		for _, kind := range []string{"Depends:", "PreDepends:"} {
			if v, ok := strings.CutPrefix(line, kind); ok {
				if v = strings.TrimSpace(v); !strings.HasPrefix(v, "<") { // <virtual>
					deps[cur] = append(deps[cur], v)
				}
			}
		}
	}
	return deps
}

// Fetch downloads name at version (unless already cached) and unpacks it.
func (d Debian) Fetch(ctx context.Context, name, version string) (Package, error) {
	p := Package{Name: name, Version: version}
	dir := filepath.Join(d.CacheDir, "debs")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return p, fmt.Errorf("debian cache: %w", err)
	}
	// apt-get download names files <name>_<version with ':' escaped>_<arch>.deb.
	pattern := filepath.Join(dir, fmt.Sprintf("%s_%s_*.deb", name, strings.ReplaceAll(version, ":", "%3a")))
	matches, _ := filepath.Glob(pattern)
	if len(matches) == 0 {
		d.Log.Info("apt-get download", "package", name, "version", version)
		if _, err := run(ctx, dir, "apt-get", "download", name+"="+version); err != nil {
			return p, err
		}
		if matches, _ = filepath.Glob(pattern); len(matches) == 0 {
			return p, fmt.Errorf("apt-get download %s=%s: no file matching %s", name, version, pattern)
		}
	}
	p.Deb = matches[0]
	p.Root = filepath.Join(d.CacheDir, "root", fmt.Sprintf("%s_%s", name, strings.ReplaceAll(version, ":", "_")))
	done := filepath.Join(p.Root, ".unpacked")
	if _, err := os.Stat(done); err == nil {
		return p, nil
	}
	if err := os.RemoveAll(p.Root); err != nil {
		return p, fmt.Errorf("clean %s: %w", p.Root, err)
	}
	if err := os.MkdirAll(p.Root, 0o755); err != nil {
		return p, fmt.Errorf("unpack %s: %w", name, err)
	}
	if _, err := run(ctx, "", "dpkg", "-x", p.Deb, p.Root); err != nil {
		return p, err
	}
	if err := os.WriteFile(done, nil, 0o644); err != nil {
		return p, fmt.Errorf("unpack %s: %w", name, err)
	}
	return p, nil
}

// Kernel is an unpacked Debian kernel image package.
type Kernel struct {
	Meta    Package // e.g. linux-image-cloud-amd64
	Image   Package // e.g. linux-image-6.1.0-56-cloud-amd64
	Release string  // uname -r, e.g. 6.1.0-56-cloud-amd64
	Vmlinuz string  // path of the kernel image
	Config  string  // path of the kernel's config file
}

// ModulesDir is /lib/modules/<release> of the unpacked kernel.
func (k Kernel) ModulesDir() string {
	return filepath.Join(k.Image.Root, "lib", "modules", k.Release)
}

// Plan is what a build fetches from Debian, resolved in two apt-cache
// calls: the kernel metapackage, the ABI package it points at, programs
// with the lib* packages they depend on, and data packages.
type Plan struct {
	KernelMeta string
	KernelABI  string
	Programs   map[string][]string // program package -> its lib* dependencies
	// Data are packages used only for files they ship (e.g.
	// ca-certificates): nothing of theirs runs, so their dependencies
	// are not fetched.
	Data     []string
	Versions map[string]string // package -> candidate version
}

// Resolve plans the fetch of kernel metapackage meta, programs and data
// packages.
func (d Debian) Resolve(ctx context.Context, meta string, programs, data []string) (Plan, error) {
	p := Plan{KernelMeta: meta, Programs: map[string][]string{}, Data: data}
	deps, err := d.Depends(ctx, append([]string{meta}, programs...)...)
	if err != nil {
		return p, err
	}
	for _, dep := range deps[meta] {
		if strings.HasPrefix(dep, "linux-image-") {
			p.KernelABI = dep
			break
		}
	}
	if p.KernelABI == "" {
		return p, fmt.Errorf("%s depends on no linux-image-* package (deps: %v)", meta, deps[meta])
	}
	all := []string{meta, p.KernelABI}
	for _, prog := range programs {
		all = append(all, prog)
		var libs []string
		for _, dep := range deps[prog] {
			if strings.HasPrefix(dep, "lib") {
				libs = append(libs, dep)
			}
		}
		sort.Strings(libs)
		p.Programs[prog] = libs
		all = append(all, libs...)
	}
	all = append(all, data...)
	if p.Versions, err = d.Candidates(ctx, all...); err != nil {
		return p, err
	}
	return p, nil
}

// FetchKernel downloads and unpacks the planned kernel packages and runs
// depmod on the unpacked tree (the .deb ships no modules.dep).
func (d Debian) FetchKernel(ctx context.Context, plan Plan) (Kernel, error) {
	var k Kernel
	var err error
	if k.Meta, err = d.Fetch(ctx, plan.KernelMeta, plan.Versions[plan.KernelMeta]); err != nil {
		return k, err
	}
	if k.Image, err = d.Fetch(ctx, plan.KernelABI, plan.Versions[plan.KernelABI]); err != nil {
		return k, err
	}
	k.Release = strings.TrimPrefix(plan.KernelABI, "linux-image-")
	k.Vmlinuz = filepath.Join(k.Image.Root, "boot", "vmlinuz-"+k.Release)
	k.Config = filepath.Join(k.Image.Root, "boot", "config-"+k.Release)
	for _, f := range []string{k.Vmlinuz, k.Config, k.ModulesDir()} {
		if _, err := os.Stat(f); err != nil {
			return k, fmt.Errorf("kernel package %s: %w", plan.KernelABI, err)
		}
	}
	if _, err := os.Stat(filepath.Join(k.ModulesDir(), "modules.dep")); errors.Is(err, os.ErrNotExist) {
		d.Log.Info("depmod", "release", k.Release)
		if _, err := run(ctx, "", "depmod", "-b", k.Image.Root, k.Release); err != nil {
			return k, err
		}
	}
	return k, nil
}

// KernelConfig reads the =y/=m options of a kernel config file.
func KernelConfig(path string) (map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("kernel config: %w", err)
	}
	defer f.Close()
	cfg := map[string]string{}
	s := bufio.NewScanner(f)
	for s.Scan() {
		if k, v, ok := strings.Cut(s.Text(), "="); ok && strings.HasPrefix(k, "CONFIG_") {
			cfg[k] = v
		}
	}
	return cfg, s.Err()
}

// FetchProgram downloads and unpacks a planned program package and the
// lib* packages it depends on; the ELF dependency walker searches their
// roots in order.
func (d Debian) FetchProgram(ctx context.Context, plan Plan, name string) ([]Package, error) {
	var pkgs []Package
	for _, n := range append([]string{name}, plan.Programs[name]...) {
		p, err := d.Fetch(ctx, n, plan.Versions[n])
		if err != nil {
			return nil, err
		}
		pkgs = append(pkgs, p)
	}
	return pkgs, nil
}

// run runs a command in dir, returning its stdout; the error carries stderr.
func run(ctx context.Context, dir, name string, args ...string) (string, error) {
	return runEnv(ctx, dir, nil, name, args...)
}

// runEnv is run with an environment (nil: inherit).
func runEnv(ctx context.Context, dir string, env []string, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir, cmd.Env = dir, env
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}
