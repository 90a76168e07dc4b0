//go:build vm

package image

import (
	"bytes"
	"os"
	"strings"
	"testing"
	"time"
)

// TestVMNetbootDiscovery: --boot-discovery with the controller alone on
// the provisioning network (--boot-dhcp full). A SeaBIOS machine whose MAC
// no port has PXE-boots: the controller answers it with the discovery
// ramdisk, its agent reports the inventory, and the machine appears as a
// node in enroll with a port for its MAC and its two NVMe disks in the
// inventory; the agent powers it off (QEMU exits) and nothing was written
// to its disks. Booting it again gets no offer: it is a node now, and the
// controller is not booting it.
func TestVMNetbootDiscovery(t *testing.T) {
	if !inNetbootNamespace(t, "TestVMNetbootDiscovery") {
		return
	}
	bootDir := netbootBootDir(t)
	provisioningBridge(t, 1)
	c := startControllerOn(t, bridgeIP.String()+":0", "--allow-insecure-noauth", "--boot-dir", bootDir,
		"--boot-dhcp", "full", "--boot-interface", "br0", "--boot-dhcp-range", "10.88.0.100-10.88.0.150",
		"--boot-discovery", "--boot-discovery-driver", "fake-hardware")
	m := &netbootNode{name: "disc", mac: "52:54:00:88:00:d1", firmware: "bios"}
	start := time.Now()
	m.start(t, "tap0")

	var uuid string
	deadline := time.Now().Add(8 * time.Minute)
	for uuid == "" {
		_, ports := c.call(t, "GET", "/v1/ports?detail=true&address="+m.mac, nil)
		if list, _ := ports["ports"].([]any); len(list) > 0 {
			uuid, _ = list[0].(map[string]any)["node_uuid"].(string)
		}
		if time.Now().After(deadline) {
			t.Fatalf("no node was discovered for %s", m.mac)
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Logf("[%6.1fs] discovered as node %s", time.Since(start).Seconds(), uuid)
	_, n := c.call(t, "GET", "/v1/nodes/"+uuid, nil)
	if n["provision_state"] != "enroll" {
		t.Errorf("discovered node is %v, want enroll", n["provision_state"])
	}
	if extra, _ := n["extra"].(map[string]any); extra["auto_discovered"] != true {
		t.Errorf("extra has no auto_discovered: %v", extra)
	}
	_, inv := c.call(t, "GET", "/v1/nodes/"+uuid+"/inventory", nil)
	raw := toJSON(inv)
	for _, d := range m.disks {
		if !strings.Contains(raw, d.Serial) {
			t.Errorf("inventory lacks disk %s: %s", d.Serial, raw)
		}
	}
	select {
	case <-m.exited:
		t.Logf("[%6.1fs] the agent powered the machine off", time.Since(start).Seconds())
	case <-time.After(2 * time.Minute):
		t.Errorf("the machine was not powered off after discovery")
	}
	// Discovery reads, never writes: the pattern is where the test put it.
	for _, d := range m.disks {
		b, err := os.ReadFile(d.Path)
		must(t, err)
		ff := bytes.Repeat([]byte{0x5a}, 512)
		size := len(b)
		if !bytes.Equal(b[:512], ff) || string(b[512:520]) != "EFI PART" || !bytes.Equal(b[1024:1536], ff) ||
			string(b[size-512:size-504]) != "EFI PART" || !bytes.Equal(b[size/2:size/2+512], ff) {
			t.Errorf("%s was written during discovery", d.Serial)
		}
	}
	_, h := c.call(t, "GET", "/v1/nodes/"+uuid+"/history", nil)
	if hist := historyLines(h); !strings.Contains(hist, "discovered by the boot service") {
		t.Errorf("history does not say how the node came:\n%s", hist)
	}
	_, list := c.call(t, "GET", "/v1/nodes", nil)
	if nodes, _ := list["nodes"].([]any); len(nodes) != 1 {
		t.Errorf("%d nodes, want the one discovered: %v", len(nodes), list)
	}
	probeNoOffer(t, m.mac)
}
