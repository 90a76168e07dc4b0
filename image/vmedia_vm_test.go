//go:build vm

package image

import (
	"bytes"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/anvil-metal/anvil/bmc/vbmc"
)

// TestVMVirtualMediaStaticNetwork boots the agent without PXE or DHCP: a
// QEMU node behind anvil-vbmc (Redfish) with boot_interface
// redfish-virtual-media and a static address in network_data. The
// controller builds the node's ISO, the BMC fetches it and attaches it to
// the VM's CD drive (QMP), the Cd boot override boots it (ISOLINUX under
// SeaBIOS, shim+GRUB under OVMF), the agent configures 10.0.2.50/24 from
// the ISO's network_data (slirp's DHCP would hand out 10.0.2.15: the
// console must show the static address and no DHCP), looks up with the
// ISO's nonce, heartbeats, and cleans both NVMe disks, which the host
// then reads back; the virtual CD is empty afterwards.
func TestVMVirtualMediaStaticNetwork(t *testing.T) {
	for _, fw := range []string{"bios", "uefi"} {
		t.Run(fw, func(t *testing.T) { vmediaBoot(t, fw) })
	}
}

func vmediaBoot(t *testing.T, firmware string) {
	cfg, m := buildVMImage(t)
	if m.ISO == nil {
		t.Fatal("the image has no ISO")
	}
	start := time.Now()
	step := func(what string) { t.Logf("[%6.1fs] %s", time.Since(start).Seconds(), what) }
	c := startController(t, "--bmc-min-interval", "200ms", "--boot-dir", cfg.OutDir, "--public-url", "http://"+guestAPI)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv(guestfwdEnv, "127.0.0.1:"+c.port)

	dir := t.TempDir()
	const mac = "52:54:00:e2:e0:17"
	var disks []vbmc.QEMUDisk
	for i, serial := range []string{"ANVIL-VMEDIA-0001", "ANVIL-VMEDIA-0002"} {
		path := filepath.Join(dir, "nvme"+string(rune('0'+i))+".raw")
		writePattern(t, path, 64<<20)
		disks = append(disks, vbmc.QEMUDisk{Path: path, SizeMiB: 64, Serial: serial})
	}
	qc := vbmc.QEMUConfig{StateDir: filepath.Join(dir, "qemu"), Disks: disks, VirtualMedia: true, MemoryMiB: 768,
		NIC:                    &vbmc.QEMUNIC{MAC: mac, GuestFwd: []string{"tcp:" + guestAPI + "-cmd:" + self}},
		ShutdownTimeoutSeconds: 5}
	if firmware == "uefi" {
		qc.ExtraArgs = ovmfArgs(t, dir)
	}
	q, err := vbmc.NewQEMU(nil, qc)
	if err != nil {
		t.Fatal(err)
	}
	node := vbmc.NewNode("vmedia-node", q)
	bmcSrv := httptest.NewServer(vbmc.NewServer(nil, "admin", "password", node).Handler())
	t.Cleanup(func() {
		vbmc.CloseNodes([]*vbmc.Node{node})
		bmcSrv.Close()
		if t.Failed() {
			s, _ := os.ReadFile(filepath.Join(dir, "qemu", "serial.log"))
			t.Logf("serial console:\n%s", tailBytes(s, 6000))
			t.Logf("controller log:\n%s", tailBytes([]byte(c.log()), 4000))
		}
	})

	networkData := map[string]any{
		"links": []any{map[string]any{"id": "port0", "type": "phy", "ethernet_mac_address": mac}},
		"networks": []any{map[string]any{"id": "prov", "type": "ipv4", "link": "port0", "ip_address": "10.0.2.50", "netmask": "255.255.255.0",
			"routes": []any{map[string]any{"network": "0.0.0.0", "netmask": "0.0.0.0", "gateway": "10.0.2.2"}}}},
		"services": []any{map[string]any{"type": "dns", "address": "10.0.2.3"}},
	}
	props := map[string]any{}
	if firmware == "uefi" {
		props["capabilities"] = "boot_mode:uefi"
	}
	n := c.mustCall(t, "POST", "/v1/nodes", map[string]any{"driver": "redfish", "name": "vm", "deploy_interface": "direct",
		"boot_interface": "redfish-virtual-media", "network_data": networkData, "properties": props,
		"driver_info": map[string]any{"redfish_address": bmcSrv.URL, "redfish_system_id": "/redfish/v1/Systems/vmedia-node",
			"redfish_username": "admin", "redfish_password": "password",
			// The BMC fetches the ISO from the controller on the host;
			// the agent reaches it at --public-url through slirp.
			"external_http_url": c.url}})
	c.mustCall(t, "POST", "/v1/ports", map[string]any{"address": mac, "node_uuid": n["uuid"]})
	c.mustCall(t, "PUT", "/v1/nodes/vm/states/provision", map[string]any{"target": "manage"})
	c.waitState(t, "vm", "manageable", time.Minute)
	c.mustCall(t, "PUT", "/v1/nodes/vm/states/provision", map[string]any{"target": "provide"})

	// The CD is inserted before the boot and ejected once the agent called back.
	deadline := time.Now().Add(2 * time.Minute)
	for !node.Media().Inserted {
		if time.Now().After(deadline) {
			t.Fatalf("no virtual media inserted; provision state %v", c.mustCall(t, "GET", "/v1/nodes/vm", nil)["provision_state"])
		}
		time.Sleep(100 * time.Millisecond)
	}
	md := node.Media()
	step("virtual media inserted: " + strings.Replace(md.Image, md.Image[strings.LastIndex(md.Image, "/")+1:], "<key>.iso", 1) + fmt.Sprintf(" (%.1f MiB)", float64(md.Bytes)/(1<<20)))
	if md.Bytes != m.ISO.Bytes {
		t.Errorf("the BMC fetched %d bytes, the ISO has %d", md.Bytes, m.ISO.Bytes)
	}

	got := c.waitState(t, "vm", "available", 10*time.Minute)
	step("available: cleaned through the agent booted from virtual media")
	if got["power_state"] != "power off" {
		t.Errorf("power_state %v after cleaning", got["power_state"])
	}
	if node.Media().Inserted {
		t.Errorf("virtual media still inserted after cleaning: %+v", node.Media())
	}
	assertErased(t, disks)

	serial, _ := os.ReadFile(filepath.Join(dir, "qemu", "serial.log"))
	for _, want := range []string{"static address configured", "10.0.2.50/24", "anvil.vmedia"} {
		if !bytes.Contains(serial, []byte(want)) {
			t.Errorf("serial console lacks %q", want)
		}
	}
	for _, bad := range []string{"DHCPv4", "10.0.2.15"} {
		if bytes.Contains(serial, []byte(bad)) {
			t.Errorf("serial console shows %q: the agent must not run DHCP on the virtual-media path", bad)
		}
	}
	_, h := c.call(t, "GET", "/v1/nodes/vm/history", nil)
	hist := historyLines(h)
	for _, want := range []string{"virtual media inserted", "virtual media ejected (the agent called back)", "virtual media ejected (cleaning done"} {
		if !strings.Contains(hist, want) {
			t.Errorf("history lacks %q", want)
		}
	}
	t.Logf("history:\n%s", hist)
}
