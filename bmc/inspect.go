package bmc

// Out-of-band inspection (Ironic's inspect_interface=redfish,
// drivers/modules/redfish/inspect.py): the hardware as the BMC describes
// it, in the inventory shape Ironic stores, without booting the node.

import (
	"context"
	"fmt"
	"sort"
	"time"
)

// Inventory is a node's hardware as Ironic's redfish inspection stores it
// (GET /v1/nodes/{node}/inventory): the subset of the agent's inventory a
// BMC can tell. Disks carry serial and rotational when the BMC says.
type Inventory struct {
	CPU          InventoryCPU     `json:"cpu"`
	Memory       *InventoryMemory `json:"memory,omitempty"`
	Disks        []InventoryDisk  `json:"disks,omitempty"`
	Interfaces   []InventoryNIC   `json:"interfaces"`
	SystemVendor *InventoryVendor `json:"system_vendor,omitempty"`
	Boot         *InventoryBoot   `json:"boot,omitempty"`
}

// InventoryCPU: count is the logical processors (threads), architecture
// Ironic's name for the instruction set ("" unknown).
type InventoryCPU struct {
	Count        int    `json:"count"`
	Architecture string `json:"architecture"`
	ModelName    string `json:"model_name,omitempty"`
	Frequency    int    `json:"frequency,omitempty"` // MHz
}

// InventoryMemory is the installed memory.
type InventoryMemory struct {
	PhysicalMB int64 `json:"physical_mb"`
}

// InventoryDisk is one drive the BMC lists.
type InventoryDisk struct {
	Name       string `json:"name"`
	Size       int64  `json:"size"` // bytes
	Serial     string `json:"serial,omitempty"`
	Rotational *bool  `json:"rotational,omitempty"`
}

// InventoryNIC is one Ethernet interface with a valid MAC.
type InventoryNIC struct {
	MACAddress string `json:"mac_address"`
	Name       string `json:"name"`
	SpeedMbps  int    `json:"speed_mbps,omitempty"`
}

// InventoryVendor describes the system.
type InventoryVendor struct {
	ProductName  string `json:"product_name,omitempty"`
	SerialNumber string `json:"serial_number,omitempty"`
	Manufacturer string `json:"manufacturer,omitempty"`
	SystemUUID   string `json:"system_uuid,omitempty"`
}

// InventoryBoot is the boot mode the system is set to ("uefi", "bios").
type InventoryBoot struct {
	CurrentBootMode string `json:"current_boot_mode"`
}

// LocalGB is Ironic's local_gb from a redfish inspection: the smallest
// disk of at least 4 GiB, in GiB, less one (0: no such disk).
func (inv Inventory) LocalGB() int64 {
	var sizes []int64
	for _, d := range inv.Disks {
		if d.Size >= 4<<30 {
			sizes = append(sizes, d.Size)
		}
	}
	if len(sizes) == 0 {
		return 0
	}
	sort.Slice(sizes, func(i, j int) bool { return sizes[i] < sizes[j] })
	return max(0, sizes[0]>>30-1)
}

// inspectSession is a session that can describe the hardware.
type inspectSession interface {
	inventory(ctx context.Context) (Inventory, error)
}

// inspectCommandTimeout bounds the inspection's reads: a few documents per
// processor, DIMM, drive and NIC.
const inspectCommandTimeout = 2 * time.Minute

// Inspect reads the node's hardware from its BMC (Redfish: the system,
// its Processors, Memory, Storage or SimpleStorage drives and
// EthernetInterfaces). IPMI cannot, as in Ironic.
func (m *Manager) Inspect(ctx context.Context, t Target) (Inventory, Outcome, error) {
	var inv Inventory
	if t.HardwareType == HardwareIPMI {
		return inv, Outcome{}, fmt.Errorf("inspect %s: %w: out-of-band inspection is not supported by the %s driver (use the redfish hardware type or inspect_interface agent)", t, ErrUnsupported, t.HardwareType)
	}
	o, err := m.run(ctx, t, "inspect", func(ctx context.Context, op *operation) error {
		op.cmdTimeout = max(m.cfg.ConnectTimeout, inspectCommandTimeout)
		return op.retry(ctx, "inspect", func(ctx context.Context, s session) error {
			is, ok := s.(inspectSession)
			if !ok {
				return fmt.Errorf("%w: out-of-band inspection by the %s driver", ErrUnsupported, op.t.HardwareType)
			}
			var err error
			inv, err = is.inventory(ctx)
			return err
		})
	})
	return inv, o, err
}

// SetInventory sets what the fake BMC reports when inspected.
func (f *Fake) SetInventory(id string, inv Inventory) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.node(id).inventory = &inv
}

func (s fakeSession) inventory(context.Context) (Inventory, error) {
	var inv Inventory
	err := s.f.doNode(s.id, "inspect", func(n *fakeNode) error {
		if n.inventory == nil {
			return fmt.Errorf("%w: the fake BMC has no inventory (Fake.SetInventory)", ErrUnsupported)
		}
		inv = *n.inventory
		return nil
	})
	return inv, err
}
