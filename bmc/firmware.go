package bmc

// Firmware through the BMC: the versions a node runs (Firmware), an update
// the BMC pulls from a URL or is pushed (UpdateFirmware, Redfish
// SimpleUpdate or MultipartHttpPushUri, firmware_push.go) and the BMC's
// task for it (FirmwareTask). The caller (the conductor's firmware
// update) drives the steps between: it watches the task to its end,
// reboots the node where the component needs it, waits for a BMC that
// restarts itself, and reads the version back. IPMI has none of this.

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// Ironic's component names: "bios", "bmc", and "nic:<id>" per NIC.
const (
	ComponentBIOS = "bios"
	ComponentBMC  = "bmc"
	componentNIC  = "nic:"
	componentDisk = "disk:"
)

// IsDiskComponent reports whether name is a disk's component
// ("disk:<id>"), listed where the BMC reports disk firmware; anvil reads
// and checks it but does not flash it.
func IsDiskComponent(name string) bool {
	return strings.HasPrefix(name, componentDisk) && len(name) > len(componentDisk)
}

// IsNICComponent reports whether name is a NIC's component ("nic:<id>").
func IsNICComponent(name string) bool {
	return strings.HasPrefix(name, componentNIC) && len(name) > len(componentNIC)
}

// FirmwareComponent is one firmware a node runs, as its BMC reports it.
type FirmwareComponent struct {
	// Component is Ironic's name: bios, bmc or nic:<id>.
	Component string
	Version   string
	// Name is the BMC's name for it ("System BIOS").
	Name string
	// InventoryURI is the component's FirmwareInventory member, which an
	// update targets ("": the BMC lists none; the update then names no
	// target and the BMC picks by the image).
	InventoryURI string
	// Updateable is the inventory's word (true when it says nothing).
	Updateable bool
}

// FirmwareTask is the BMC's task for an update as last read.
type FirmwareTask struct {
	URI string
	// State is the Redfish TaskState (New, Starting, Running, Completed,
	// Exception, Killed, Cancelled, ...); Status its TaskStatus (OK,
	// Warning, Critical).
	State, Status string
	// Percent is PercentComplete (-1: not given).
	Percent int
	// Messages are the task's messages, as the BMC wrote them.
	Messages []string
	// Gone: the BMC no longer knows the task (404): some purge finished
	// tasks at once (iDRAC). It says nothing of how the update went.
	Gone bool
}

// Finished reports whether the task ended, successfully or not.
func (t FirmwareTask) Finished() bool { return t.Succeeded() || t.Failed() }

// Succeeded: the BMC completed the task and said nothing critical.
func (t FirmwareTask) Succeeded() bool {
	return t.State == "Completed" && t.Status != "Critical"
}

// Failed: the BMC ended the task without completing it, or completed it
// with a critical status.
func (t FirmwareTask) Failed() bool {
	switch t.State {
	case "Exception", "Killed", "Cancelled", "Interrupted":
		return true
	case "Completed":
		return t.Status == "Critical"
	}
	return false
}

// Message is the BMC's messages on one line ("" if none).
func (t FirmwareTask) Message() string { return strings.Join(t.Messages, "; ") }

// firmwareSession is what the firmware operations need from a session;
// only protocols with firmware updates (Redfish, fake) implement it.
type firmwareSession interface {
	firmware(ctx context.Context) ([]FirmwareComponent, error)
	// simpleUpdate asks the BMC to fetch imageURL and flash it to target
	// (an inventory URI, "" for none) and returns the task's URI.
	simpleUpdate(ctx context.Context, imageURL, target string) (string, error)
	task(ctx context.Context, uri string) (FirmwareTask, error)
}

// firmwareUpdater is a firmwareSession that chooses how the BMC gets the
// image (Redfish: SimpleUpdate or a push). ctx bounds each request to the
// BMC, upload the push of an image; it returns the task and the method.
type firmwareUpdater interface {
	startUpdate(ctx, upload context.Context, imageURL, target string) (task, method string, err error)
}

func errNoFirmware(hw string) error {
	return fmt.Errorf("%w: firmware updates are not supported by the %s driver (use the redfish hardware type)", ErrUnsupported, hw)
}

// runFirmware runs one firmware command with the Manager's retries; IPMI
// is refused without contacting the BMC.
func (m *Manager) runFirmware(ctx context.Context, t Target, name string, fn func(context.Context, firmwareSession) error) (Outcome, error) {
	return m.runFirmwareWith(ctx, t, name, true, fn)
}

// runFirmwareWith is runFirmware; retried says whether a failed command
// is tried again. The update request is not: a BMC that took the request
// and then did not answer in time may have started the flash, and a
// second request could start another (the caller decides, knowing more).
func (m *Manager) runFirmwareWith(ctx context.Context, t Target, name string, retried bool, fn func(context.Context, firmwareSession) error) (Outcome, error) {
	if t.HardwareType == HardwareIPMI {
		return Outcome{}, fmt.Errorf("%s %s: %w", name, t, errNoFirmware(t.HardwareType))
	}
	return m.run(ctx, t, name, func(ctx context.Context, op *operation) error {
		// An inventory is many documents (iDRAC lists dozens of
		// members), each a request of its own.
		op.cmdTimeout = max(m.cfg.ConnectTimeout, firmwareCommandTimeout)
		cmd := func(ctx context.Context, s session) error {
			fs, ok := s.(firmwareSession)
			if !ok {
				return errNoFirmware(op.t.HardwareType)
			}
			return fn(ctx, fs)
		}
		if !retried {
			op.attempts++
			err := op.call(ctx, op.minInterval(), cmd)
			if err != nil && op.sess == nil {
				// no session: the request itself never left
				return fmt.Errorf("%w: %w", ErrNotSent, err)
			}
			return err
		}
		return op.retry(ctx, name, cmd)
	})
}

// firmwareCommandTimeout bounds one firmware command (an inventory read, a
// request, a task read).
const firmwareCommandTimeout = time.Minute

// Firmware reads the versions the node runs: the BIOS (the system's
// BiosVersion), the BMC (its manager's FirmwareVersion) and each NIC the
// BMC's firmware inventory lists for this system. Inventory members that
// belong to other systems of the same BMC are left out.
func (m *Manager) Firmware(ctx context.Context, t Target) ([]FirmwareComponent, Outcome, error) {
	var out []FirmwareComponent
	o, err := m.runFirmware(ctx, t, "get_firmware", func(ctx context.Context, s firmwareSession) error {
		var err error
		out, err = s.firmware(ctx)
		return err
	})
	return out, o, err
}

// UpdateFirmware has the BMC flash the image at imageURL to c, and
// returns the URI of the BMC's task. A BMC with SimpleUpdate for such URLs
// fetches the image itself; to one with only MultipartHttpPushUri the
// Manager downloads the image and uploads it, streaming (a download that
// fails is an error before the BMC is asked anything). The method used is
// in the Outcome's Provider ("gofish (MultipartHttpPushUri)") and the log.
// A BMC that refuses answers an error with its own message; nothing is
// flashed then.
func (m *Manager) UpdateFirmware(ctx context.Context, t Target, c FirmwareComponent, imageURL string) (string, Outcome, error) {
	var task, method string
	upload := ctx // not the per-request deadline: a push takes as long as the image
	o, err := m.runFirmwareWith(ctx, t, "update_firmware", false, func(ctx context.Context, s firmwareSession) error {
		var err error
		if u, ok := s.(firmwareUpdater); ok {
			task, method, err = u.startUpdate(ctx, upload, imageURL, c.InventoryURI)
			return err
		}
		method = MethodSimpleUpdate
		task, err = s.simpleUpdate(ctx, imageURL, c.InventoryURI)
		return err
	})
	if err == nil {
		o.Provider += " (" + method + ")"
		m.log.InfoContext(ctx, "bmc: firmware update requested", "bmc", t, "component", c.Component, "method", method, "image", imageURL, "task", task)
	}
	return task, o, err
}

// FirmwareTask reads an update's task. A task the BMC no longer knows is
// Gone, not an error.
func (m *Manager) FirmwareTask(ctx context.Context, t Target, uri string) (FirmwareTask, Outcome, error) {
	var tk FirmwareTask
	o, err := m.runFirmware(ctx, t, "get_firmware_task", func(ctx context.Context, s firmwareSession) error {
		var err error
		tk, err = s.task(ctx, uri)
		return err
	})
	return tk, o, err
}
