// Package bmc controls servers out of band through their BMC (IPMI or
// Redfish) behind one small typed API.
//
// bmclib v2.3.0 does the protocol work; this package contains what bmclib
// leaves to its caller and what operators keep tripping over in the field:
//   - a bmclib client restricted to the one provider the hardware type
//     names, used by one operation at a time (bmclib's Client keeps one-shot
//     filter state without a lock and is unsafe to share); Redfish ones are
//     kept between operations, one login per BMC rather than per call, and
//     logged out when idle (pool.go);
//   - one operation at a time per IPMI BMC and a minimum spacing between
//     commands, because small BMCs crash or drop UDP packets when hammered;
//     at most RedfishMaxConcurrent per Redfish BMC, so it never runs out of
//     sessions;
//   - errors classified so bad credentials fail at once while "busy" answers
//     (HTTP 409/503, "unable to modify during POST", out of sessions, UDP
//     timeouts, connections refused or reset) are retried with jittered
//     exponential backoff (redfishKind, errors.go);
//   - every set verified by reading the state back, because BMCs answer 200
//     and then ignore the request (bmclib#459) or report failure for requests
//     they carried out (bmclib v2.3.0 Redfish "soft").
//
// IPMI goes through a bmclib provider of this package (ipmitoolProvider,
// registered in each client's registry) instead of bmclib's own ipmitool
// provider, which cannot pass ipmi_priv_level.
//
// BIOS settings (Redfish only) go through gofish on the bmclib session's
// transport and token (redfish_bios.go): bmclib v2.3.0's BIOS calls only
// find systems at four hard-coded ids and cannot read the registry.
package bmc

import (
	"errors"
	"fmt"
	"time"
)

// PowerState is a node's power state as Ironic spells it on the wire.
// The empty string means unknown (Ironic's null).
type PowerState string

// Power states.
const (
	PowerOn      PowerState = "power on"
	PowerOff     PowerState = "power off"
	PowerUnknown PowerState = ""
)

// PowerAction is a power change request.
type PowerAction string

// Power actions. Reboot is a hard reset; Cycle is off then on; both power a
// node on when it is off, as Ironic's reboot does.
const (
	ActionOn         PowerAction = "on"
	ActionOff        PowerAction = "off"
	ActionSoftOff    PowerAction = "soft_off"
	ActionReboot     PowerAction = "reboot"
	ActionSoftReboot PowerAction = "soft_reboot"
	ActionCycle      PowerAction = "cycle"
)

// Valid reports whether a is a known action.
func (a PowerAction) Valid() bool {
	switch a {
	case ActionOn, ActionOff, ActionSoftOff, ActionReboot, ActionSoftReboot, ActionCycle:
		return true
	}
	return false
}

// ActionForTarget maps the target of Ironic's PUT
// /v1/nodes/{id}/states/power ("power on", "power off", "rebooting",
// "soft rebooting", "soft power off") to a PowerAction.
func ActionForTarget(target string) (PowerAction, error) {
	switch target {
	case "power on":
		return ActionOn, nil
	case "power off":
		return ActionOff, nil
	case "rebooting":
		return ActionReboot, nil
	case "soft rebooting":
		return ActionSoftReboot, nil
	case "soft power off":
		return ActionSoftOff, nil
	}
	return "", fmt.Errorf("%w: power target %q", ErrUnsupported, target)
}

// target is the power state the action leaves the node in.
func (a PowerAction) target() PowerState {
	if a == ActionOff || a == ActionSoftOff {
		return PowerOff
	}
	return PowerOn
}

// BootDevice is the device a node boots from next.
type BootDevice string

// Boot devices (the names bmclib and ipmitool use).
const (
	BootPXE   BootDevice = "pxe"
	BootDisk  BootDevice = "disk"
	BootCDROM BootDevice = "cdrom"
	BootBIOS  BootDevice = "bios"
)

// Valid reports whether d is a known boot device.
func (d BootDevice) Valid() bool {
	switch d {
	case BootPXE, BootDisk, BootCDROM, BootBIOS:
		return true
	}
	return false
}

// BootOptions qualify a boot device override.
type BootOptions struct {
	// Persistent keeps the override for every boot instead of the next one.
	Persistent bool
	// EFI asks for a UEFI boot rather than legacy BIOS.
	EFI bool
}

// Outcome says how an operation went; the controller records it on the
// node's history so operators can see which provider answered and how hard it
// was to get there.
type Outcome struct {
	// Provider is the bmclib provider that succeeded ("ipmitool", "gofish",
	// "fake").
	Provider string
	// Attempts counts the BMC commands tried (state read, set, read-backs),
	// retries included; more than the minimum means the BMC was busy.
	Attempts int
	// Duration is the wall time of the whole operation, waiting for the BMC
	// lock and verification included.
	Duration time.Duration
}

// Errors returned by the Manager, wrapped with details; test with errors.Is.
var (
	// ErrAuth: the BMC rejected the credentials. Never retried.
	ErrAuth = errors.New("bmc: authentication failed")
	// ErrUnreachable: no answer from the BMC (refused, timed out) after retries.
	ErrUnreachable = errors.New("bmc: unreachable")
	// ErrBusy: the BMC kept answering "busy" (HTTP 409/503) after retries.
	ErrBusy = errors.New("bmc: busy")
	// ErrVerify: the BMC accepted a change but reading back shows it did not hold.
	ErrVerify = errors.New("bmc: verification failed")
	// ErrInvalidDriverInfo: driver_info is missing keys or has malformed values.
	ErrInvalidDriverInfo = errors.New("bmc: invalid driver_info")
	// ErrUnsupported: the hardware type or provider cannot do this.
	ErrUnsupported = errors.New("bmc: unsupported")
	// ErrNotSent: a command that is not retried (a firmware update
	// request) failed before it was sent (no session could be opened):
	// the BMC started nothing, and asking again is safe.
	ErrNotSent = errors.New("bmc: not sent")
)
