package erasure

import (
	"encoding/json"
	"fmt"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/anvil-metal/anvil/controller/store"
	"github.com/anvil-metal/anvil/protocol"
)

// Input is what the controller knows of one erase step run.
type Input struct {
	Node       *store.Node
	Controller string
	Result     *store.StepResult // the run's stored result
	Manual     bool              // manual cleaning (else the automated policy)
	// RequestedBy is the policy and the user of the request that started
	// the cleaning; "" (a cleaning started before it was kept) falls back
	// to naming the policy only.
	RequestedBy string
	ImageSHA    string
	Now         time.Time
}

// recordNamespace derives record ids from the run and the device, so a
// report the agent repeats signs the same records again, not new ones.
var recordNamespace = uuid.MustParse("0d6c1f7e-9a5b-4c2e-8f3d-7b1a2e4c6d80")

// Steps whose runs sanitize disks and so produce records. A metadata wipe
// (erase_devices_metadata, and the devices erase_devices_express only
// wipes the metadata of) removes partition tables and signatures and
// leaves the data: it is not an SP 800-88 clear or purge, and certifies
// nothing.
const (
	StepErase         = "deploy.erase_devices"
	StepEraseExpress  = "deploy.erase_devices_express"
	StepEraseMetadata = "deploy.erase_devices_metadata"
)

// Certifies reports whether runs of step (interface.step) produce records.
func Certifies(step string) bool { return step == StepErase || step == StepEraseExpress }

// devicesOf reads the erased devices out of a run's result: erase_devices'
// devices, or the NVMe part of erase_devices_express (formatted with a
// secure erase setting; the rest only had its metadata wiped).
func devicesOf(step string, raw json.RawMessage) ([]protocol.EraseDevice, error) {
	if len(raw) == 0 || !Certifies(step) {
		return nil, nil
	}
	if step == StepEraseExpress {
		var res struct {
			NVMe *protocol.EraseResult `json:"nvme"`
		}
		if err := json.Unmarshal(raw, &res); err != nil {
			return nil, fmt.Errorf("read %s result: %w", step, err)
		}
		if res.NVMe == nil {
			return nil, nil
		}
		return res.NVMe.Devices, nil
	}
	var res protocol.EraseResult
	if err := json.Unmarshal(raw, &res); err != nil {
		return nil, fmt.Errorf("read %s result: %w", step, err)
	}
	return res.Devices, nil
}

// Build writes one record per disk the run erased and verified. A disk
// holding software RAID members is certified from the arrays and
// partitions that reach it (its plan's erased_through), when all of them
// were erased; those arrays and partitions are not media and get no
// record of their own.
func Build(in Input) ([]Record, error) {
	devs, err := devicesOf(in.Result.Step, in.Result.Result)
	if err != nil || len(devs) == 0 {
		return nil, err
	}
	n := in.Node
	ref := NodeRef{UUID: n.UUID, Driver: n.Driver, BMCAddress: bmcAddress(n.DriverInfo), Retired: n.Retired}
	if n.Name != nil {
		ref.Name = *n.Name
	}
	if n.RetiredReason != nil {
		ref.RetiredReason = *n.RetiredReason
	}
	dest, _ := n.Extra["sanitization_destination"].(string)
	who := "automated cleaning (controller policy on provide/undeploy)"
	if in.Manual {
		who = "manual cleaning requested by an operator"
	}
	if in.RequestedBy != "" {
		who = in.RequestedBy
	}
	byDevice := map[string]protocol.EraseDevice{}
	covered := map[string]bool{}
	for _, d := range devs {
		byDevice[d.Plan.Device] = d
		for _, t := range d.Plan.ErasedThrough {
			covered[t] = true
		}
	}
	var out []Record
	for _, d := range devs {
		var c certified
		var ok bool
		switch {
		case len(d.Plan.ErasedThrough) > 0:
			c, ok = certifyThrough(d, byDevice)
		case covered[d.Plan.Device]:
			continue // an array or partition: its disks' records cover it
		default:
			c, ok = certifyDevice(d)
		}
		if !ok {
			continue
		}
		start, end := in.Result.StartedAt, in.Result.FinishedAt
		if c.start != nil {
			start = *c.start
		}
		if c.end != nil {
			end = *c.end
		}
		out = append(out, Record{
			Format: RecordFormat, UUID: uuid.NewSHA1(recordNamespace, []byte(in.Result.UUID+"/"+d.Plan.Device)).String(),
			Node: ref, Controller: in.Controller,
			Media: Media{Manufacturer: d.Plan.Vendor, Model: firstOf(d.Plan.Model, nvmeField(d, false)), Serial: firstOf(d.Plan.Serial, nvmeField(d, true)),
				WWN: d.Plan.WWN, Type: mediaType(d.Plan), Interface: d.Plan.Controller, SizeBytes: int64(d.Plan.Size), Device: d.Plan.Device},
			Sanitization: c.san,
			Tool:         Tool{Name: "anvil-agent", Version: in.Result.AgentVersion, ImageSHA256: in.ImageSHA},
			Verification: c.ver, Destination: dest,
			StartedAt: stamp(start), FinishedAt: stamp(end), RequestedBy: who, StepResult: in.Result.UUID, SignedAt: stamp(in.Now),
		})
	}
	return out, nil
}

// certified is how one disk was sanitized and verified.
type certified struct {
	san        Sanitization
	ver        Verification
	start, end *time.Time
}

// certifyDevice certifies a device erased on its own.
func certifyDevice(d protocol.EraseDevice) (certified, bool) {
	if d.Status != "erased" || d.Method == "" {
		return certified{}, false
	}
	t := techniques[d.Method]
	if t.category == "" {
		t.category, t.technique = "clear", d.Method
	}
	if d.Method == "ata_security_erase" && !d.Plan.Rotational {
		t.category = "clear"
	}
	var att protocol.EraseAttempt
	for _, a := range d.Attempts {
		if a.Method == d.Method && a.Error == "" {
			att = a
		}
	}
	san := Sanitization{Category: t.category, Technique: t.technique, Method: d.Method, Passes: att.Passes}
	if d.Method == "overwrite" && att.Passes > 0 {
		san.Technique = fmt.Sprintf("overwrite, %d pass(es), the last with %s", att.Passes, patternText(att.Verification))
	}
	ver := Verification{Method: "none", Result: "not verified"}
	if v := att.Verification; v != nil {
		ver = Verification{Method: fmt.Sprintf("sampled read-back of %d regions spread over the device, first and last always", v.Samples),
			Samples: v.Samples, BytesChecked: v.BytesChecked, ExpectedPattern: v.Pattern, Result: "passed: every byte read matched"}
	}
	return certified{san: san, ver: ver, start: d.StartedAt, end: d.FinishedAt}, true
}

// certifyThrough certifies a disk holding software RAID members from the
// arrays and partitions that reach it, if every one of them was erased.
// Writes through an array reach each member's data area only: the md
// metadata (superblock, bitmap, the space before the data offset) is not
// overwritten, and on a partitioned disk neither are the partition table
// and the space outside the partitions. The record says so (Scope), and
// the read-back went through the array (md reads one copy of mirrored
// data), which it says too.
func certifyThrough(d protocol.EraseDevice, byDevice map[string]protocol.EraseDevice) (certified, bool) {
	var c certified
	var parts, methods, arrays, own, patterns []string
	category := "purge"
	verified := true
	for _, t := range d.Plan.ErasedThrough {
		td, ok := byDevice[t]
		if !ok {
			return certified{}, false
		}
		tc, ok := certifyDevice(td)
		if !ok {
			return certified{}, false // the step result says why
		}
		if tc.san.Category != "purge" {
			category = "clear"
		}
		via := "partition " + t + " erased on its own"
		if strings.HasPrefix(path.Base(t), "md") {
			via = "through software RAID " + t
			arrays = append(arrays, t)
		} else {
			own = append(own, t)
		}
		parts = append(parts, via+": "+tc.san.Technique)
		methods = append(methods, tc.san.Method+" via "+t)
		if tc.ver.Samples == 0 {
			verified = false
		}
		c.ver.Samples += tc.ver.Samples
		c.ver.BytesChecked += tc.ver.BytesChecked
		if p := tc.ver.ExpectedPattern; p != "" && !slices.Contains(patterns, p) {
			patterns = append(patterns, p)
		}
		if tc.start != nil && (c.start == nil || tc.start.Before(*c.start)) {
			c.start = tc.start
		}
		if tc.end != nil && (c.end == nil || tc.end.After(*c.end)) {
			c.end = tc.end
		}
	}
	c.san = Sanitization{Category: category, Technique: strings.Join(parts, "; "), Method: strings.Join(methods, ", ")}
	members := strings.Join(d.Plan.MDMembers, ", ")
	if len(d.Plan.MDMembers) == 1 && d.Plan.MDMembers[0] == d.Plan.Device {
		c.san.Scope = fmt.Sprintf("the data area of software RAID member %s, written through %s; its md metadata (superblock, bitmap, the space before the data offset) was not overwritten",
			d.Plan.Device, strings.Join(arrays, ", "))
	} else {
		c.san.Scope = fmt.Sprintf("the data areas of software RAID member partition(s) %s, written through %s (their md metadata not overwritten)", members, strings.Join(arrays, ", "))
		if len(own) > 0 {
			c.san.Scope += "; partition(s) " + strings.Join(own, ", ") + " erased on their own"
		}
		c.san.Scope += "; the partition table and the space outside the partitions were not overwritten"
	}
	c.ver.Method = fmt.Sprintf("sampled read-back of %d regions through %s (an array reads one copy of mirrored data)", c.ver.Samples, strings.Join(d.Plan.ErasedThrough, ", "))
	c.ver.ExpectedPattern = strings.Join(patterns, ", ")
	c.ver.Result = "passed: every byte read matched"
	if !verified {
		c.ver.Result = "not verified on every device that reached this disk"
	}
	return c, true
}
