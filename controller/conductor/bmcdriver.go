package conductor

// The hardware types with a real BMC (ipmi, redfish): their Driver.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/anvil-metal/anvil/bmc"
	"github.com/anvil-metal/anvil/controller/store"
	"github.com/anvil-metal/anvil/protocol"
)

// BMCDriver is a real hardware type (ipmi or redfish): power and boot
// device out of band through bmc.Manager; disks in band through the agent
// (its nodes default to the direct deploy and agent inspect interfaces).
type BMCDriver struct {
	hw string
	m  *bmc.Manager
	// note records what happened on the BMC (which provider answered) in
	// the node's history.
	note func(ctx context.Context, nodeUUID, severity, msg string)
	// BIOSApplyTimeout bounds the wait, after the reboot of a bios step,
	// for the BIOS to report what was asked; BIOSPollInterval paces its
	// reads. Zero: 15 minutes, 15 seconds (a server's POST).
	BIOSApplyTimeout, BIOSPollInterval time.Duration
}

// NewBMCDriver returns the hardware type hw ("ipmi" or "redfish") over m.
// note may be nil.
func NewBMCDriver(hw string, m *bmc.Manager, note func(ctx context.Context, nodeUUID, severity, msg string)) *BMCDriver {
	if note == nil {
		note = func(context.Context, string, string, string) {}
	}
	return &BMCDriver{hw: hw, m: m, note: note}
}

// Name of the hardware type.
func (d *BMCDriver) Name() string { return d.hw }

func (d *BMCDriver) target(n *store.Node) (bmc.Target, error) {
	t, err := bmc.ParseDriverInfo(d.hw, n.DriverInfo)
	if err != nil {
		return t, err
	}
	t.ID = n.UUID
	return t, nil
}

// Validate checks driver_info; the in-band interfaces need the agent only.
func (d *BMCDriver) Validate(n *store.Node) map[string]error {
	_, err := d.target(n)
	out := map[string]error{"power": err, "management": err, "boot": nil, "deploy": nil, "inspect": nil,
		"console": errors.New("no console interface is enabled"), "network": nil, "raid": nil,
		"rescue": errors.New("no rescue interface is enabled"), "storage": nil, "bios": nil}
	if !d.biosEnabled(n) {
		out["bios"] = errors.New("no bios interface is enabled")
	}
	if n.Interfaces.Console == "ipmitool-socat" {
		_, out["console"] = bmc.ParseDriverInfo(bmc.HardwareIPMI, n.DriverInfo)
	}
	out["firmware"] = nil
	if d.FirmwareInterface(n) == nil {
		out["firmware"] = errors.New("no firmware interface is enabled")
	}
	if !UsesAgent(n) {
		out["deploy"] = fmt.Errorf("deploy interface %q is not supported by %s; use direct", n.Interfaces.Deploy, d.hw)
	}
	return out
}

func (d *BMCDriver) record(ctx context.Context, n *store.Node, what string, o bmc.Outcome, err error) {
	if err != nil {
		d.note(ctx, n.UUID, "ERROR", fmt.Sprintf("bmc: %s failed after %d attempt(s) in %s: %v", what, o.Attempts, o.Duration.Round(1e6), err))
		return
	}
	d.note(ctx, n.UUID, "INFO", fmt.Sprintf("bmc: %s via %s (%d attempt(s), %s)", what, o.Provider, o.Attempts, o.Duration.Round(1e6)))
}

// VerifyAccess checks the credentials against the BMC (the manage verb).
func (d *BMCDriver) VerifyAccess(ctx context.Context, n *store.Node) error {
	return d.do(ctx, n, "credentials verified", func(t bmc.Target) (bmc.Outcome, error) { return d.m.Verify(ctx, t) })
}

// do runs op on n's BMC and records it in n's history as what.
func (d *BMCDriver) do(ctx context.Context, n *store.Node, what string, op func(bmc.Target) (bmc.Outcome, error)) error {
	t, err := d.target(n)
	if err != nil {
		return err
	}
	o, err := op(t)
	d.record(ctx, n, what, o, err)
	return err
}

// PowerState reads the power state.
func (d *BMCDriver) PowerState(ctx context.Context, n *store.Node) (string, error) {
	t, err := d.target(n)
	if err != nil {
		return "", err
	}
	ps, _, err := d.m.PowerState(ctx, t)
	return string(ps), err
}

// SetPower performs an Ironic power target, verified by the bmc package.
func (d *BMCDriver) SetPower(ctx context.Context, n *store.Node, target string) error {
	t, err := d.target(n)
	if err != nil {
		return err
	}
	a, err := bmc.ActionForTarget(target)
	if err != nil {
		return err
	}
	o, err := d.m.SetPower(ctx, t, a)
	d.record(ctx, n, "power "+target, o, err)
	return err
}

// SetBootDevice sets the boot device, UEFI when the node boots that way.
func (d *BMCDriver) SetBootDevice(ctx context.Context, n *store.Node, device string, persistent bool) error {
	efi := n.BootMode != nil && *n.BootMode == "uefi"
	if cap, ok := n.Properties["capabilities"].(string); ok && !efi {
		efi = containsBootMode(cap, "uefi")
	}
	return d.do(ctx, n, fmt.Sprintf("boot device %s (persistent=%v, uefi=%v)", device, persistent, efi), func(t bmc.Target) (bmc.Outcome, error) {
		return d.m.SetBootDevice(ctx, t, bmc.BootDevice(device), bmc.BootOptions{Persistent: persistent, EFI: efi})
	})
}

// InsertMedia implements MediaDriver. The URL (which carries the boot's
// key) stays out of the history.
func (d *BMCDriver) InsertMedia(ctx context.Context, n *store.Node, url string) error {
	return d.do(ctx, n, "virtual media inserted", func(t bmc.Target) (bmc.Outcome, error) { return d.m.InsertMedia(ctx, t, url) })
}

// EjectMedia implements MediaDriver.
func (d *BMCDriver) EjectMedia(ctx context.Context, n *store.Node) error {
	return d.do(ctx, n, "virtual media ejected", func(t bmc.Target) (bmc.Outcome, error) { return d.m.EjectMedia(ctx, t) })
}

// containsBootMode reads Ironic's "boot_mode:uefi" capability.
func containsBootMode(capabilities, mode string) bool {
	for _, kv := range splitComma(capabilities) {
		if kv == "boot_mode:"+mode {
			return true
		}
	}
	return false
}

func splitComma(s string) []string {
	var out []string
	start := 0
	for i := 0; i <= len(s); i++ {
		if i == len(s) || s[i] == ',' {
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	return out
}

// CleanSteps are the out-of-band steps: the bios steps on the types with
// BIOS settings (redfish) unless the node's bios_interface is no-bios,
// and the firmware steps (redfish); IPMI has none.
func (d *BMCDriver) CleanSteps(n *store.Node) []protocol.Step {
	steps := d.DeploySteps(n)
	if d.FirmwareInterface(n) != nil {
		steps = append(steps, firmwareSteps(n)...)
	}
	return steps
}

// DeploySteps are the bios steps (Ironic's are both clean and deploy
// steps; its firmware steps are clean and service steps only); the
// deploy interface's steps come from the direct deploy interface.
func (d *BMCDriver) DeploySteps(n *store.Node) []protocol.Step {
	if !d.biosEnabled(n) {
		return nil
	}
	return biosSteps()
}

// ExecuteStep runs an out-of-band step: the bios steps, synchronously.
func (d *BMCDriver) ExecuteStep(ctx context.Context, n *store.Node, _ string, s protocol.Step) (StepStatus, error) {
	if s.Interface == protocol.InterfaceBIOS {
		return StepDone, d.executeBIOSStep(ctx, n, s)
	}
	return StepDone, fmt.Errorf("%s has no out-of-band step %s", d.hw, s.Key())
}

// Inspect is the inspection of the inspect interfaces that have no flow
// of their own (no-inspect): refused. The agent's is in band; redfish's
// is inspectOutOfBand's.
func (d *BMCDriver) Inspect(_ context.Context, n *store.Node) error {
	if d.hw == bmc.HardwareRedfish {
		return fmt.Errorf("inspect interface %q does not inspect: set inspect_interface to agent or redfish", n.Interfaces.Inspect)
	}
	return fmt.Errorf("%s inspects in band: set inspect_interface to agent", d.hw)
}
