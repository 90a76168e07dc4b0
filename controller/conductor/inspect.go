package conductor

// The inspection flow: out of band by the driver (inspect interface
// redfish: oobinspect.go), or in band by the agent (inspect interface
// agent), whose inventory fills the node's properties and creates its
// ports.

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net"

	"github.com/google/uuid"

	"github.com/anvil-metal/anvil/controller/state"
	"github.com/anvil-metal/anvil/controller/store"
	"github.com/anvil-metal/anvil/protocol"
	"github.com/anvil-metal/anvil/protocol/lldp"
)

// inspecting advances nodes in state inspecting and ends the agent's
// inspection.
type inspecting struct {
	*machine
	agents *agents
}

func (c *inspecting) inspect(ctx context.Context, n *store.Node, d Driver) error {
	if usesAgentInspect(n) {
		return c.startAgentInspection(ctx, n, d)
	}
	if bd, ok := d.(*BMCDriver); ok && n.Interfaces.Inspect == InspectRedfish {
		return c.inspectOutOfBand(ctx, n, bd)
	}
	if err := d.Inspect(ctx, n); err != nil {
		_, terr := c.transition(ctx, n.UUID, state.Inspecting, state.EvFail, func(m *store.Node) error {
			m.LastError = strp(fmt.Sprintf("Failed to inspect hardware of node %s: %v", n.UUID, err))
			return nil
		})
		return terr
	}
	_, err := c.transition(ctx, n.UUID, state.Inspecting, state.EvDone, func(m *store.Node) error {
		now := c.now()
		m.InspectionFinishedAt = &now
		return nil
	})
	return err
}

// startAgentInspection boots the ramdisk for inspection.
func (c *inspecting) startAgentInspection(ctx context.Context, n *store.Node, d Driver) error {
	if ok, err := c.agents.startOnRunningAgent(ctx, n, "inspection", inventoryOnRunningAgent(c.now())); err != nil {
		return err
	} else if ok {
		_, err := c.transition(ctx, n.UUID, state.Inspecting, state.EvWait, nil)
		return err
	}
	aw, err := c.agents.bootRamdisk(ctx, n, d, "boot", "")
	if err != nil {
		_, terr := c.transition(ctx, n.UUID, state.Inspecting, state.EvFail, func(m *store.Node) error {
			m.LastError = strp(fmt.Sprintf("Failed to inspect node %s: %v", n.UUID, err))
			return nil
		})
		return terr
	}
	_, err = c.transition(ctx, n.UUID, state.Inspecting, state.EvWait, func(m *store.Node) error {
		awaitBoot(m, aw)
		m.PowerState = strp(PowerOn) // our own reboot: not a drift for power sync
		return nil
	})
	return err
}

// finishInspection stores the inventory the agent reported, fills the node's
// properties, creates ports for NICs that have none, runs the inspection
// rules (their node changes go in the same write) and powers off.
func (c *inspecting) finishInspection(ctx context.Context, n *store.Node, d Driver, st protocol.CommandStatus) error {
	fail := func(msg string) error {
		c.agents.ejectMedia(ctx, n, d, "inspection failed, leaving the ramdisk", true)
		_, _ = powerOff(ctx, d, n, offReboot)
		_, err := c.transition(ctx, n.UUID, state.InspectWait, state.EvFail, func(m *store.Node) error {
			m.LastError = strp(msg)
			wipeAgent(m)
			return nil
		})
		return err
	}
	if st.State == protocol.CommandFailed {
		msg := "the agent could not collect the inventory"
		if st.Error != nil {
			msg = st.Error.Message
		}
		return fail(fmt.Sprintf("Failed to inspect node %s: %s", n.UUID, msg))
	}
	var inv protocol.Inventory
	if err := json.Unmarshal(st.Result, &inv); err != nil {
		return fail(fmt.Sprintf("Failed to inspect node %s: the agent's inventory does not decode: %v", n.UUID, err))
	}
	if err := c.st.PutInventory(ctx, n.UUID, st.Result); err != nil {
		return err
	}
	created, err := c.createPorts(ctx, n.UUID, inv.Interfaces, true)
	if err != nil {
		return err
	}
	rules, err := c.runInspectionRules(ctx, n, inv, st.Result)
	if err != nil {
		if msg, ok := ruleFailure(n.UUID, err); ok {
			return fail(msg)
		}
		return err
	}
	keep := canKeepAgent(n, c.cfg.FastTrack)
	ps := PowerOn
	if !keep {
		c.agents.ejectMedia(ctx, n, d, "inspection done, leaving the ramdisk", true)
		ps, err = powerOff(ctx, d, n, offReboot)
	}
	if err != nil {
		return fail(fmt.Sprintf("Inspection of node %s collected the inventory but could not power the node off: %v", n.UUID, err))
	}
	if keep {
		rules.events = append(rules.events, c.keptEvent(n, "inspection"))
	}
	_, err = c.transition(ctx, n.UUID, state.InspectWait, state.EvDone, func(m *store.Node) error {
		for k, v := range inventoryProperties(inv) {
			m.Properties[k] = v
		}
		now := c.now()
		m.InspectionFinishedAt = &now
		m.PowerState = strp(ps)
		m.Operation.Disks.InventoryFromBMC = false
		if keep {
			keepAgent(m, now)
		} else {
			wipeAgent(m)
		}
		return rules.apply(m)
	}, append([]*store.Event{c.newEvent(n.UUID, "INFO", "inspection", fmt.Sprintf("inventory stored: %d CPUs, %d MiB, %d disks, %d NICs; %d ports created",
		inv.CPU.Count, inv.Memory.PhysicalMB, len(inv.Disks), len(inv.Interfaces), created))}, rules.events...)...)
	return err
}

// runInspectionRules runs the inspection rules on the node as the
// inspection leaves it (its properties from the inventory).
func (c *inspecting) runInspectionRules(ctx context.Context, n *store.Node, inv protocol.Inventory, raw json.RawMessage) (*ruleOutcome, error) {
	var inventory map[string]any
	if err := json.Unmarshal(raw, &inventory); err != nil {
		return nil, fmt.Errorf("inspection rules: decode the inventory of node %s: %w", n.UUID, err)
	}
	plugin := InventoryPluginData(inv)
	seen := *n
	seen.Properties = maps.Clone(n.Properties)
	if seen.Properties == nil {
		seen.Properties = map[string]any{}
	}
	maps.Copy(seen.Properties, inventoryProperties(inv))
	return applyInspectionRules(ctx, c.core, &seen, inventory, plugin)
}

// inventoryProperties derives Ironic's scheduling properties. local_gb is
// the largest disk in GiB minus one, as Ironic reserves one for partitioning.
func inventoryProperties(inv protocol.Inventory) map[string]any {
	props := map[string]any{}
	if inv.CPU.Count > 0 {
		props["cpus"] = inv.CPU.Count
	}
	if inv.CPU.Architecture != "" {
		props["cpu_arch"] = inv.CPU.Architecture
	}
	if inv.Memory.PhysicalMB > 0 {
		props["memory_mb"] = inv.Memory.PhysicalMB
	}
	var largest uint64
	for _, disk := range inv.Disks {
		if disk.Size > largest {
			largest = disk.Size
		}
	}
	if gib := largest >> 30; gib > 1 {
		props["local_gb"] = gib - 1
	}
	return props
}

// createPorts adds a port for every NIC whose MAC has none yet, with
// pxe_enabled pxe.
func (c *inspecting) createPorts(ctx context.Context, nodeUUID string, nics []protocol.NIC, pxe bool) (int, error) {
	created := 0
	for _, nic := range nics {
		hw, err := net.ParseMAC(nic.MACAddress)
		if err != nil || len(hw) != 6 {
			continue
		}
		mac := hw.String()
		existing, err := c.st.ListPorts(ctx, store.ResourceFilter{Address: &mac}, store.Page{Limit: 1})
		if err != nil {
			return created, err
		}
		if len(existing) > 0 {
			if err := fillLocalLink(ctx, c.st, existing[0], nodeUUID, nic); err != nil {
				return created, err
			}
			continue
		}
		llc, _ := lldp.PortLocalLinkConnection(nil, nic.LLDP)
		p := &store.Port{UUID: uuid.NewString(), Address: mac, NodeUUID: nodeUUID, PXEEnabled: pxe, CreatedAt: c.now(),
			Extra: map[string]any{"interface": nic.Name}, LocalLinkConnection: llc}
		if err := c.st.CreatePort(ctx, p); err != nil {
			return created, fmt.Errorf("create port %s for node %s: %w", mac, nodeUUID, err)
		}
		created++
	}
	return created, nil
}

// InventoryPluginData is the plugin data inspection rules see beside the
// inventory: the driver warnings and Ironic's interface and LLDP data
// (all_interfaces, parsed_lldp).
func InventoryPluginData(inv protocol.Inventory) map[string]any {
	plugin := lldp.PluginData(inv)
	if warn := protocol.DriverWarnings(inv); len(warn) > 0 {
		plugin["warnings"] = warn
	}
	return plugin
}

// fillLocalLink adds to a port of this node the local_link_connection
// keys its NIC's LLDP frame gives and the port lacks, as Ironic's
// local_link_connection hook: what an operator set is kept.
func fillLocalLink(ctx context.Context, st store.Store, p *store.Port, nodeUUID string, nic protocol.NIC) error {
	if p.NodeUUID != nodeUUID || len(nic.LLDP) == 0 {
		return nil
	}
	llc, added := lldp.PortLocalLinkConnection(p.LocalLinkConnection, nic.LLDP)
	if !added {
		return nil
	}
	p.LocalLinkConnection = llc
	if err := st.UpdatePort(ctx, p); err != nil {
		return fmt.Errorf("port %s local_link_connection from LLDP: %w", p.UUID, err)
	}
	return nil
}
