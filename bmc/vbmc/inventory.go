package vbmc

// The node's health and hardware as its BMC reports them: Status.Health
// (which a test changes through /control/{node}/health) and the
// Processors, Memory, Storage and EthernetInterfaces resources that
// out-of-band inspection (inspect_interface=redfish) reads. A QEMU node
// reports what its command line gives the VM.

import (
	"crypto/sha1"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
)

// Hardware is what a node's BMC reports of its hardware.
type Hardware struct {
	CPUs      int    // logical processors
	CPUModel  string // the processor's Model
	MemoryMiB int
	Disks     []HardwareDisk
	MACs      []string // the NICs, in order
}

// HardwareDisk is one drive.
type HardwareDisk struct {
	Name      string
	Serial    string
	SizeBytes int64
	Bus       string // a QEMUBuses value
}

// hardwareReporter is a Backend that knows its machine's hardware.
type hardwareReporter interface {
	Hardware() Hardware
}

// hwState is a Node's health and hardware override.
type hwState struct {
	mu     sync.Mutex
	health string // "" means OK
	hw     *Hardware
}

// Health returns what the BMC reports as the system's Status.Health.
func (n *Node) Health() string {
	n.hw.mu.Lock()
	defer n.hw.mu.Unlock()
	if n.hw.health == "" {
		return "OK"
	}
	return n.hw.health
}

// SetHealth changes the reported health: OK, Warning or Critical.
func (n *Node) SetHealth(h string) error {
	switch h {
	case "OK", "Warning", "Critical":
	default:
		return fmt.Errorf("health %q: want OK, Warning or Critical", h)
	}
	n.hw.mu.Lock()
	defer n.hw.mu.Unlock()
	n.hw.health = h
	return nil
}

// SetHardware replaces what the BMC reports of the node's hardware
// (tests; a QEMU node reports its configuration otherwise).
func (n *Node) SetHardware(h Hardware) {
	n.hw.mu.Lock()
	defer n.hw.mu.Unlock()
	n.hw.hw = &h
}

// Hardware returns what the BMC reports: SetHardware's, else the
// backend's (QEMU), else a small machine with one disk and one NIC whose
// MAC derives from the node's name.
func (n *Node) Hardware() Hardware {
	n.hw.mu.Lock()
	h := n.hw.hw
	n.hw.mu.Unlock()
	if h != nil {
		return *h
	}
	if r, ok := n.backend.(hardwareReporter); ok {
		return r.Hardware()
	}
	sum := sha1.Sum([]byte("anvil-vbmc nic " + n.Name))
	return Hardware{CPUs: 1, MemoryMiB: 512, MACs: []string{fmt.Sprintf("52:54:00:%02x:%02x:%02x", sum[0], sum[1], sum[2])},
		Disks: []HardwareDisk{{Name: "Disk 0", Serial: "ANVIL-DISK-0", SizeBytes: 10 << 30, Bus: BusNVMe}}}
}

// qemuDefaultMAC is the MAC QEMU gives the first NIC without one.
const qemuDefaultMAC = "52:54:00:12:34:56"

// Hardware implements hardwareReporter from the configuration the command
// line is built from (Args): -smp, -m, the disks (their files' sizes) and
// the NICs' MACs.
func (q *QEMU) Hardware() Hardware {
	c := q.cfg
	h := Hardware{CPUs: c.CPUs, CPUModel: "QEMU Virtual CPU version 2.5+", MemoryMiB: c.MemoryMiB}
	for i, d := range c.Disks {
		size := d.SizeMiB << 20
		if fi, err := os.Stat(d.Path); err == nil {
			size = fi.Size()
		}
		h.Disks = append(h.Disks, HardwareDisk{Name: fmt.Sprintf("Disk %d", i), Serial: d.Serial, SizeBytes: size, Bus: d.Bus})
	}
	if c.NIC != nil {
		mac := c.NIC.MAC
		if mac == "" {
			mac = qemuDefaultMAC
		}
		h.MACs = append(append(h.MACs, mac), c.NIC.MoreMACs...)
	}
	return h
}

// systemInventory adds the summaries and links of the inventory resources
// to a ComputerSystem document.
func (s *Server) systemInventory(sys map[string]any, id string, n *Node) {
	h := n.Hardware()
	sys["ProcessorSummary"] = map[string]any{"Count": h.CPUs, "LogicalProcessorCount": h.CPUs, "Model": h.CPUModel,
		"Status": map[string]any{"State": "Enabled", "Health": "OK"}}
	sys["MemorySummary"] = map[string]any{"TotalSystemMemoryGiB": float64(h.MemoryMiB) / 1024,
		"Status": map[string]any{"State": "Enabled", "Health": "OK"}}
	sys["Processors"] = link(id + "/Processors")
	sys["Memory"] = link(id + "/Memory")
	sys["Storage"] = link(id + "/Storage")
	sys["EthernetInterfaces"] = link(id + "/EthernetInterfaces")
	sys["SerialNumber"] = strings.ToUpper(n.UUID()[:8])
}

// storageGroups puts the disks under one Storage per controller, as the
// command line attaches them: a controller per NVMe disk, one host
// adapter per other bus.
func storageGroups(h Hardware) (ids []string, drives map[string][]int) {
	drives = map[string][]int{}
	for i, d := range h.Disks {
		sid := "NVMe" + fmt.Sprint(i)
		if d.Bus != BusNVMe && d.Bus != "" {
			sid = strings.ReplaceAll(d.Bus, "-", "")
		}
		if _, ok := drives[sid]; !ok {
			ids = append(ids, sid)
		}
		drives[sid] = append(drives[sid], i)
	}
	return ids, drives
}

// busProtocol is a bus's Redfish Protocol and whether its disks spin
// (QEMU's scsi-hd and ide-hd report a rotational disk; NVMe does not).
func busProtocol(bus string) (string, bool) {
	switch bus {
	case BusNVMe, "":
		return "NVMe", false
	case BusAHCI:
		return "SATA", true
	case BusMegaSAS, BusMPTSAS:
		return "SAS", true
	}
	return "SCSI", true
}

var errNoResource = errors.New("no such resource")

// inventoryDoc answers the inventory resources under a system: rest is
// the path after /redfish/v1/Systems/{id}/.
func inventoryDoc(id, rest string, n *Node) (map[string]any, error) {
	h := n.Hardware()
	parts := strings.Split(rest, "/")
	switch {
	case rest == "Processors":
		return collection(id+"/Processors", "#ProcessorCollection.ProcessorCollection", "Processors Collection", []string{id + "/Processors/CPU0"}), nil
	case rest == "Processors/CPU0":
		p := odata(id+"/"+rest, "#Processor.v1_7_0.Processor")
		p["Id"], p["Name"], p["Socket"] = "CPU0", "Processor", "CPU 0"
		p["ProcessorType"], p["ProcessorArchitecture"], p["InstructionSet"] = "CPU", "x86", "x86-64"
		p["Model"], p["TotalCores"], p["TotalThreads"] = h.CPUModel, h.CPUs, h.CPUs
		p["Status"] = map[string]any{"State": "Enabled", "Health": "OK"}
		return p, nil
	case rest == "Memory":
		return collection(id+"/Memory", "#MemoryCollection.MemoryCollection", "Memory Collection", []string{id + "/Memory/DIMM0"}), nil
	case rest == "Memory/DIMM0":
		m := odata(id+"/"+rest, "#Memory.v1_7_0.Memory")
		m["Id"], m["Name"], m["MemoryDeviceType"], m["CapacityMiB"] = "DIMM0", "DIMM 0", "DRAM", h.MemoryMiB
		m["Status"] = map[string]any{"State": "Enabled", "Health": "OK"}
		return m, nil
	case rest == "EthernetInterfaces":
		var members []string
		for i := range h.MACs {
			members = append(members, fmt.Sprintf("%s/EthernetInterfaces/NIC%d", id, i))
		}
		return collection(id+"/EthernetInterfaces", "#EthernetInterfaceCollection.EthernetInterfaceCollection", "Ethernet Interfaces", members), nil
	case len(parts) == 2 && parts[0] == "EthernetInterfaces":
		var i int
		if _, err := fmt.Sscanf(parts[1], "NIC%d", &i); err != nil || fmt.Sprintf("NIC%d", i) != parts[1] || i < 0 || i >= len(h.MACs) {
			return nil, errNoResource
		}
		e := odata(id+"/"+rest, "#EthernetInterface.v1_6_0.EthernetInterface")
		e["Id"], e["Name"], e["MACAddress"], e["PermanentMACAddress"] = parts[1], fmt.Sprintf("nic%d", i), h.MACs[i], h.MACs[i]
		e["LinkStatus"], e["Status"] = "LinkUp", map[string]any{"State": "Enabled", "Health": "OK"}
		return e, nil
	case rest == "Storage":
		ids, _ := storageGroups(h)
		var members []string
		for _, sid := range ids {
			members = append(members, id+"/Storage/"+sid)
		}
		return collection(id+"/Storage", "#StorageCollection.StorageCollection", "Storage Collection", members), nil
	case len(parts) == 2 && parts[0] == "Storage":
		_, groups := storageGroups(h)
		disks, ok := groups[parts[1]]
		if !ok {
			return nil, errNoResource
		}
		st := odata(id+"/"+rest, "#Storage.v1_8_0.Storage")
		st["Id"], st["Name"] = parts[1], parts[1]+" storage controller"
		var drives []any
		for _, i := range disks {
			drives = append(drives, link(fmt.Sprintf("%s/Drives/%d", id+"/"+rest, i)))
		}
		st["Drives"], st["Drives@odata.count"] = drives, len(drives)
		st["Status"] = map[string]any{"State": "Enabled", "Health": "OK"}
		return st, nil
	case len(parts) == 4 && parts[0] == "Storage" && parts[2] == "Drives":
		_, groups := storageGroups(h)
		for _, i := range groups[parts[1]] {
			if fmt.Sprint(i) != parts[3] {
				continue
			}
			disk := h.Disks[i]
			proto, spins := busProtocol(disk.Bus)
			d := odata(id+"/"+rest, "#Drive.v1_9_0.Drive")
			d["Id"], d["Name"], d["SerialNumber"], d["CapacityBytes"] = parts[3], disk.Name, disk.Serial, disk.SizeBytes
			d["Protocol"], d["MediaType"] = proto, map[bool]string{true: "HDD", false: "SSD"}[spins]
			d["Status"] = map[string]any{"State": "Enabled", "Health": "OK"}
			return d, nil
		}
	}
	return nil, errNoResource
}

// getInventory serves GET /redfish/v1/Systems/{id}/<resource>... for the
// inventory resources.
func (s *Server) getInventory(w http.ResponseWriter, r *http.Request, n *Node) {
	id := "/redfish/v1/Systems/" + n.SystemID()
	rest := strings.TrimPrefix(r.URL.Path, id+"/")
	if rest == r.URL.Path {
		rest = strings.TrimPrefix(r.URL.Path, "/redfish/v1/Systems/"+r.PathValue("id")+"/")
	}
	doc, err := inventoryDoc(id, strings.TrimSuffix(rest, "/"), n)
	if err != nil {
		redfishError(w, http.StatusNotFound, "ResourceMissingAtURI", fmt.Sprintf("The resource at the URI %s was not found.", r.URL.Path))
		return
	}
	writeJSON(w, http.StatusOK, doc)
}

func (s *Server) inventoryRoutes(mux *http.ServeMux) {
	for _, res := range []string{"Processors", "Memory", "Storage", "EthernetInterfaces"} {
		mux.HandleFunc("GET /redfish/v1/Systems/{id}/"+res, s.auth(s.withNode(s.getInventory)))
		mux.HandleFunc("GET /redfish/v1/Systems/{id}/"+res+"/{more...}", s.auth(s.withNode(s.getInventory)))
	}
}
