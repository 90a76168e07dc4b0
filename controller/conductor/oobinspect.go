package conductor

// Out-of-band inspection (inspect_interface=redfish, as Ironic's
// drivers/modules/redfish/inspect.py): the BMC describes the hardware;
// the inventory is stored in Ironic's shape, the properties filled and
// ports created, without booting the node or changing its power.

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"strings"

	"github.com/anvil-metal/anvil/bmc"
	"github.com/anvil-metal/anvil/controller/state"
	"github.com/anvil-metal/anvil/controller/store"
	"github.com/anvil-metal/anvil/protocol"
)

// InspectRedfish is the out-of-band inspect interface.
const InspectRedfish = "redfish"

// bmcInventory reads n's hardware from its BMC and records the operation
// in the node's history. A function, not a method: BMCDriver's methods
// are what the Driver interfaces need (shape_test caps them).
func bmcInventory(ctx context.Context, d *BMCDriver, n *store.Node) (bmc.Inventory, error) {
	var inv bmc.Inventory
	err := d.do(ctx, n, "hardware inspected", func(t bmc.Target) (bmc.Outcome, error) {
		var o bmc.Outcome
		var err error
		inv, o, err = d.m.Inspect(ctx, t)
		return o, err
	})
	return inv, err
}

// inspectOutOfBand runs a redfish inspection to its end: manageable, or
// inspect failed with the reason.
func (c *inspecting) inspectOutOfBand(ctx context.Context, n *store.Node, d *BMCDriver) error {
	fail := func(msg string) error {
		_, terr := c.transition(ctx, n.UUID, state.Inspecting, state.EvFail, func(m *store.Node) error {
			m.LastError = strp(msg)
			return nil
		})
		return terr
	}
	inv, err := bmcInventory(ctx, d, n)
	if err != nil {
		return fail(fmt.Sprintf("Failed to inspect hardware of node %s: %v", n.UUID, err))
	}
	raw, err := json.Marshal(inv)
	if err != nil {
		return err
	}
	// stored before the check of the essential properties, as Ironic does
	if err := c.st.PutInventory(ctx, n.UUID, raw); err != nil {
		return err
	}
	props := oobProperties(inv)
	if _, ok := props["memory_mb"]; !ok {
		// Ironic's HardwareInspectionFailure
		return fail(fmt.Sprintf("Failed to inspect hardware. Reason: Failed to discover the following properties: memory_mb on node %s", n.UUID))
	}
	nics := make([]protocol.NIC, 0, len(inv.Interfaces))
	for _, i := range inv.Interfaces {
		nics = append(nics, protocol.NIC{Name: i.Name, MACAddress: i.MACAddress})
	}
	// Ironic's ports hook: without a PXE interface in the inventory (a
	// BMC does not know which NIC boots) new ports are not pxe_enabled.
	created, err := c.createPorts(ctx, n.UUID, nics, false)
	if err != nil {
		return err
	}
	// the inspection rules run here too, as Ironic's redfish inspection
	// applies them (phase main) since 32.0
	rules, err := c.runOutOfBandRules(ctx, n, props, inv.Boot, raw)
	if err != nil {
		if msg, ok := ruleFailure(n.UUID, err); ok {
			return fail(msg)
		}
		return err
	}
	_, err = c.transition(ctx, n.UUID, state.Inspecting, state.EvDone, func(m *store.Node) error {
		oobApply(m, props, inv.Boot)
		m.Operation.Disks.InventoryFromBMC = true // the disk guard's expectation (diskguard.go)
		now := c.now()
		m.InspectionFinishedAt = &now
		return rules.apply(m)
	}, append([]*store.Event{c.newEvent(n.UUID, "INFO", "inspection", fmt.Sprintf("inventory stored (out of band, from the BMC): %d CPUs, %d MiB, %d disks, %d NICs; %d ports created",
		inv.CPU.Count, props["memory_mb"], len(inv.Disks), len(inv.Interfaces), created))}, rules.events...)...)
	return err
}

// oobApply writes a redfish inspection's properties into m.
func oobApply(m *store.Node, props map[string]any, boot *bmc.InventoryBoot) {
	if m.Properties == nil {
		m.Properties = map[string]any{}
	}
	for k, v := range props {
		m.Properties[k] = v
	}
	if boot != nil {
		m.Properties["capabilities"] = addBootMode(m.Properties["capabilities"], boot.CurrentBootMode)
	}
}

// runOutOfBandRules runs the inspection rules on the node as the redfish
// inspection leaves it, with the BMC's inventory.
func (c *inspecting) runOutOfBandRules(ctx context.Context, n *store.Node, props map[string]any, boot *bmc.InventoryBoot, raw json.RawMessage) (*ruleOutcome, error) {
	var inventory map[string]any
	if err := json.Unmarshal(raw, &inventory); err != nil {
		return nil, fmt.Errorf("inspection rules: decode the inventory of node %s: %w", n.UUID, err)
	}
	seen := *n
	seen.Properties = maps.Clone(n.Properties)
	oobApply(&seen, props, boot)
	return applyInspectionRules(ctx, c.core, &seen, inventory, map[string]any{})
}

// oobProperties are the scheduling properties of a redfish inspection:
// memory_mb, local_gb (Ironic's: the smallest disk of at least 4 GiB, 0
// for none), cpus and cpu_arch when the BMC tells them.
func oobProperties(inv bmc.Inventory) map[string]any {
	props := map[string]any{"local_gb": inv.LocalGB()}
	if inv.Memory != nil && inv.Memory.PhysicalMB > 0 {
		props["memory_mb"] = inv.Memory.PhysicalMB
	}
	if inv.CPU.Count > 0 {
		props["cpus"] = inv.CPU.Count
	}
	if inv.CPU.Architecture != "" {
		props["cpu_arch"] = inv.CPU.Architecture
	}
	return props
}

// addBootMode adds boot_mode:mode to a capabilities string that names no
// boot mode yet (Ironic keeps an operator's).
func addBootMode(capabilities any, mode string) any {
	s, ok := capabilities.(string)
	if mode == "" || (capabilities != nil && !ok) {
		return capabilities // nothing to add, or not a string: left as it is
	}
	for _, kv := range splitComma(s) {
		if strings.HasPrefix(kv, "boot_mode:") {
			return s
		}
	}
	if s == "" {
		return "boot_mode:" + mode
	}
	return s + ",boot_mode:" + mode
}
