//go:build vm

package image

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/anvil-metal/anvil/bmc/vbmc/ipmisim"
)

// TestVMDiscoveryRulesInBandBMCAndLLDP: rack them, power them on, done.
// Two machines no node knows PXE-boot on the provisioning bridge. Each
// has an in-band IPMI interface (QEMU's isa-ipmi-kcs) wired to its own
// ipmi_sim, whose LAN interface listens on the address it reports
// (127.0.0.2 and 127.0.0.3, port 623), and Debian's lldpd plays the
// switch on their taps. One sensitive rule sets driver=ipmi,
// ipmi_address={inventory[bmc_address]}, credentials, a resource class
// and a trait, and manages: both end manageable with their BMC verified
// over IPMI, and their ports' local_link_connection names the switch
// port (tap0, tap1). Nobody touches them.
func TestVMDiscoveryRulesInBandBMCAndLLDP(t *testing.T) {
	ipmisim.SkipIfMissing(t)
	lldpd, err := exec.LookPath("lldpd")
	if err != nil {
		if _, err := os.Stat("/usr/sbin/lldpd"); err != nil {
			t.Skip("lldpd is not installed (Debian package lldpd)")
		}
		lldpd = "/usr/sbin/lldpd"
	}
	if !inNetbootNamespace(t, "TestVMDiscoveryRulesInBandBMCAndLLDP") {
		return
	}
	bootDir := netbootBootDir(t)
	provisioningBridge(t, 2)
	startSwitch(t, lldpd, "tap0,tap1")

	// The BMCs: power is always on as far as they know (the machines
	// power themselves off after discovery; verifying only reads it).
	dir := t.TempDir()
	chassis := filepath.Join(dir, "chassis-control")
	must(t, os.WriteFile(chassis, []byte("#!/bin/sh\ncase \"$2 $3\" in\n\"get power\") echo power:1;;\n\"get boot\") echo boot:pxe;;\nesac\n"), 0o700))
	nodes := []*netbootNode{
		{name: "rack7-1", mac: "52:54:00:88:07:01", firmware: "bios"},
		{name: "rack7-2", mac: "52:54:00:88:07:02", firmware: "bios"},
	}
	for i, n := range nodes {
		kcs := 9101 + i
		bmcIP := fmt.Sprintf("127.0.0.%d", 2+i)
		ipmisim.Start(t, ipmisim.Options{ChassisControl: chassis, Addr: bmcIP, Port: 623, KCSPort: kcs,
			LAN: ipmisim.LANConfig{IP: bmcIP, MAC: fmt.Sprintf("52:54:00:bb:07:%02d", i+1)}})
		n.qemuArgs = []string{"-chardev", fmt.Sprintf("socket,id=ipmi0,host=127.0.0.1,port=%d,reconnect=10", kcs),
			"-device", "ipmi-bmc-extern,chardev=ipmi0,id=bmc0", "-device", "isa-ipmi-kcs,bmc=bmc0"}
	}

	c := startControllerOn(t, bridgeIP.String()+":0", "--allow-insecure-noauth", "--boot-dir", bootDir,
		"--boot-dhcp", "full", "--boot-interface", "br0", "--boot-dhcp-range", "10.88.0.100-10.88.0.150",
		"--boot-discovery", "--boot-discovery-driver", "fake-hardware")
	rule := callAt(t, c, "1.96", "POST", "/v1/inspection_rules", map[string]any{
		"description": "rack 7: the BMC the agent found, our credentials, manage", "sensitive": true, "priority": 50,
		"conditions": []any{map[string]any{"op": "!is-empty", "args": map[string]any{"value": "{inventory[bmc_address]}"}}},
		"actions": []any{
			map[string]any{"op": "set-attribute", "args": map[string]any{"path": "driver", "value": "ipmi"}},
			map[string]any{"op": "set-attribute", "args": map[string]any{"path": "driver_info/ipmi_address", "value": "{inventory[bmc_address]}"}},
			map[string]any{"op": "set-attribute", "args": map[string]any{"path": "driver_info/ipmi_username", "value": "admin"}},
			map[string]any{"op": "set-attribute", "args": map[string]any{"path": "driver_info/ipmi_password", "value": "password"}},
			map[string]any{"op": "set-attribute", "args": map[string]any{"path": "resource_class", "value": "rack7"}},
			map[string]any{"op": "add-trait", "args": map[string]any{"name": "CUSTOM_RACK7"}},
			map[string]any{"op": "anvil-manage", "args": map[string]any{}},
		}})["uuid"].(string)

	start := time.Now()
	for i, n := range nodes {
		n.start(t, fmt.Sprintf("tap%d", i))
	}
	deadline := time.Now().Add(9 * time.Minute)
	for i, m := range nodes {
		uuid := ""
		for uuid == "" {
			_, ports := c.call(t, "GET", "/v1/ports?detail=true&address="+m.mac, nil)
			if list, _ := ports["ports"].([]any); len(list) > 0 {
				uuid, _ = list[0].(map[string]any)["node_uuid"].(string)
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s was not discovered", m.name)
			}
			time.Sleep(time.Second)
		}
		n := c.waitState(t, uuid, "manageable", time.Until(deadline))
		t.Logf("[%6.1fs] %s discovered as %s and manageable", time.Since(start).Seconds(), m.name, uuid)
		n = callAt(t, c, "1.96", "GET", "/v1/nodes/"+uuid, nil)
		di, _ := n["driver_info"].(map[string]any)
		if want := fmt.Sprintf("127.0.0.%d", 2+i); n["driver"] != "ipmi" || di["ipmi_address"] != want {
			t.Errorf("%s: driver %v, ipmi_address %v; want ipmi at %s (the in-band bmc_address)", m.name, n["driver"], di["ipmi_address"], want)
		}
		if n["resource_class"] != "rack7" || fmt.Sprint(n["traits"]) != "[CUSTOM_RACK7]" {
			t.Errorf("%s: resource_class %v, traits %v", m.name, n["resource_class"], n["traits"])
		}
		_, inv := c.call(t, "GET", "/v1/nodes/"+uuid+"/inventory", nil)
		if got, _ := inv["inventory"].(map[string]any); got["bmc_mac"] != fmt.Sprintf("52:54:00:bb:07:%02d", i+1) {
			t.Errorf("%s: inventory bmc_mac %v", m.name, got["bmc_mac"])
		}
		_, ports := c.call(t, "GET", "/v1/ports?detail=true&address="+m.mac, nil)
		port := ports["ports"].([]any)[0].(map[string]any)
		llc, _ := port["local_link_connection"].(map[string]any)
		if llc["port_id"] != fmt.Sprintf("tap%d", i) || llc["switch_info"] != "rack7-switch" || llc["switch_id"] == nil {
			t.Errorf("%s: local_link_connection %v, want port tap%d of rack7-switch", m.name, llc, i)
		}
		_, h := c.call(t, "GET", "/v1/nodes/"+uuid+"/history", nil)
		hist := historyLines(h)
		if !strings.Contains(hist, "discovery rule "+rule+": anvil-manage") || strings.Contains(hist, `"password"`) {
			t.Errorf("%s: history does not show the rule's changes (or shows a credential):\n%s", m.name, hist)
		}
	}
}

// startSwitch runs lldpd on ifaces as the switch: port IDs are interface
// names, a frame every 2 s.
func startSwitch(t *testing.T, lldpd, ifaces string) {
	t.Helper()
	dir, err := os.MkdirTemp("", "anvil-lldpd-")
	must(t, err)
	// lldpd's unprivileged half must reach its control socket.
	must(t, os.Chmod(dir, 0o755))
	conf := filepath.Join(dir, "lldpd.conf")
	must(t, os.WriteFile(conf, []byte("configure system hostname rack7-switch\nconfigure lldp portidsubtype ifname\nconfigure lldp tx-interval 2\n"), 0o644))
	cmd := exec.Command(lldpd, "-d", "-u", filepath.Join(dir, "ctl"), "-O", conf, "-I", ifaces, "-S", "anvil test switch")
	var log bytes.Buffer
	cmd.Stdout, cmd.Stderr = &log, &log
	must(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("lldpd:\n%s", log.String())
		}
		_ = os.RemoveAll(dir)
	})
}

// callAt is controller.call at another microversion (inspection rules
// are 1.96).
func callAt(t *testing.T, c *controller, version, method, path string, body any) map[string]any {
	t.Helper()
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		must(t, err)
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, c.url+path, r)
	must(t, err)
	req.Header.Set("X-OpenStack-Ironic-API-Version", version)
	req.Header.Set("Content-Type", "application/json")
	res, err := c.hc.Do(req)
	must(t, err)
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	if res.StatusCode >= 300 {
		t.Fatalf("%s %s = %d: %s", method, path, res.StatusCode, raw)
	}
	var m map[string]any
	must(t, json.Unmarshal(raw, &m))
	return m
}
