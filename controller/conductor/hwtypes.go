package conductor

// The hardware types' interface tables and properties, as the API shows
// them.

import (
	"maps"

	"github.com/anvil-metal/anvil/bmc"
)

// InterfaceChoice is what a hardware type offers for one interface type:
// the implementation a new node gets and every one it may be set to.
type InterfaceChoice struct {
	Default string
	Enabled []string
}

// InterfaceTypes are Ironic's interface types (drivers/base.py
// ALL_INTERFACES), sorted.
func InterfaceTypes() []string {
	return []string{"bios", "boot", "console", "deploy", "firmware", "inspect", "management", "network", "power", "raid",
		"rescue", "storage", "vendor"}
}

// HardwareInterfaces is the interface table of a hardware type: the one
// definition behind node defaults and GET /v1/drivers' default_*_interface
// and enabled_*_interfaces. Only implementations the controller runs are
// listed, under Ironic's names.
func HardwareInterfaces(hw string) map[string]InterfaceChoice {
	one := func(name string) InterfaceChoice { return InterfaceChoice{Default: name, Enabled: []string{name}} }
	common := map[string]InterfaceChoice{
		"console": one("no-console"),
		"network": one("noop"),
		"storage": one("noop"),
		"vendor":  one("no-vendor"),
	}
	out := maps.Clone(common)
	switch hw {
	case bmc.HardwareFake:
		maps.Copy(out, map[string]InterfaceChoice{
			"bios":       {Default: "fake", Enabled: []string{"fake", "no-bios"}},
			"boot":       one("fake"),
			"deploy":     {Default: "fake", Enabled: []string{"direct", "fake"}},
			"firmware":   {Default: DefaultFirmwareInterface(hw), Enabled: []string{"fake", "no-firmware"}},
			"inspect":    {Default: "fake", Enabled: []string{"agent", "fake"}},
			"management": one("fake"),
			"power":      one("fake"),
			"raid":       {Default: "fake", Enabled: []string{"agent", "fake"}},
			"rescue":     {Default: "fake", Enabled: []string{"fake", "no-rescue"}},
		})
	default: // ipmi, redfish, and any other BMC-backed type
		// Ironic names the ipmi hardware type's power and management
		// implementations "ipmitool".
		oob := hw
		if hw == bmc.HardwareIPMI {
			oob = "ipmitool"
		}
		boot, bios, firmware := one("ipxe"), one("no-bios"), one(DefaultFirmwareInterface(hw))
		inspect := InterfaceChoice{Default: "agent", Enabled: []string{"agent", "no-inspect"}}
		if hw == bmc.HardwareRedfish {
			boot.Enabled = []string{"ipxe", BootVirtualMedia}
			// BIOS settings through the BMC (bmcbios.go), as Ironic's redfish bios
			bios = InterfaceChoice{Default: "redfish", Enabled: []string{"no-bios", "redfish"}}
			// firmware components and updates through the BMC, as Ironic's
			// redfish firmware interface (API 1.86)
			firmware = InterfaceChoice{Default: DefaultFirmwareInterface(hw), Enabled: []string{"no-firmware", "redfish"}}
			// BMC event subscriptions through vendor_passthru, as
			// Ironic's redfish vendor interface (vendorpassthru.go)
			out["vendor"] = InterfaceChoice{Default: VendorRedfish, Enabled: []string{"no-vendor", VendorRedfish}}
			// out-of-band inspection from the BMC (oobinspect.go), as
			// Ironic's redfish inspect interface; the agent stays the default
			inspect.Enabled = []string{"agent", "no-inspect", InspectRedfish}
		}
		// the serial console over IPMI SOL (controller/console), Ironic's
		// ipmitool-socat; a redfish node needs ipmi_* driver_info for it
		out["console"] = InterfaceChoice{Default: "no-console", Enabled: []string{"ipmitool-socat", "no-console"}}
		maps.Copy(out, map[string]InterfaceChoice{
			"bios":       bios,
			"boot":       boot,
			"deploy":     one("direct"),
			"firmware":   firmware,
			"inspect":    inspect,
			"management": one(oob),
			"power":      one(oob),
			"raid":       {Default: "agent", Enabled: []string{"agent", "no-raid"}},
			"rescue":     one("no-rescue"),
		})
	}
	return out
}

// DefaultFirmwareInterface is hw's default firmware interface, the
// Default of HardwareInterfaces(hw)["firmware"], without building that
// table: node views show it for every node created before 1.86, which has
// none stored (a 1000-node list built the table 1000 times: a quarter of
// the list's allocations).
func DefaultFirmwareInterface(hw string) string {
	switch hw {
	case bmc.HardwareFake:
		return "fake"
	case bmc.HardwareRedfish:
		return "redfish"
	}
	return "no-firmware"
}

// DriverProperties are the driver_info keys a hardware type's default
// interfaces read, with descriptions (GET /v1/drivers/{name}/properties):
// the BMC's keys and the boot interface's.
func DriverProperties(hw string) map[string]string {
	out := bmc.DriverInfoProperties(hw)
	if hw == bmc.HardwareFake {
		return out // Ironic's fake interfaces read nothing
	}
	out["kernel_append_params"] = "Additional kernel parameters for the agent ramdisk's kernel, after the controller's own. Optional."
	out["anvil_public_url"] = "URL at which the node reaches the controller (boot files, lookup, heartbeats); default: the controller's --public-url. Optional. (anvil)"
	return out
}

// RAIDLogicalDiskProperties describes the keys of a logical disk in a
// target RAID configuration (Ironic's raid_config_schema.json); nil when
// the hardware type's default RAID interface is no-raid.
func RAIDLogicalDiskProperties(hw string) map[string]string {
	if c, ok := HardwareInterfaces(hw)["raid"]; !ok || c.Default == "no-raid" {
		return nil
	}
	return map[string]string{
		"raid_level":               "RAID level for the logical disk. Valid values are 'JBOD', '0', '1', '2', '5', '6', '1+0', '5+0' and '6+0'. Required.",
		"size_gb":                  "Size in GiB (Integer) for the logical disk. Use 'MAX' as size_gb if this logical disk is supposed to use the rest of the space available. Required.",
		"volume_name":              "Name of the volume to be created. If this is not specified, it will be auto-generated. Optional.",
		"is_root_volume":           "Specifies whether this disk is a root volume. By default, this is False. Optional.",
		"share_physical_disks":     "Specifies whether other logical disks can share physical disks with this logical disk. By default, this is False. Optional.",
		"disk_type":                "The type of disk preferred. Valid values are 'hdd' and 'ssd'. If this is not specified, disk type will not be a selection criterion for choosing backing physical disks. Optional.",
		"interface_type":           "The interface type of disk. Valid values are 'sata', 'scsi' and 'sas'. If this is not specified, interface type will not be a selection criterion for choosing backing physical disks. Optional.",
		"number_of_physical_disks": "Number of physical disks to use for this logical disk. By default, the driver uses the minimum number of disks required for that RAID level. Optional.",
		"controller":               "Controller to use for this logical disk. If not specified, the driver will choose a suitable RAID controller on the bare metal node. Optional.",
		"physical_disks":           "The physical disks to use for this logical disk. If not specified, the driver will choose suitable physical disks to use. Optional.",
	}
}
