package bmc

import (
	"encoding/json"
	"net"
	"testing"
)

// FuzzInspectDocuments feeds the decoders of an out-of-band inspection
// (the system, collections, Processor, Memory, Storage, Drive,
// SimpleStorage, EthernetInterface) and the health's arbitrary bytes: a
// value or an error, never a panic, and what they return is sane.
func FuzzInspectDocuments(f *testing.F) {
	f.Add([]byte(`{"Status":{"Health":"Critical","HealthRollup":"OK"},"MemorySummary":{"TotalSystemMemoryGiB":0.5},"ProcessorSummary":{"LogicalProcessorCount":4,"Model":"Xeon"},"Processors":{"@odata.id":"/redfish/v1/Systems/1/Processors"},"Storage":{"@odata.id":"/s"},"Boot":{"BootSourceOverrideMode":"UEFI"},"Model":"R640","UUID":"x"}`))
	f.Add([]byte(`{"Members":[{"@odata.id":"/redfish/v1/Systems/1/Processors/CPU0"},{"@odata.id":7},null]}`))
	f.Add([]byte(`{"ProcessorType":"CPU","InstructionSet":"x86-64","TotalThreads":"32","TotalCores":16,"MaxSpeedMHz":1e400,"Model":"Xeon"}`))
	f.Add([]byte(`{"ProcessorType":"GPU","Status":{"State":"Absent"},"TotalThreads":-1}`))
	f.Add([]byte(`{"CapacityMiB":32768,"Status":{"State":"Enabled"}}`))
	f.Add([]byte(`{"Drives":[{"@odata.id":"/redfish/v1/Systems/1/Storage/1/Drives/0"}]}`))
	f.Add([]byte(`{"Name":"Disk 0","CapacityBytes":960197124096,"MediaType":"SSD","SerialNumber":"S1"}`))
	f.Add([]byte(`{"Devices":[{"Name":"d","CapacityBytes":"1e12"},{"CapacityBytes":null},7]}`))
	f.Add([]byte(`{"Id":"NIC.1","MACAddress":"0C:C4:7A:00:00:01","SpeedMbps":25000}`))
	f.Add([]byte(`{"MACAddress":"","PermanentMACAddress":"aa-bb-cc-dd-ee-ff","SpeedMbps":"fast"}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, body []byte) {
		switch h := decodeSystemHealth(body); h {
		case HealthOK, HealthWarning, HealthCritical, HealthUnknown:
		default:
			t.Fatalf("health %q", h)
		}
		if si, err := parseSystemInventory(body); err == nil {
			if si.inv.Memory != nil && si.inv.Memory.PhysicalMB <= 0 {
				t.Fatalf("memory %d", si.inv.Memory.PhysicalMB)
			}
			if si.summaryCPUs < 0 {
				t.Fatalf("cpus %d", si.summaryCPUs)
			}
			if _, err := json.Marshal(si.inv); err != nil {
				t.Fatal(err)
			}
		}
		if ms, err := parseMembers(body); err == nil && len(ms) > maxInspectMembers {
			t.Fatalf("%d members", len(ms))
		}
		if p, err := parseProcessor(body); err == nil && (p.threads < 0 || p.mhz < 0) {
			t.Fatalf("processor %+v", p)
		}
		if mib, err := parseMemoryMiB(body); err == nil && mib < 0 {
			t.Fatalf("memory %d", mib)
		}
		_, _ = parseStorageDrives(body)
		if d, ok, err := parseDrive(body); err == nil && ok && d.Size <= 0 {
			t.Fatalf("drive %+v", d)
		}
		if ds, err := parseSimpleStorage(body); err == nil {
			for _, d := range ds {
				if d.Size <= 0 {
					t.Fatalf("device %+v", d)
				}
			}
		}
		if nic, ok, err := parseEthernet(body); err == nil && ok {
			if hw, err := net.ParseMAC(nic.MACAddress); err != nil || len(hw) != 6 || hw.String() != nic.MACAddress {
				t.Fatalf("MAC %q", nic.MACAddress)
			}
		}
	})
}
