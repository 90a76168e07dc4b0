package conductor

// disable_power_off (API 1.95): the one place where the conductor's flows
// power a node off, and the power targets they schedule or boot with.
// Every power-off of a flow goes through powerOff (or offTarget when the
// worker does it), so a node with disable_power_off is never powered off,
// as in Ironic (conductor/utils.py node_power_action refuses it; the
// flows reboot or skip instead: deploy_utils.tear_down_cleaning,
// agent_base tear_down / boot_instance, inspector clean_up).

import (
	"context"

	"github.com/anvil-metal/anvil/controller/store"
)

// What a node with disable_power_off gets instead of a flow's power-off.
const (
	// offReboot: the flow ends here and the node must leave what it runs
	// (the ramdisk after cleaning or inspection, the instance after
	// tear-down): it is rebooted.
	offReboot = true
	// offLeaveOn: a power-on follows in the same flow (which bootTarget
	// turns into a reboot), or the power-off only put back the state the
	// node was found in: it stays on.
	offLeaveOn = false
)

// powerOff powers n off, or, when n has disable_power_off, reboots it
// (rebootInstead) or leaves it running. It returns the power state to
// record. Service flows (servicing) must power nodes off through it too.
func powerOff(ctx context.Context, d Driver, n *store.Node, rebootInstead bool) (string, error) {
	if !n.DisablePowerOff {
		return PowerOff, d.SetPower(ctx, n, PowerOff)
	}
	if rebootInstead {
		return PowerOn, d.SetPower(ctx, n, Rebooting)
	}
	return PowerOn, nil
}

// offTarget is the target power state of a power-off the worker carries
// out later (a failed or aborted agent operation): Rebooting for a node
// with disable_power_off, which leaves the ramdisk without losing power.
func offTarget(n *store.Node) string {
	if n.DisablePowerOff {
		return Rebooting
	}
	return PowerOff
}

// bootTarget is how a flow powers a node on after powerOff: a reboot for
// a node with disable_power_off, which powerOff left running (Ironic's
// boot_instance).
func bootTarget(n *store.Node) string {
	if n.DisablePowerOff {
		return Rebooting
	}
	return PowerOn
}

// refusePowerOff is node_power_action's guard: a power-off of a node with
// disable_power_off is refused with Ironic's PowerStateFailure.
func refusePowerOff(n *store.Node, target string) error {
	if n.DisablePowerOff && resultingPower(target) == PowerOff {
		return Conflict("Failed to set node power state to %s.", target)
	}
	return nil
}
