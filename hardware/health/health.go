// Package health runs the checks the agent can do in seconds on a machine
// it is about to hand to a tenant: NVMe and ATA SMART, EDAC memory error
// counts, PCIe links that trained below their capability and NIC links
// slower than both ends can do. Each finding
// names the device. Reading is separated from judging so the parsers are
// tested on captured data; the device access (ioctls, sysfs) is thin.
package health

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/anvil-metal/anvil/protocol"
)

// Thresholds decide when a reading becomes a failure. The defaults are
// strict because the ramdisk's counts are fresh: EDAC counts restart at
// every boot, so even a few corrected errors within minutes of booting
// point at a failing DIMM; pending and uncorrectable sectors are data that
// cannot be read now; reallocations happen on healthy drives in small
// numbers, so a few are allowed.
type Thresholds struct {
	NVMeMaxPercentUsed  uint64 `json:"nvme_max_percentage_used"`
	NVMeMaxMediaErrors  uint64 `json:"nvme_max_media_errors"`
	ATAMaxReallocated   uint64 `json:"ata_max_reallocated_sectors"`
	ATAMaxPending       uint64 `json:"ata_max_pending_sectors"`
	ATAMaxUncorrectable uint64 `json:"ata_max_offline_uncorrectable"`
	MemMaxCorrected     uint64 `json:"memory_max_corrected_errors"`
	MemMaxUncorrected   uint64 `json:"memory_max_uncorrected_errors"`
}

// DefaultThresholds are used for every threshold the step's arguments do
// not set.
func DefaultThresholds() Thresholds {
	return Thresholds{NVMeMaxPercentUsed: 90, ATAMaxReallocated: 10, MemMaxCorrected: 10}
}

// Finding is one thing wrong. Failure false is a warning: reported, not
// failing the step.
type Finding struct {
	Check   string `json:"check"` // nvme, ata, edac, pcie, nic
	Device  string `json:"device"`
	Message string `json:"message"`
	Failure bool   `json:"failure"`
}

func (f Finding) String() string { return fmt.Sprintf("%s %s: %s", f.Check, f.Device, f.Message) }

// Report is every reading and finding, kept whole as the step's evidence.
type Report struct {
	NVMe     []NVMeHealth       `json:"nvme,omitempty"`
	ATA      []ATAHealth        `json:"ata,omitempty"`
	EDAC     []MemoryController `json:"edac,omitempty"`
	PCIe     []PCIeLink         `json:"pcie,omitempty"`
	NICs     []NICLink          `json:"nics,omitempty"`
	Findings []Finding          `json:"findings"`
	Skipped  []string           `json:"skipped,omitempty"` // checks that could not run, and why
	Config   Thresholds         `json:"thresholds"`
}

// Failures are the findings that fail the step.
func (r Report) Failures() []Finding {
	var out []Finding
	for _, f := range r.Findings {
		if f.Failure {
			out = append(out, f)
		}
	}
	return out
}

// Reader reads SMART data from a device node. The real one issues ioctls
// (ioctl_linux.go); tests give captured pages.
type Reader interface {
	NVMeSMARTLog(path string) ([]byte, error)
	ATASMARTData(path string) ([]byte, error)
}

// Checker runs the checks against a sysfs root.
type Checker struct {
	Root   string // "/" on the node
	Reader Reader
	// Links reads the NICs' link modes; nil checks no NIC speeds.
	Links LinkReader
}

// Run checks the disks given (the inventory's, so only what discovery
// found is opened, read-only) and the machine's memory controllers and
// PCIe links.
func (c Checker) Run(ctx context.Context, disks []protocol.Disk, th Thresholds) Report {
	r := Report{Config: th, Findings: []Finding{}}
	for _, d := range disks {
		if ctx.Err() != nil {
			break
		}
		path := d.Name
		if !strings.HasPrefix(path, "/") {
			path = "/dev/" + path
		}
		id := diskID(d)
		switch {
		case d.Controller == "nvme":
			b, err := c.Reader.NVMeSMARTLog(filepath.Join(c.Root, path))
			if err != nil {
				r.Skipped = append(r.Skipped, fmt.Sprintf("nvme %s: SMART log unreadable: %v", id, err))
				continue
			}
			h, err := ParseNVMeSMART(b)
			if err != nil {
				r.Skipped = append(r.Skipped, fmt.Sprintf("nvme %s: %v", id, err))
				continue
			}
			h.Device, h.Serial = d.Name, d.Serial
			r.NVMe = append(r.NVMe, h)
			r.Findings = append(r.Findings, h.Judge(th)...)
		case d.Controller == "scsi" || d.Controller == "ata" || d.Controller == "sata":
			b, err := c.Reader.ATASMARTData(filepath.Join(c.Root, path))
			if err != nil {
				// SAS and virtual SCSI disks do not speak ATA.
				r.Skipped = append(r.Skipped, fmt.Sprintf("ata %s: no ATA SMART data: %v", id, err))
				continue
			}
			h, err := ParseATASMART(b)
			if err != nil {
				r.Skipped = append(r.Skipped, fmt.Sprintf("ata %s: %v", id, err))
				continue
			}
			h.Device, h.Serial, h.Sectors = d.Name, d.Serial, d.Size/512
			r.ATA = append(r.ATA, h)
			r.Findings = append(r.Findings, h.Judge(th)...)
		}
	}
	mcs, err := ReadEDAC(c.Root)
	if err != nil {
		r.Skipped = append(r.Skipped, err.Error())
	} else if mcs == nil {
		r.Skipped = append(r.Skipped, "edac: no memory controller driver loaded (no ECC reporting on this machine or kernel)")
	}
	r.EDAC = mcs
	r.Findings = append(r.Findings, JudgeEDAC(mcs, th)...)
	links, err := ReadPCIeLinks(c.Root)
	if err != nil {
		r.Skipped = append(r.Skipped, err.Error())
	}
	r.PCIe = links
	r.Findings = append(r.Findings, JudgePCIe(links)...)
	if c.Links != nil {
		nics, err := ReadNICLinks(c.Root, c.Links)
		if err != nil {
			r.Skipped = append(r.Skipped, err.Error())
		}
		for _, n := range nics {
			if n.Error != "" {
				r.Skipped = append(r.Skipped, fmt.Sprintf("nic %s: link modes unreadable: %s", n.Interface, n.Error))
			}
		}
		r.NICs = nics
		r.Findings = append(r.Findings, JudgeNICs(nics)...)
	}
	return r
}

// diskID names a disk in findings: device and serial.
func diskID(d protocol.Disk) string {
	if d.Serial == "" {
		return d.Name
	}
	return d.Name + " (serial " + d.Serial + ")"
}
