package bmc

// Out-of-band inspection over Redfish, through gofish on the bmclib
// session (as the BIOS and firmware): the documents are decoded here, by
// functions of the bytes (fuzzed), tolerant of what vendors leave out.

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net"
	"strconv"
	"strings"

	"github.com/stmcginnis/gofish"
)

// maxInspectMembers bounds each collection read by an inspection.
const maxInspectMembers = 256

// instructionSets maps a Processor's InstructionSet to Ironic's
// architecture names (PROCESSOR_INSTRUCTION_SET_MAP).
var instructionSets = map[string]string{
	"ARM-A32": "arm", "ARM-A64": "aarch64", "IA-64": "ia64", "MIPS32": "mips",
	"MIPS64": "mips64", "x86": "i686", "x86-64": "x86_64",
}

// bootModes maps BootSourceOverrideMode to Ironic's boot modes.
var bootModes = map[string]string{"UEFI": "uefi", "Legacy": "bios"}

// systemInfo is what an inspection needs of the ComputerSystem.
type systemInfo struct {
	inv                Inventory // memory, vendor, boot
	processors, memory string    // collection URIs ("" absent)
	storage, simple    string
	ethernet           string
	summaryCPUs        int
	summaryModel       string
}

// parseSystemInventory decodes the ComputerSystem document.
func parseSystemInventory(body []byte) (systemInfo, error) {
	obj, err := decodeObject(body)
	if err != nil {
		return systemInfo{}, fmt.Errorf("system: %w", err)
	}
	var si systemInfo
	si.processors, si.memory = odataID(obj["Processors"]), odataID(obj["Memory"])
	si.storage, si.simple, si.ethernet = odataID(obj["Storage"]), odataID(obj["SimpleStorage"]), odataID(obj["EthernetInterfaces"])
	if ms, ok := obj["MemorySummary"].(map[string]any); ok {
		if gib, ok := number(ms["TotalSystemMemoryGiB"]); ok && gib > 0 && gib < 1<<30 {
			si.inv.Memory = &InventoryMemory{PhysicalMB: int64(math.Round(gib * 1024))}
		}
	}
	if ps, ok := obj["ProcessorSummary"].(map[string]any); ok {
		if n, ok := number(ps["LogicalProcessorCount"]); ok && n > 0 && n < 1<<20 {
			si.summaryCPUs = int(n)
		}
		si.summaryModel = str(ps["Model"])
	}
	v := InventoryVendor{ProductName: str(obj["Model"]), SerialNumber: str(obj["SerialNumber"]),
		Manufacturer: str(obj["Manufacturer"]), SystemUUID: str(obj["UUID"])}
	if v != (InventoryVendor{}) {
		si.inv.SystemVendor = &v
	}
	if boot, ok := obj["Boot"].(map[string]any); ok {
		if mode := bootModes[str(boot["BootSourceOverrideMode"])]; mode != "" {
			si.inv.Boot = &InventoryBoot{CurrentBootMode: mode}
		}
	}
	return si, nil
}

// parseMembers decodes a collection's member URIs (at most
// maxInspectMembers).
func parseMembers(body []byte) ([]string, error) {
	obj, err := decodeObject(body)
	if err != nil {
		return nil, err
	}
	list, _ := obj["Members"].([]any)
	var out []string
	for _, m := range list {
		if id := odataID(m); id != "" && len(out) < maxInspectMembers {
			out = append(out, id)
		}
	}
	return out, nil
}

// processorInfo is one Processor.
type processorInfo struct {
	cpu     bool // ProcessorType CPU or absent (not a GPU, FPGA...)
	threads int
	arch    string
	model   string
	mhz     int
}

func parseProcessor(body []byte) (processorInfo, error) {
	obj, err := decodeObject(body)
	if err != nil {
		return processorInfo{}, err
	}
	p := processorInfo{model: str(obj["Model"]), arch: instructionSets[str(obj["InstructionSet"])]}
	t := str(obj["ProcessorType"])
	p.cpu = t == "" || t == "CPU"
	if st, ok := obj["Status"].(map[string]any); ok && str(st["State"]) == "Absent" {
		p.cpu = false // an empty socket
	}
	for _, k := range []string{"TotalThreads", "TotalCores"} {
		if n, ok := number(obj[k]); ok && n > 0 && n < 1<<20 {
			p.threads = int(n)
			break
		}
	}
	if n, ok := number(obj["MaxSpeedMHz"]); ok && n > 0 && n < 1<<20 {
		p.mhz = int(n)
	}
	return p, nil
}

// parseMemoryMiB is one Memory (DIMM) resource's capacity in MiB.
func parseMemoryMiB(body []byte) (int64, error) {
	obj, err := decodeObject(body)
	if err != nil {
		return 0, err
	}
	if st, ok := obj["Status"].(map[string]any); ok && str(st["State"]) == "Absent" {
		return 0, nil
	}
	if n, ok := number(obj["CapacityMiB"]); ok && n > 0 && n < 1<<40 {
		return int64(n), nil
	}
	return 0, nil
}

// parseStorageDrives is a Storage resource's Drives links.
func parseStorageDrives(body []byte) ([]string, error) {
	obj, err := decodeObject(body)
	if err != nil {
		return nil, err
	}
	list, _ := obj["Drives"].([]any)
	var out []string
	for _, d := range list {
		if id := odataID(d); id != "" && len(out) < maxInspectMembers {
			out = append(out, id)
		}
	}
	return out, nil
}

// parseDrive is one Drive; ok is false for a drive without a size (an
// empty bay).
func parseDrive(body []byte) (InventoryDisk, bool, error) {
	obj, err := decodeObject(body)
	if err != nil {
		return InventoryDisk{}, false, err
	}
	return diskFrom(obj)
}

func diskFrom(obj map[string]any) (InventoryDisk, bool, error) {
	size, ok := number(obj["CapacityBytes"])
	if !ok || size <= 0 || size > math.MaxInt64/2 {
		return InventoryDisk{}, false, nil
	}
	d := InventoryDisk{Name: str(obj["Name"]), Size: int64(size), Serial: str(obj["SerialNumber"])}
	switch str(obj["MediaType"]) {
	case "HDD":
		d.Rotational = new(bool)
		*d.Rotational = true
	case "SSD":
		d.Rotational = new(bool)
	}
	return d, true, nil
}

// parseSimpleStorage is a SimpleStorage resource's Devices (inline).
func parseSimpleStorage(body []byte) ([]InventoryDisk, error) {
	obj, err := decodeObject(body)
	if err != nil {
		return nil, err
	}
	list, _ := obj["Devices"].([]any)
	var out []InventoryDisk
	for _, v := range list {
		m, _ := v.(map[string]any)
		if d, ok, _ := diskFrom(m); ok && len(out) < maxInspectMembers {
			out = append(out, d)
		}
	}
	return out, nil
}

// parseEthernet is one EthernetInterface; ok is false when its MAC is not
// a valid one (Ironic skips those).
func parseEthernet(body []byte) (InventoryNIC, bool, error) {
	obj, err := decodeObject(body)
	if err != nil {
		return InventoryNIC{}, false, err
	}
	mac := str(obj["MACAddress"])
	if mac == "" {
		mac = str(obj["PermanentMACAddress"])
	}
	hw, err := net.ParseMAC(mac)
	if err != nil || len(hw) != 6 {
		return InventoryNIC{}, false, nil
	}
	nic := InventoryNIC{MACAddress: hw.String(), Name: str(obj["Id"])}
	if n, ok := number(obj["SpeedMbps"]); ok && n > 0 && n < 1<<31 {
		nic.SpeedMbps = int(n)
	}
	return nic, true, nil
}

// number reads a JSON number (or a numeric string, as some BMCs send).
func number(v any) (float64, bool) {
	var s string
	switch x := v.(type) {
	case json.Number:
		s = x.String()
	case float64:
		return x, !math.IsNaN(x) && !math.IsInf(x, 0)
	case string:
		s = strings.TrimSpace(x)
	default:
		return 0, false
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, false
	}
	return f, true
}

// inventory implements inspectSession.
func (s *redfishSession) inventory(ctx context.Context) (Inventory, error) {
	s.tr.reset()
	c, err := s.gofish(ctx)
	if err != nil {
		return Inventory{}, s.classify(ctx, err)
	}
	_, sys, err := s.systemDoc(c)
	if err != nil {
		return Inventory{}, s.classify(ctx, err)
	}
	raw, err := json.Marshal(sys)
	if err != nil {
		return Inventory{}, err
	}
	si, err := parseSystemInventory(raw)
	if err != nil {
		return Inventory{}, err
	}
	r := inventoryReader{s: s, c: c, ctx: ctx}
	inv := si.inv
	inv.Interfaces = []InventoryNIC{}
	if err := r.processors(&inv, si); err != nil {
		return Inventory{}, err
	}
	if inv.Memory == nil && si.memory != "" {
		if err := r.memory(&inv, si.memory); err != nil {
			return Inventory{}, err
		}
	}
	if err := r.disks(&inv, si); err != nil {
		return Inventory{}, err
	}
	if si.ethernet != "" {
		err := r.each(si.ethernet, func(body []byte) error {
			nic, ok, err := parseEthernet(body)
			if ok {
				inv.Interfaces = append(inv.Interfaces, nic)
			}
			return err
		})
		if err != nil {
			return Inventory{}, err
		}
	}
	return inv, nil
}

// inventoryReader reads the documents of one inspection.
type inventoryReader struct {
	s   *redfishSession
	c   *gofish.APIClient
	ctx context.Context
}

func (r inventoryReader) get(uri string) ([]byte, error) {
	body, _, err := getDoc(r.c, uri)
	if err != nil {
		return nil, r.s.classify(r.ctx, err)
	}
	return body, nil
}

// each reads a collection and calls fn with each member's document.
func (r inventoryReader) each(coll string, fn func([]byte) error) error {
	body, err := r.get(coll)
	if err != nil {
		return err
	}
	members, err := parseMembers(body)
	if err != nil {
		return fmt.Errorf("%s: %w", coll, err)
	}
	for _, m := range members {
		body, err := r.get(m)
		if err != nil {
			return err
		}
		if err := fn(body); err != nil {
			return fmt.Errorf("%s: %w", m, err)
		}
	}
	return nil
}

// processors fills cpu: the threads of every CPU (sushy's summary), the
// first one's model, speed and architecture; the system's
// ProcessorSummary when there is no collection.
func (r inventoryReader) processors(inv *Inventory, si systemInfo) error {
	inv.CPU = InventoryCPU{Count: si.summaryCPUs, ModelName: si.summaryModel}
	if si.processors == "" {
		return nil
	}
	var count int
	first := true
	err := r.each(si.processors, func(body []byte) error {
		p, err := parseProcessor(body)
		if err != nil || !p.cpu {
			return err
		}
		count += max(p.threads, 1)
		if first {
			first = false
			inv.CPU.Architecture, inv.CPU.Frequency = p.arch, p.mhz
			if p.model != "" {
				inv.CPU.ModelName = p.model
			}
		}
		return nil
	})
	if count > 0 {
		inv.CPU.Count = count
	}
	return err
}

// memory sums the DIMMs when the system has no MemorySummary.
func (r inventoryReader) memory(inv *Inventory, coll string) error {
	var mib int64
	err := r.each(coll, func(body []byte) error {
		n, err := parseMemoryMiB(body)
		mib += n
		return err
	})
	if err == nil && mib > 0 {
		inv.Memory = &InventoryMemory{PhysicalMB: mib}
	}
	return err
}

// disks reads the Storage drives, or the SimpleStorage devices when the
// system has no Storage (Ironic's order).
func (r inventoryReader) disks(inv *Inventory, si systemInfo) error {
	switch {
	case si.storage != "":
		inv.Disks = []InventoryDisk{}
		return r.each(si.storage, func(body []byte) error {
			drives, err := parseStorageDrives(body)
			if err != nil {
				return err
			}
			for _, uri := range drives {
				body, err := r.get(uri)
				if err != nil {
					return err
				}
				d, ok, err := parseDrive(body)
				if err != nil {
					return fmt.Errorf("%s: %w", uri, err)
				}
				if ok {
					inv.Disks = append(inv.Disks, d)
				}
			}
			return nil
		})
	case si.simple != "":
		inv.Disks = []InventoryDisk{}
		return r.each(si.simple, func(body []byte) error {
			disks, err := parseSimpleStorage(body)
			inv.Disks = append(inv.Disks, disks...)
			return err
		})
	}
	return nil
}
