package protocol

import "time"

// The part of erase_devices' result the controller reads to write
// sanitization records. The agent's result (hardware/erase.Result) is a
// superset of this shape; hardware/erase's tests decode its JSON into
// these types, so the two cannot drift apart unnoticed.

// DeviceIdentity names a storage device as its manufacturer does.
type DeviceIdentity struct {
	Vendor     string `json:"vendor,omitempty"`
	Model      string `json:"model,omitempty"`
	Serial     string `json:"serial,omitempty"`
	WWN        string `json:"wwn,omitempty"`
	Controller string `json:"controller,omitempty"` // nvme, sata, scsi, virtio, ...
}

// EraseVerification is what the agent read back after a method to prove
// its effect: Samples points spread over the device (the first and last
// blocks always), BytesChecked in all, each expected to hold Pattern.
type EraseVerification struct {
	Pattern      string  `json:"pattern"`
	Samples      int     `json:"samples"`
	BytesChecked int64   `json:"bytes_checked"`
	Direct       bool    `json:"direct_io"`
	Seconds      float64 `json:"seconds"`
}

// EraseAttempt is one method tried on one device.
type EraseAttempt struct {
	Method       string             `json:"method"`
	Passes       int                `json:"passes,omitempty"` // overwrite: passes written
	Error        string             `json:"error,omitempty"`
	Seconds      float64            `json:"seconds"`
	Verification *EraseVerification `json:"verification,omitempty"`
}

// EraseDevicePlan is the agent's plan for one device.
type EraseDevicePlan struct {
	DeviceIdentity
	Device     string `json:"device"`
	Size       uint64 `json:"size"`
	Action     string `json:"action"`
	Reason     string `json:"reason"`
	Rotational bool   `json:"rotational"`
	NVMe       *struct {
		Model  string `json:"model,omitempty"`
		Serial string `json:"serial,omitempty"`
	} `json:"nvme,omitempty"`
	// ErasedThrough: for a disk holding software RAID members (MDMembers:
	// the disk itself or its partitions), the arrays and other partitions
	// whose erasure reaches it.
	ErasedThrough []string `json:"erased_through,omitempty"`
	MDMembers     []string `json:"md_members,omitempty"`
}

// EraseDevice is the outcome for one device; Method is set only when a
// method's effect was verified.
type EraseDevice struct {
	Plan       EraseDevicePlan `json:"plan"`
	Status     string          `json:"status"` // erased | skipped | failed
	Method     string          `json:"method,omitempty"`
	Attempts   []EraseAttempt  `json:"attempts,omitempty"`
	Bytes      uint64          `json:"bytes,omitempty"`
	Seconds    float64         `json:"seconds"`
	Error      string          `json:"error,omitempty"`
	StartedAt  *time.Time      `json:"started_at,omitempty"`
	FinishedAt *time.Time      `json:"finished_at,omitempty"`
}

// EraseResult is erase_devices' result.
type EraseResult struct {
	Devices []EraseDevice `json:"devices"`
}
