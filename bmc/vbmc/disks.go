package vbmc

import (
	"fmt"
	"strconv"
)

// Storage controllers a QEMUDisk can hang off (QEMUDisk.Bus).
const (
	BusNVMe       = "nvme"
	BusAHCI       = "ahci"
	BusMegaSAS    = "megasas-gen2"
	BusLSI        = "lsi53c895a"
	BusMPTSAS     = "mptsas1068"
	BusVirtioSCSI = "virtio-scsi"
)

// QEMUBuses lists the supported QEMUDisk.Bus values.
func QEMUBuses() []string {
	return []string{BusNVMe, BusAHCI, BusMegaSAS, BusLSI, BusMPTSAS, BusVirtioSCSI}
}

// hostAdapters are the QEMU devices of the shared buses; their disks are
// scsi-hd, except AHCI's (ide-hd, one per port).
var hostAdapters = map[string]string{BusAHCI: "ahci", BusMegaSAS: "megasas-gen2", BusLSI: "lsi53c895a",
	BusMPTSAS: "mptsas1068", BusVirtioSCSI: "virtio-scsi-pci"}

// ahciPorts is how many disks QEMU's ICH9 AHCI takes.
const ahciPorts = 6

// DiskArgs returns QEMU arguments attaching disks (raw files) with their
// serials, each on its Bus ("" is NVMe): one controller per NVMe disk, one
// host adapter per other bus shared by that bus's disks, in order of first
// use. With bootFirst the first disk gets bootindex=1. Tests that start
// QEMU themselves use it too, so every VM attaches disks the same way.
func DiskArgs(disks []QEMUDisk, bootFirst bool) ([]string, error) {
	return diskArgs(disks, bootFirst, 1)
}

func diskArgs(disks []QEMUDisk, bootFirst bool, bootIndex int) ([]string, error) {
	var a []string
	adapters := map[string]string{} // bus -> adapter id
	ports := map[string]int{}
	for i, d := range disks {
		bus := d.Bus
		if bus == "" {
			bus = BusNVMe
		}
		id := fmt.Sprintf("disk%d", i)
		file := d.Path
		if d.Blkdebug != "" {
			file = "blkdebug:" + d.Blkdebug + ":" + d.Path
		}
		a = append(a, "-drive", "file="+file+",if=none,id="+id+",format=raw")
		var dv string
		if bus == BusNVMe {
			dv = "nvme,drive=" + id
		} else {
			model, ok := hostAdapters[bus]
			if !ok {
				return nil, fmt.Errorf("disk %s: unknown bus %q (one of %v)", d.Path, d.Bus, QEMUBuses())
			}
			hba, ok := adapters[bus]
			if !ok {
				hba = fmt.Sprintf("hba%d", len(adapters))
				adapters[bus] = hba
				a = append(a, "-device", model+",id="+hba)
			}
			if bus == BusAHCI {
				if ports[bus] == ahciPorts {
					return nil, fmt.Errorf("disk %s: an AHCI controller has %d ports", d.Path, ahciPorts)
				}
				dv = "ide-hd,drive=" + id + ",bus=" + hba + "." + strconv.Itoa(ports[bus])
				ports[bus]++
			} else {
				dv = "scsi-hd,drive=" + id + ",bus=" + hba + ".0"
			}
		}
		if d.Serial != "" {
			dv += ",serial=" + d.Serial
		}
		if bootFirst && i == 0 {
			dv += ",bootindex=" + strconv.Itoa(bootIndex)
		}
		a = append(a, "-device", dv)
	}
	return a, nil
}
