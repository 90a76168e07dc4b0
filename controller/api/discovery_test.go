package api

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/protocol"
)

// discoveryEnv is an API with discovery on (fake-hardware driver, so the
// test's conductor has it) and boot files to serve.
func discoveryEnv(t *testing.T, tune func(*DiscoveryConfig)) *testEnv {
	return discoveryEnvOn(t, onSQLite, tune)
}

// discoveryEnvOn is discoveryEnv on a database of the given kind.
func discoveryEnvOn(t *testing.T, kind storeKind, tune func(*DiscoveryConfig)) *testEnv {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "vmlinuz"), []byte("k"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "initramfs.cpio.gz"), []byte("i"), 0o644))
	return newEnvOn(t, kind, func(c *Config) {
		c.BootDir, c.PublicURL = dir, "http://10.0.2.100:6385"
		c.Discovery = DefaultDiscovery()
		c.Discovery.Enabled, c.Discovery.Driver = true, "fake-hardware"
		if tune != nil {
			tune(&c.Discovery)
		}
	})
}

func discoveryReport(serial string, macs ...string) protocol.DiscoveryRequest {
	inv := protocol.Inventory{CPU: protocol.CPU{Count: 4, Architecture: "x86_64"}, Memory: protocol.Memory{PhysicalMB: 8192},
		SystemVendor: protocol.SystemVendor{Manufacturer: "QEMU", ProductName: "Standard PC", SerialNumber: serial},
		Disks:        []protocol.Disk{{Name: "/dev/vda", Size: 8 << 30, Serial: "disk-1"}},
		PCI:          []protocol.PCIDevice{{Address: "0000:00:05.0", Vendor: "1000", Device: "0097", Class: "010700"}},
		Boot:         protocol.BootInfo{CurrentBootMode: "bios"}}
	for i, m := range macs {
		inv.Interfaces = append(inv.Interfaces, protocol.NIC{Name: fmt.Sprintf("eth%d", i), MACAddress: m})
	}
	return protocol.DiscoveryRequest{BootID: "boot-1", Inventory: inv}
}

func TestDiscoveryEnrolsUnknownMachine(t *testing.T) {
	e := discoveryEnv(t, nil)

	// iPXE asking by an unknown MAC gets the discovery ramdisk: no node,
	// no nonce.
	r := e.do("GET", "/v1/boot/52-54-00-AA-00-01/ipxe", "", nil)
	require.Equal(t, 200, r.status, string(r.body))
	script := string(r.body)
	assert.Contains(t, script, "kernel http://10.0.2.100:6385/v1/boot/files/vmlinuz initrd=initramfs anvil.api=http://10.0.2.100:6385 anvil.discovery console=tty0")
	assert.NotContains(t, script, "anvil.node=")
	assert.NotContains(t, script, "anvil.token=")
	assert.Equal(t, 404, e.do("GET", "/v1/boot/unknown-name/ipxe", "", nil).status, "only a MAC can be discovered")

	r = e.do("POST", "/v1/discovery", "", discoveryReport("SN-0001", "52:54:00:aa:00:01", "52:54:00:AA:00:02", "52:54:00:aa:00:01"))
	require.Equal(t, 201, r.status, string(r.body))
	var dr protocol.DiscoveryResponse
	require.NoError(t, json.Unmarshal(r.body, &dr))
	assert.Equal(t, protocol.DiscoveryPowerOff, dr.Action)
	id := dr.NodeUUID

	n := e.do("GET", "/v1/nodes/"+id, latest, nil).json(t)
	assert.Equal(t, "enroll", n["provision_state"])
	assert.Equal(t, "fake-hardware", n["driver"])
	assert.Contains(t, n["description"], "serial SN-0001")
	assert.Equal(t, true, n["extra"].(map[string]any)["auto_discovered"])
	props := n["properties"].(map[string]any)
	assert.EqualValues(t, 4, props["cpus"])
	assert.EqualValues(t, 8192, props["memory_mb"])

	ports := e.do("GET", "/v1/nodes/"+id+"/ports?detail=true", latest, nil).json(t)["ports"].([]any)
	var addrs []string
	for _, p := range ports {
		addrs = append(addrs, p.(map[string]any)["address"].(string))
	}
	assert.ElementsMatch(t, []string{"52:54:00:aa:00:01", "52:54:00:aa:00:02"}, addrs, "one port per MAC, duplicates folded")

	inv := e.do("GET", "/v1/nodes/"+id+"/inventory", latest, nil).json(t)
	assert.Equal(t, "SN-0001", inv["inventory"].(map[string]any)["system_vendor"].(map[string]any)["serial_number"])
	assert.NotEmpty(t, inv["plugin_data"].(map[string]any)["warnings"], "the SAS controller without a driver is a hardware warning")

	hist := string(e.do("GET", "/v1/nodes/"+id+"/history", latest, nil).body)
	assert.Contains(t, hist, "discovered by the boot service")
	assert.Contains(t, hist, "nothing is cleaned or deployed until an operator acts")

	// Now a node: the same MAC boots "the next device", not discovery.
	assert.Contains(t, string(e.do("GET", "/v1/boot/52:54:00:aa:00:01/ipxe", "", nil).body), "expects no agent")

	// No second node: not for a known MAC, not for the same serial with
	// new NICs; the existing node is left as it was, its history says so.
	r = e.do("POST", "/v1/discovery", "", discoveryReport("SN-OTHER", "52:54:00:aa:00:02"))
	require.Equal(t, 409, r.status)
	assert.Contains(t, r.fault(t), "never changes an existing node")
	r = e.do("POST", "/v1/discovery", "", discoveryReport("SN-0001", "52:54:00:aa:00:09"))
	require.Equal(t, 409, r.status)
	assert.Contains(t, r.fault(t), "already enrolled")
	hist = string(e.do("GET", "/v1/nodes/"+id+"/history", latest, nil).body)
	assert.Contains(t, hist, "refused")
	assert.Equal(t, 1, strings.Count(hist, "refused"), "a replayed report cannot fill the history: %s", hist)
	list := e.do("GET", "/v1/nodes", latest, nil).json(t)["nodes"].([]any)
	assert.Len(t, list, 1)
	after := e.do("GET", "/v1/nodes/"+id, latest, nil).json(t)
	assert.Equal(t, n["updated_at"], after["updated_at"], "a refused report never writes the node")

	// A placeholder serial is no identity: two machines with it are two nodes.
	require.Equal(t, 201, e.do("POST", "/v1/discovery", "", discoveryReport("To Be Filled By O.E.M.", "52:54:00:bb:00:01")).status)
	require.Equal(t, 201, e.do("POST", "/v1/discovery", "", discoveryReport("To Be Filled By O.E.M.", "52:54:00:bb:00:02")).status)
}

// A rack's worth of reports of one machine at once (its agent restarted,
// a replay): one node, the rest refused.
func TestDiscoveryConcurrentReports(t *testing.T) {
	e := discoveryEnv(t, nil)
	codes := make(chan int, 8)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			codes <- e.do("POST", "/v1/discovery", "", discoveryReport("SN-RACE", "52:54:00:ff:00:01")).status
		})
	}
	wg.Wait()
	close(codes)
	got := map[int]int{}
	for c := range codes {
		got[c]++
	}
	assert.Equal(t, map[int]int{201: 1, 409: 7}, got)
	assert.Len(t, e.do("GET", "/v1/nodes", latest, nil).json(t)["nodes"], 1)
}

func TestDiscoveryRefusesBadReports(t *testing.T) {
	e := discoveryEnv(t, nil)
	for name, body := range map[string]any{
		"not JSON":       "{",
		"no NIC":         discoveryReport("S"),
		"invalid MAC":    discoveryReport("S", "52:54:00:zz:00:01"),
		"only multicast": discoveryReport("S", "01:00:5e:00:00:01"),
		"too many NICs": func() protocol.DiscoveryRequest {
			var macs []string
			for i := range maxDiscoveryNICs + 1 {
				macs = append(macs, fmt.Sprintf("52:54:00:cc:00:%02x", i))
			}
			return discoveryReport("S", macs...)
		}(),
	} {
		r := e.do("POST", "/v1/discovery", "", body)
		assert.Equal(t, 400, r.status, name)
		assert.NotEmpty(t, r.fault(t), name)
	}
	r := e.do("POST", "/v1/discovery", "", `{"inventory":{"interfaces":[{"mac_address":"52:54:00:cc:00:01"}],"x":"`+strings.Repeat("a", maxDiscoveryBytes)+`"}}`)
	assert.Equal(t, 413, r.status, "a report is bounded")
	assert.Empty(t, e.do("GET", "/v1/nodes", latest, nil).json(t)["nodes"])
}

func TestDiscoveryBounds(t *testing.T) {
	t.Run("pending", func(t *testing.T) {
		e := discoveryEnv(t, func(c *DiscoveryConfig) { c.MaxPending = 2 })
		for i := range 2 {
			require.Equal(t, 201, e.do("POST", "/v1/discovery", "", discoveryReport("", fmt.Sprintf("52:54:00:dd:00:%02x", i))).status)
		}
		r := e.do("POST", "/v1/discovery", "", discoveryReport("", "52:54:00:dd:00:09"))
		require.Equal(t, 503, r.status)
		assert.Contains(t, r.fault(t), "--boot-discovery-max-pending")
		// An operator takes one out of enroll: room for the next.
		id := e.do("GET", "/v1/nodes", latest, nil).json(t)["nodes"].([]any)[0].(map[string]any)["uuid"].(string)
		require.Equal(t, 202, e.provision(id, "manage", nil).status)
		e.waitState(id, "manageable")
		assert.Equal(t, 201, e.do("POST", "/v1/discovery", "", discoveryReport("", "52:54:00:dd:00:09")).status)
	})
	t.Run("rate", func(t *testing.T) {
		e := discoveryEnv(t, func(c *DiscoveryConfig) { c.Rate, c.Burst = 0.001, 3 })
		codes := map[int]int{}
		for i := range 6 {
			codes[e.do("POST", "/v1/discovery", "", discoveryReport("", fmt.Sprintf("52:54:00:ee:00:%02x", i))).status]++
		}
		assert.Equal(t, map[int]int{201: 3, 429: 3}, codes, "over all sources, loopback included")
	})
}

func TestDiscoveryOffByDefault(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "vmlinuz"), []byte("k"), 0o644))
	e := newEnv(t, func(c *Config) { c.BootDir = dir })
	r := e.do("POST", "/v1/discovery", "", discoveryReport("SN-1", "52:54:00:aa:00:01"))
	require.Equal(t, 404, r.status)
	assert.Contains(t, r.fault(t), "--boot-discovery")
	assert.Equal(t, 404, e.do("GET", "/v1/boot/52:54:00:aa:00:01/ipxe", "", nil).status, "unknown MACs get no ramdisk")
	assert.Empty(t, e.do("GET", "/v1/nodes", latest, nil).json(t)["nodes"])
}
