package generic

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/anvil-metal/anvil/hardware"
	"github.com/anvil-metal/anvil/hardware/disk"
	"github.com/anvil-metal/anvil/hardware/health"
	"github.com/anvil-metal/anvil/hardware/verify"
	"github.com/anvil-metal/anvil/protocol"
)

// ErrTypeHardwareMismatch is the error type of a failed verify_hardware:
// the machine is not what the controller expects, or is unhealthy.
const ErrTypeHardwareMismatch = "HardwareVerificationError"

// verifyStep is deploy.verify_hardware. Priority 0: it runs in automated
// cleaning only when the operator gives it a priority, and on request in
// manual cleaning and deploy. Not abortable: it takes seconds and reads only.
func verifyStep() protocol.Step {
	return protocol.Step{Interface: protocol.InterfaceDeploy, Step: "verify_hardware", Priority: 0, ArgsInfo: map[string]protocol.ArgInfo{
		"hardware_profile":  {Description: `expected hardware shared by many nodes, overriding properties.hardware_profile: {"cpu_model", "dimm_count", "dimm_size_mb", "disk_count", "disk_models": [...], "nic_models": ["vendor:device"], "exact": bool}`},
		"health_checks":     {Description: "run the SMART/NVMe, EDAC and PCIe link checks too (default true)"},
		"health_thresholds": {Description: `override health thresholds: {"nvme_max_percentage_used": 90, "nvme_max_media_errors": 0, "ata_max_reallocated_sectors": 10, "ata_max_pending_sectors": 0, "ata_max_offline_uncorrectable": 0, "memory_max_corrected_errors": 10, "memory_max_uncorrected_errors": 0}`},
		"properties":        {Description: "the node's properties; the controller sends them with the command"},
		"inventory":         {Description: "the node's last inspection inventory; the controller sends it with the command"},
	}}
}

// VerifyResult is verify_hardware's result, kept whole as the step's
// evidence.
type VerifyResult struct {
	Passed bool `json:"passed"`
	// Inspection says whether the last inspection was compared ("none":
	// the node was never inspected, properties and profile only).
	Inspection  string              `json:"inspection"`
	Profile     *verify.Profile     `json:"profile,omitempty"`
	Differences []verify.Difference `json:"differences"`
	Memory      *verify.MemoryCheck `json:"memory,omitempty"`
	Seen        VerifySeen          `json:"seen"`
	Health      *health.Report      `json:"health,omitempty"`
	Seconds     float64             `json:"seconds"`
	Problems    []string            `json:"problems,omitempty"` // parts of the machine that could not be read
	failures    []string
}

// VerifySeen is what the agent found, per device.
type VerifySeen struct {
	CPU      protocol.CPU    `json:"cpu"`
	Memory   protocol.Memory `json:"memory"`
	DIMMs    []verify.DIMM   `json:"dimms"`
	Disks    []SeenDisk      `json:"disks"`
	NICs     []protocol.NIC  `json:"nics"`
	RootDisk string          `json:"root_disk,omitempty"`
}

// SeenDisk is a disk as verification saw it.
type SeenDisk struct {
	Name   string `json:"name"`
	Serial string `json:"serial,omitempty"`
	Model  string `json:"model,omitempty"`
	Size   uint64 `json:"size"`
}

// Summary is the one line the dashboard and CLI show.
func (r VerifyResult) Summary() string {
	var fail, accepted int
	for _, d := range r.Differences {
		if d.Failure {
			fail++
		} else {
			accepted++
		}
	}
	var hf, hw int
	if r.Health != nil {
		for _, f := range r.Health.Findings {
			if f.Failure {
				hf++
			} else {
				hw++
			}
		}
	}
	s := "hardware verified"
	if !r.Passed {
		s = "hardware verification FAILED"
	}
	s += fmt.Sprintf(": %d differences failed, %d accepted", fail, accepted)
	if r.Health != nil {
		s += fmt.Sprintf("; health: %d failed, %d warnings", hf, hw)
	} else {
		s += "; health checks not run"
	}
	if r.Inspection == "none" {
		s += "; never inspected, properties only"
	}
	// The failures themselves are the step's error, which the controller
	// puts in last_error with this summary after it: not repeated here.
	return s
}

func (m *Manager) verifyHardware(ctx context.Context, args map[string]any, progress hardware.ProgressFunc) (any, error) {
	start := time.Now()
	bad := func(err error) (any, error) {
		return nil, &protocol.Error{Type: protocol.ErrTypeInvalidArgs, Code: 400, Message: "verify_hardware: " + err.Error()}
	}
	props, _ := args["properties"].(map[string]any)
	inspected, err := verify.ParseInventory(args["inventory"])
	if err != nil {
		return bad(err)
	}
	exp, err := verify.FromProperties(props, inspected, args["hardware_profile"])
	if err != nil {
		return bad(err)
	}
	runHealth := true
	if v, ok := args["health_checks"]; ok {
		b, ok := v.(bool)
		if !ok {
			return bad(fmt.Errorf("health_checks must be true or false, got %v", v))
		}
		runHealth = b
	}
	th := health.DefaultThresholds()
	if v, ok := args["health_thresholds"]; ok {
		if th, err = thresholds(th, v); err != nil {
			return bad(err)
		}
	}
	progress.Report(hardware.Progress{Percent: 10, Message: "reading the inventory"})
	inv, err := m.inventory(ctx, m.cfg.Root)
	if err != nil {
		return nil, &protocol.Error{Type: protocol.ErrTypeInternal, Code: 500, Message: "verify_hardware: " + err.Error()}
	}
	seen := verify.Seen{Inventory: inv}
	res := VerifyResult{Inspection: "last inspection", Profile: exp.Profile}
	if inspected == nil {
		res.Inspection = "none"
	}
	if errs, ok := inv.Extra["errors"].([]string); ok {
		res.Problems = append(res.Problems, errs...)
	}
	if seen.DIMMs, err = verify.DIMMs(m.cfg.Root); err != nil {
		res.Problems = append(res.Problems, err.Error())
	}
	seen.RootDisk, seen.RootError = m.rootDisk(ctx, exp.RootDeviceHints)
	cmp := verify.Compare(exp, seen)
	res.Differences, res.Memory = cmp.Differences, cmp.Memory
	res.Seen = VerifySeen{CPU: inv.CPU, Memory: inv.Memory, DIMMs: seen.DIMMs, NICs: inv.Interfaces}
	for _, d := range inv.Disks {
		res.Seen.Disks = append(res.Seen.Disks, SeenDisk{Name: d.Name, Serial: d.Serial, Model: d.Model, Size: d.Size})
	}
	if seen.RootDisk != nil {
		res.Seen.RootDisk = seen.RootDisk.Name
	}
	for _, d := range cmp.Failures() {
		res.failures = append(res.failures, d.String())
	}
	if runHealth {
		progress.Report(hardware.Progress{Percent: 50, Message: "health checks"})
		var physical []protocol.Disk
		for _, d := range inv.Disks {
			if verify.Physical(d) {
				physical = append(physical, d)
			}
		}
		h := health.Checker{Root: m.cfg.Root, Reader: m.cfg.Health, Links: m.cfg.Links}.Run(ctx, physical, th)
		res.Health = &h
		for _, f := range h.Failures() {
			res.failures = append(res.failures, f.String())
		}
	}
	res.Passed = len(res.failures) == 0
	res.Seconds = time.Since(start).Seconds()
	progress.Report(hardware.Progress{Percent: 100, Message: "done"})
	if !res.Passed {
		return res, &protocol.Error{Type: ErrTypeHardwareMismatch, Code: 500,
			Message: fmt.Sprintf("the hardware differs from what is expected (%d problems): %s", len(res.failures), strings.Join(res.failures, "; "))}
	}
	return res, nil
}

// rootDisk finds the disk local_gb describes: the one the hints select,
// or without hints the largest disk, as inspection computes local_gb.
func (m *Manager) rootDisk(ctx context.Context, hints map[string]any) (*protocol.Disk, string) {
	disks, err := m.disks(ctx)
	if err != nil {
		return nil, err.Error()
	}
	if len(hints) > 0 {
		d, err := disk.SelectRootDevice(disks, hints)
		if err != nil {
			return nil, err.Error()
		}
		p := d.ToProtocol()
		return &p, ""
	}
	var best *protocol.Disk
	for _, d := range disks {
		if p := d.ToProtocol(); verify.Physical(p) && (best == nil || p.Size > best.Size) {
			best = &p
		}
	}
	if best == nil {
		return nil, "no disk"
	}
	return best, ""
}

// thresholds applies the step's overrides to the defaults; unknown keys
// are refused so a misspelt threshold does not silently keep the default.
func thresholds(base health.Thresholds, v any) (health.Thresholds, error) {
	raw, err := json.Marshal(v)
	if err != nil {
		return base, fmt.Errorf("health_thresholds: %w", err)
	}
	if s, ok := v.(string); ok {
		raw = []byte(s)
	}
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&base); err != nil {
		return base, fmt.Errorf("health_thresholds: %w", err)
	}
	return base, nil
}

// inventory is what the agent reports at inspection, narrowed by the guard
// the same way, so both sides of the comparison cover the same devices.
func (m *Manager) inventory(ctx context.Context, root string) (protocol.Inventory, error) {
	inv, err := hardware.Inventory(ctx, root)
	return m.cfg.Guard.ScopeInventory(inv), err
}
