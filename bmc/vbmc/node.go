package vbmc

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// Redfish boot override values.
const (
	OverrideDisabled   = "Disabled"
	OverrideOnce       = "Once"
	OverrideContinuous = "Continuous"
	ModeLegacy         = "Legacy"
	ModeUEFI           = "UEFI"
)

// redfishTarget maps a Redfish BootSourceOverrideTarget to a backend device.
func redfishTarget(target string) (dev string, ok bool) {
	switch target {
	case "Pxe":
		return BootPXE, true
	case "Hdd":
		return BootDisk, true
	case "Cd":
		return BootCDROM, true
	case "BiosSetup":
		return BootBIOS, true
	case "None":
		return "", true
	}
	return "", false
}

// BootOverride is a node's boot source override, in Redfish terms.
type BootOverride struct {
	Target  string // None, Pxe, Hdd, Cd, BiosSetup
	Enabled string // Disabled, Once, Continuous
	Mode    string // Legacy, UEFI
}

// Node is one virtual machine behind the BMC. It owns the boot override
// (a BMC concept the backend does not know) and serialises backend calls.
type Node struct {
	Name    string
	backend Backend

	mu         sync.Mutex
	boot       BootOverride
	media      Media
	mediaFile  string
	lastAction map[string]time.Time // for de-duplicating ipmi_sim re-runs

	bios biosState // BIOS settings and quirks (bios.go), under their own lock
	hw   hwState   // health and hardware inventory (inventory.go), under their own lock
}

// NewNode returns a node named name backed by b, with no boot override.
func NewNode(name string, b Backend) *Node {
	return &Node{Name: name, backend: b, boot: BootOverride{Target: "None", Enabled: OverrideDisabled, Mode: ModeLegacy}, lastAction: map[string]time.Time{}}
}

// Backend returns the node's backend.
func (n *Node) Backend() Backend { return n.backend }

// Boot returns the current boot override.
func (n *Node) Boot() BootOverride {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.boot
}

// SetBoot validates and stores a boot override; empty fields keep their
// value.
func (n *Node) SetBoot(b BootOverride) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	next := n.boot
	if b.Target != "" {
		if _, ok := redfishTarget(b.Target); !ok {
			return fmt.Errorf("unsupported BootSourceOverrideTarget %q", b.Target)
		}
		next.Target = b.Target
	}
	if b.Enabled != "" {
		switch b.Enabled {
		case OverrideDisabled, OverrideOnce, OverrideContinuous:
		default:
			return fmt.Errorf("unsupported BootSourceOverrideEnabled %q", b.Enabled)
		}
		next.Enabled = b.Enabled
	}
	if b.Mode != "" {
		if b.Mode != ModeLegacy && b.Mode != ModeUEFI {
			return fmt.Errorf("unsupported BootSourceOverrideMode %q", b.Mode)
		}
		next.Mode = b.Mode
	}
	n.boot = next
	return nil
}

// nextBootDevice returns the device for a boot starting now and consumes a
// one-time override. Called with n.mu held.
func (n *Node) nextBootDevice() string {
	dev := BootDisk
	if n.boot.Enabled != OverrideDisabled && n.boot.Target != "None" {
		dev, _ = redfishTarget(n.boot.Target)
	}
	if n.boot.Enabled == OverrideOnce {
		n.boot.Enabled, n.boot.Target = OverrideDisabled, "None"
	}
	return dev
}

// On reports whether the node is powered.
func (n *Node) On(ctx context.Context) (bool, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.backend.On(ctx)
}

// Reset types (Redfish names).
const (
	ResetOn               = "On"
	ResetForceOff         = "ForceOff"
	ResetGracefulShutdown = "GracefulShutdown"
	ResetForceRestart     = "ForceRestart"
	// ResetGracefulRestart asks the OS to reboot; the power stays on
	// (Ironic's Redfish soft reboot). QEMU's guests get a system reset.
	ResetGracefulRestart = "GracefulRestart"
	ResetPowerCycle      = "PowerCycle"
	ResetNmi             = "Nmi"
)

// ResetTypes returns the reset types a node accepts.
func ResetTypes() []string {
	return []string{ResetOn, ResetForceOff, ResetGracefulShutdown, ResetForceRestart, ResetGracefulRestart, ResetPowerCycle, ResetNmi}
}

// Reset performs a Redfish reset type. Restart and cycle of an off node
// power it on, like most BMCs.
func (n *Node) Reset(ctx context.Context, resetType string) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	on, err := n.backend.On(ctx)
	if err != nil {
		return err
	}
	switch resetType {
	case ResetOn:
		if on {
			return nil
		}
		return n.backend.PowerOn(ctx, n.nextBootDevice())
	case ResetForceOff:
		if !on {
			return nil
		}
		return n.backend.PowerOff(ctx)
	case ResetGracefulShutdown:
		if !on {
			return nil
		}
		return n.backend.Shutdown(ctx)
	case ResetForceRestart, ResetGracefulRestart:
		if !on {
			return n.backend.PowerOn(ctx, n.nextBootDevice())
		}
		return n.backend.Reset(ctx, n.nextBootDevice())
	case ResetPowerCycle:
		if on {
			if err := n.backend.PowerOff(ctx); err != nil {
				return err
			}
		}
		return n.backend.PowerOn(ctx, n.nextBootDevice())
	case ResetNmi:
		return nil
	}
	return fmt.Errorf("unsupported ResetType %q", resetType)
}

// dedupe reports whether the same action ran within window; ipmitool
// retransmits after ~1 s and ipmi_sim runs the control program again for
// the retransmission, which must not reset a node twice.
func (n *Node) dedupe(action string, window time.Duration) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	now := time.Now()
	if t, ok := n.lastAction[action]; ok && now.Sub(t) < window {
		return true
	}
	n.lastAction[action] = now
	return false
}
