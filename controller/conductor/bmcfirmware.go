package conductor

// The BMC hardware types' firmware interface: the versions a node runs
// (FirmwareComponents, cached as Ironic's firmware_information), and the
// BMC side of firmware.update (StartFirmwareUpdate, FirmwareTask) that
// the firmware flow (firmware.go) drives. Redfish only: IPMI has no
// firmware update, and its nodes offer no firmware step.

import (
	"context"
	"fmt"

	"github.com/anvil-metal/anvil/bmc"
	"github.com/anvil-metal/anvil/controller/store"
	"github.com/anvil-metal/anvil/protocol"
)

// FirmwareInterface implements firmwareProvider: the redfish type's
// firmware interface; nil on IPMI, which has none, and for a node whose
// firmware_interface is no-firmware (as in Ironic; a node stored before
// the field existed has the type's default).
func (d *BMCDriver) FirmwareInterface(n *store.Node) firmwareDriver {
	if d.hw == bmc.HardwareIPMI || (n != nil && n.Interfaces.Firmware == "no-firmware") {
		return nil
	}
	return bmcFirmware{d}
}

// bmcFirmware is the firmware interface of a BMC type.
type bmcFirmware struct{ d *BMCDriver }

// FirmwareComponents implements firmwareDriver.
func (f bmcFirmware) FirmwareComponents(ctx context.Context, n *store.Node) ([]bmc.FirmwareComponent, error) {
	d := f.d
	t, err := d.target(n)
	if err != nil {
		return nil, err
	}
	comps, _, err := d.m.Firmware(ctx, t)
	return comps, err
}

// StartFirmwareUpdate implements firmwareDriver; the request is in the
// node's history with how the BMC answered.
func (f bmcFirmware) StartFirmwareUpdate(ctx context.Context, n *store.Node, c bmc.FirmwareComponent, url string) (string, error) {
	d := f.d
	t, err := d.target(n)
	if err != nil {
		return "", err
	}
	task, o, err := d.m.UpdateFirmware(ctx, t, c, url)
	d.record(ctx, n, "firmware update of "+c.Component+" asked", o, err)
	return task, err
}

// FirmwareTask implements firmwareDriver.
func (f bmcFirmware) FirmwareTask(ctx context.Context, n *store.Node, uri string) (bmc.FirmwareTask, error) {
	d := f.d
	t, err := d.target(n)
	if err != nil {
		return bmc.FirmwareTask{}, err
	}
	tk, _, err := d.m.FirmwareTask(ctx, t, uri)
	return tk, err
}

// firmwareToStore maps the versions read to the cache's rows; flashed
// gives last_version_flashed for what an update wrote.
func firmwareToStore(comps []bmc.FirmwareComponent, flashed map[string]string) []store.FirmwareComponent {
	out := make([]store.FirmwareComponent, 0, len(comps))
	for _, c := range comps {
		row := store.FirmwareComponent{Component: c.Component, CurrentVersion: c.Version}
		if v, ok := flashed[c.Component]; ok && v != "" {
			row.LastVersionFlashed = &v
		}
		out = append(out, row)
	}
	return out
}

// checkFirmwareArgs refuses a firmware step the node cannot run, or whose
// arguments are malformed, before the request is accepted.
func (d *BMCDriver) checkFirmwareArgs(n *store.Node, s protocol.Step) error {
	if d.FirmwareInterface(n) == nil {
		if d.hw != bmc.HardwareIPMI {
			return fmt.Errorf("step %s: node %s has firmware_interface no-firmware (set it to redfish to update firmware)", s.Key(), n.UUID)
		}
		return fmt.Errorf("step %s: firmware updates are not supported by the %s driver (use the redfish hardware type)", s.Key(), d.hw)
	}
	var err error
	switch s.Step {
	case "update":
		if _, given := s.Args["settings"]; given {
			_, err = updateSettings(s.Args)
		}
	case "verify":
		_, err = baselineArg(n, s.Args)
	}
	if err != nil {
		return fmt.Errorf("step %s: %w", s.Key(), err)
	}
	return nil
}
