package kmod

import (
	"fmt"
	"log/slog"
	"path/filepath"

	"github.com/u-root/u-root/pkg/kmodule"
	"golang.org/x/sys/unix"
)

// KernelLoader loads modules of the running kernel from
// /lib/modules/$(uname -r) (modules.dep, modules.builtin), with u-root's
// kmodule: dependencies first, in parallel, each file once, built-in and
// already loaded modules skipped.
type KernelLoader struct {
	prober *kmodule.Prober
}

var _ Loader = (*KernelLoader)(nil)

// NewKernelLoader reads modules.dep and /proc/modules.
func NewKernelLoader() (*KernelLoader, error) {
	p, err := kmodule.NewProber(kmodule.ProbeOpts{})
	if err != nil {
		return nil, fmt.Errorf("kernel modules: %w", err)
	}
	return &KernelLoader{prober: p}, nil
}

// Load implements Loader.
func (k *KernelLoader) Load(name string) error {
	if err := k.prober.Probe(name, ""); err != nil {
		return fmt.Errorf("load %s: %w", name, err)
	}
	return nil
}

// ForRunningKernel is a Coldplug over /sys with the running
// kernel's modules.alias and KernelLoader.
func ForRunningKernel(log *slog.Logger) (*Coldplug, error) {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return nil, fmt.Errorf("uname: %w", err)
	}
	release := unix.ByteSliceToString(u.Release[:])
	aliases, err := ReadAliases(filepath.Join("/lib/modules", release, "modules.alias"))
	if err != nil {
		return nil, err
	}
	loader, err := NewKernelLoader()
	if err != nil {
		return nil, err
	}
	return &Coldplug{Sys: "/sys", Aliases: aliases, Loader: loader, Log: log}, nil
}
