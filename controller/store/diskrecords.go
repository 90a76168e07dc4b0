package store

import (
	"github.com/anvil-metal/anvil/controller/diskcheck"
	"github.com/anvil-metal/anvil/protocol"
)

// DiskRecords are the disk guard's records of a node
// (controller/conductor/diskguard.go). Unlike the rest of the operation
// they outlive it: the cleaning after an undeploy expects the disks seen
// at the deploy, and the last check stays shown until the next one. The
// API shows them inside driver_internal_info under the keys releases
// before this record kept them in (InternalInfo), where a migration
// takes them from (AdoptDiskRecords).
type DiskRecords struct {
	// Check is the last comparison of the disks the agent saw before a
	// guarded step with those the node is expected to have
	// (driver_internal_info disk_check, read by `anvil node show`).
	Check *DiskCheck `json:"check,omitempty"`
	// AtDeploy are the disks seen when the node was last deployed
	// (driver_internal_info disks_at_deploy).
	AtDeploy []protocol.Disk `json:"at_deploy,omitempty"`
	// InventoryFromBMC: the stored inventory is a redfish inspection's,
	// whose disks are the BMC's drives (behind a RAID controller, not what
	// the ramdisk sees), so the guard does not expect them.
	InventoryFromBMC bool `json:"inventory_from_bmc,omitempty"`
}

// DiskCheck is one comparison: the step it guarded, when (RFC 3339) and
// whether the step could go on.
type DiskCheck struct {
	Step string `json:"step"`
	At   string `json:"at"`
	OK   bool   `json:"ok"`
	diskcheck.Result
}

// Ironic-style driver_internal_info keys of the disk records.
const (
	keyDiskCheck     = "disk_check"
	keyDisksAtDeploy = "disks_at_deploy"
)

func (d *DiskRecords) empty() bool { return d.Check == nil && d.AtDeploy == nil && !d.InventoryFromBMC }

// show writes the records into a driver_internal_info view.
func (d *DiskRecords) show(out map[string]any) {
	if d.Check != nil {
		out[keyDiskCheck] = jsonValue(d.Check)
	}
	if d.AtDeploy != nil {
		out[keyDisksAtDeploy] = jsonValue(d.AtDeploy)
	}
}

// take moves the records rest holds under their keys into d (see
// takeValue: a value that would not show back exactly stays).
func (d *DiskRecords) take(rest map[string]any) {
	takeValue(rest, keyDiskCheck, &d.Check)
	takeValue(rest, keyDisksAtDeploy, &d.AtDeploy)
}

// AdoptDiskRecords moves the disk records n's driver_internal_info holds
// (written by a release before DiskRecords) into n.Operation, keeping any
// record the operation has already. It reports whether
// driver_internal_info changed.
func (n *Node) AdoptDiskRecords() bool {
	if _, ok := n.DriverInternalInfo[keyDiskCheck]; !ok {
		if _, ok := n.DriverInternalInfo[keyDisksAtDeploy]; !ok {
			return false
		}
	}
	rest := make(map[string]any, len(n.DriverInternalInfo))
	for k, v := range n.DriverInternalInfo {
		rest[k] = v
	}
	var d DiskRecords
	d.take(rest)
	if len(rest) == len(n.DriverInternalInfo) {
		return false // nothing this release can show back
	}
	have := &n.Operation.Disks
	if have.Check == nil {
		have.Check = d.Check
	}
	if have.AtDeploy == nil {
		have.AtDeploy = d.AtDeploy
	}
	n.DriverInternalInfo = rest
	return true
}
