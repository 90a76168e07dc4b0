package protocol

import "fmt"

// Inventory is the hardware the agent found, in key names close to IPA's so
// that GET /v1/nodes/{id}/inventory reads like Ironic's.
type Inventory struct {
	CPU          CPU          `json:"cpu"`
	Memory       Memory       `json:"memory"`
	Disks        []Disk       `json:"disks"`
	Interfaces   []NIC        `json:"interfaces"`
	RAIDArrays   []RAIDArray  `json:"raid_arrays,omitempty"`
	SystemVendor SystemVendor `json:"system_vendor"`
	Boot         BootInfo     `json:"boot"`
	Hostname     string       `json:"hostname,omitempty"`
	// PCI lists every PCI function the ramdisk found, with the driver
	// bound to it or none: a storage controller without a driver hides
	// its disks from cleaning. nil (absent) means an agent that does not
	// report PCI devices; this agent always sends a list.
	PCI []PCIDevice `json:"pci"`
	// FirmwareMissing names the firmware files the kernel asked for and
	// could not load (from the kernel log).
	FirmwareMissing []string `json:"firmware_missing,omitempty"`
	// The BMC's addresses as the agent read them over in-band IPMI
	// (/dev/ipmi0), as IPA reports them; empty when the server has no
	// in-band IPMI or the BMC has none set (Extra["bmc"] says which).
	BMCAddress   string         `json:"bmc_address,omitempty"`
	BMCV6Address string         `json:"bmc_v6address,omitempty"`
	BMCMAC       string         `json:"bmc_mac,omitempty"`
	Extra        map[string]any `json:"extra,omitempty"`
}

// PCIDevice is one PCI function as the ramdisk's kernel sees it.
type PCIDevice struct {
	Address string `json:"address"` // 0000:00:1f.2
	Vendor  string `json:"vendor"`  // 8086 (hex, no 0x)
	Device  string `json:"device"`  // 2922
	Class   string `json:"class"`   // 010601: base class 01 (mass storage), subclass 06 (SATA), prog-if 01 (AHCI)
	// Driver is the bound driver's name; empty when none is bound.
	Driver string `json:"driver"`
	// Modules the ramdisk's kernel has for this device (its modalias
	// matched against modules.alias), reported for unbound devices: a
	// module named here that is not bound failed to load or was kept from
	// loading; none named means the image lacks a driver.
	Modules []string `json:"modules,omitempty"`
}

// PCI base classes the controller watches.
const (
	PCIClassStorage = "01"
	PCIClassNetwork = "02"
)

// BaseClass is the first byte of Class ("01" for mass storage).
func (p PCIDevice) BaseClass() string {
	if len(p.Class) < 2 {
		return ""
	}
	return p.Class[:2]
}

// VendorDevice is "vendor:device", as lspci -n prints it.
func (p PCIDevice) VendorDevice() string { return p.Vendor + ":" + p.Device }

// KindName says in words what a device of this class is.
func (p PCIDevice) KindName() string {
	if len(p.Class) >= 4 {
		switch p.Class[:4] {
		case "0100":
			return "SCSI controller"
		case "0101":
			return "IDE controller"
		case "0104":
			return "RAID controller"
		case "0106":
			return "SATA controller"
		case "0107":
			return "SAS controller"
		case "0108":
			return "NVMe controller"
		}
	}
	switch p.BaseClass() {
	case PCIClassStorage:
		return "storage controller"
	case PCIClassNetwork:
		return "network controller"
	}
	return "PCI device"
}

// Describe names the device for people: "SATA controller 0000:00:1f.2
// (8086:2922)".
func (p PCIDevice) Describe() string {
	return fmt.Sprintf("%s %s (%s)", p.KindName(), p.Address, p.VendorDevice())
}

// Unbound lists the devices of a base class without a driver.
func Unbound(devs []PCIDevice, baseClass string) []PCIDevice {
	var out []PCIDevice
	for _, d := range devs {
		if d.BaseClass() == baseClass && d.Driver == "" {
			out = append(out, d)
		}
	}
	return out
}

// CPU summarises the processors.
type CPU struct {
	ModelName    string `json:"model_name"`
	Count        int    `json:"count"`
	Architecture string `json:"architecture"`
}

// Memory in bytes (total usable) and MiB (physical).
type Memory struct {
	Total      uint64 `json:"total"`
	PhysicalMB uint64 `json:"physical_mb"`
}

// Disk is one block device (whole disk, not a partition).
type Disk struct {
	Name              string      `json:"name"` // /dev/nvme0n1
	Size              uint64      `json:"size"` // bytes
	Model             string      `json:"model"`
	Vendor            string      `json:"vendor"`
	Serial            string      `json:"serial"`
	WWN               string      `json:"wwn,omitempty"`
	Firmware          string      `json:"firmware,omitempty"`
	Rotational        bool        `json:"rotational"`
	ReadOnly          bool        `json:"read_only"`
	Removable         bool        `json:"removable"`
	VirtualMedia      bool        `json:"virtual_media,omitempty"`
	Optical           bool        `json:"optical,omitempty"` // CD/DVD drive: never erased, never a root device
	Controller        string      `json:"controller"`        // nvme, scsi, virtio, loop, md, ...
	LogicalBlockSize  uint64      `json:"logical_block_size"`
	PhysicalBlockSize uint64      `json:"physical_block_size"`
	Holders           []string    `json:"holders,omitempty"` // e.g. md0 when a RAID member
	ByPath            string      `json:"by_path,omitempty"`
	Partitions        []Partition `json:"partitions,omitempty"`
}

// Partition of a disk.
type Partition struct {
	Name     string   `json:"name"`
	Size     uint64   `json:"size"`
	ReadOnly bool     `json:"read_only"`
	Holders  []string `json:"holders,omitempty"`
}

// NIC is one network interface.
type NIC struct {
	Name        string `json:"name"`
	MACAddress  string `json:"mac_address"`
	IPv4Address string `json:"ipv4_address,omitempty"`
	HasCarrier  bool   `json:"has_carrier"`
	SpeedMbps   int    `json:"speed_mbps,omitempty"`
	Driver      string `json:"driver,omitempty"`
	// LLDP is the first LLDP frame the NIC heard from its switch, raw
	// TLVs as IPA reports them; absent when none was heard.
	LLDP LLDPTLVs `json:"lldp,omitempty"`
}

// RAIDArray is a Linux software RAID (md) device.
type RAIDArray struct {
	Name    string   `json:"name"`  // md0
	Level   string   `json:"level"` // raid1
	Size    uint64   `json:"size"`
	Members []string `json:"members"` // nvme0n1p1, ...
	State   string   `json:"state,omitempty"`
}

// SystemVendor as read from DMI.
type SystemVendor struct {
	Manufacturer string `json:"manufacturer"`
	ProductName  string `json:"product_name"`
	SerialNumber string `json:"serial_number"`
}

// BootInfo says how the node booted.
type BootInfo struct {
	CurrentBootMode string `json:"current_boot_mode"` // bios | uefi
	PXEInterface    string `json:"pxe_interface,omitempty"`
}

// DriverWarnings says, one line each, which NICs and storage controllers
// of an inventory have no driver and which firmware files were missing:
// why a disk is absent from cleaning or a port never came up.
func DriverWarnings(inv Inventory) []string {
	var out []string
	for _, class := range []string{PCIClassStorage, PCIClassNetwork} {
		for _, d := range Unbound(inv.PCI, class) {
			w := d.Describe() + " has no driver"
			if len(d.Modules) > 0 {
				w += fmt.Sprintf(" (the ramdisk's kernel has %v for it, which did not bind)", d.Modules)
			} else {
				w += " (the ramdisk has no module for it)"
			}
			out = append(out, w)
		}
	}
	for _, f := range inv.FirmwareMissing {
		out = append(out, "firmware "+f+" was not found by the kernel")
	}
	return out
}
