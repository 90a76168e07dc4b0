package disk

import (
	"github.com/anvil-metal/anvil/protocol"
)

// ToProtocol converts a discovered disk to the wire shape.
func (d Disk) ToProtocol() protocol.Disk {
	pd := protocol.Disk{
		Name: d.Path, Size: d.Size, Model: d.Model, Vendor: d.Vendor, Serial: d.Serial, WWN: d.WWN,
		Rotational: d.Rotational, ReadOnly: d.ReadOnly, Removable: d.Removable, VirtualMedia: d.VirtualMedia, Optical: d.Optical,
		Controller: d.Controller, LogicalBlockSize: d.LogicalBlockSize, PhysicalBlockSize: d.PhysicalBlockSize,
		Holders: d.Holders, ByPath: d.ByPath,
	}
	for _, p := range d.Partitions {
		pd.Partitions = append(pd.Partitions, protocol.Partition{Name: p.Path, Size: p.Size, ReadOnly: p.ReadOnly, Holders: p.Holders})
	}
	return pd
}
