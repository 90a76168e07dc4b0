package protocol

// Inventory is the hardware the agent found, in key names close to IPA's so
// that GET /v1/nodes/{id}/inventory reads like Ironic's.
type Inventory struct {
	CPU          CPU            `json:"cpu"`
	Memory       Memory         `json:"memory"`
	Disks        []Disk         `json:"disks"`
	Interfaces   []NIC          `json:"interfaces"`
	RAIDArrays   []RAIDArray    `json:"raid_arrays,omitempty"`
	SystemVendor SystemVendor   `json:"system_vendor"`
	Boot         BootInfo       `json:"boot"`
	Hostname     string         `json:"hostname,omitempty"`
	Extra        map[string]any `json:"extra,omitempty"`
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
