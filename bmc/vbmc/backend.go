// Package vbmc is a virtual BMC: a Redfish service (what bmclib/gofish use,
// plus a little more for humans) and a small loopback control endpoint for
// ipmi_sim's chassis_control program, in front of virtual nodes backed by
// memory or by QEMU processes. cmd/anvil-vbmc wraps it.
package vbmc

import (
	"context"
	"fmt"
	"sync"
)

// Boot devices a backend understands (bmclib/ipmitool names).
const (
	BootPXE   = "pxe"
	BootDisk  = "disk"
	BootCDROM = "cdrom"
	BootBIOS  = "bios"
)

// Backend is the machine behind a virtual BMC. Calls for one node are
// serialised by the Node; implementations need not lock for that.
type Backend interface {
	// PowerOn starts the machine booting from dev; no-op when on.
	PowerOn(ctx context.Context, dev string) error
	// PowerOff cuts power at once; no-op when off.
	PowerOff(ctx context.Context) error
	// Shutdown asks the OS to power off (ACPI) and returns without waiting;
	// a backend may force the power off after its own timeout.
	Shutdown(ctx context.Context) error
	// Reset restarts a running machine from dev (hard reset).
	Reset(ctx context.Context, dev string) error
	// On reports whether the machine is powered.
	On(ctx context.Context) (bool, error)
	// Close releases the machine (stops a process).
	Close() error
}

// Memory is an in-memory Backend: state changes at once. Shutdown powers off
// at once unless IgnoreShutdown is set (an OS that ignores ACPI).
type Memory struct {
	mu             sync.Mutex
	on             bool
	bootedFrom     string
	boots          int
	media          string
	IgnoreShutdown bool
	// NoMedia: a BMC without virtual media.
	NoMedia bool
}

// NewMemory returns a powered-off in-memory backend.
func NewMemory() *Memory { return &Memory{} }

// PowerOn implements Backend.
func (m *Memory) PowerOn(_ context.Context, dev string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.on {
		m.on, m.bootedFrom = true, dev
		m.boots++
	}
	return nil
}

// PowerOff implements Backend.
func (m *Memory) PowerOff(context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.on = false
	return nil
}

// Shutdown implements Backend.
func (m *Memory) Shutdown(context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.IgnoreShutdown {
		m.on = false
	}
	return nil
}

// Reset implements Backend.
func (m *Memory) Reset(_ context.Context, dev string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.on {
		return fmt.Errorf("reset: machine is off")
	}
	m.bootedFrom = dev
	m.boots++
	return nil
}

// On implements Backend.
func (m *Memory) On(context.Context) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.on, nil
}

// Close implements Backend.
func (m *Memory) Close() error { return nil }

// Boots reports how many times the machine started and the device of the
// last start, for tests.
func (m *Memory) Boots() (int, string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.boots, m.bootedFrom
}
