//go:build vm

package image

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
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
// then reads back. Then it deploys a whole-disk image through a second
// virtual-media boot; the host reads the image back from the VM's disk
// (and under SeaBIOS the VM boots it). The CD is checked through the BMC's
// Redfish VirtualMedia and QEMU's own block state (QMP): empty once the
// agent called back, and again after each operation left the ramdisk.
//
// The OVMF variant has two NICs on one network (a QEMU hub in front of
// the slirp network) and network_data puts the address on an
// active-backup bond of both: the agent must come up over the bond, and
// when the active link's cable is pulled (QMP set_link) during cleaning,
// the agent must go on talking to the controller over the other link.
// QEMU captures what each NIC sends (filter-dump): all IPv4 on the first
// link before the pull (active-backup), some on the second after it.
//
// The controller is also restarted while the BMC holds the inserted
// ISO: the ISO's URL must still serve the same bytes afterwards (real BMCs
// read the medium on demand, all through the boot).
func TestVMVirtualMediaStaticNetwork(t *testing.T) {
	for _, fw := range []string{"bios", "uefi"} {
		t.Run(fw, func(t *testing.T) { vmediaBoot(t, fw, fw == "uefi") })
	}
}

func vmediaBoot(t *testing.T, firmware string, bond bool) {
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
	diskImage, imageURL, imageFwd := serveDeployImage(t, self)

	dir := t.TempDir()
	const mac, mac2 = "52:54:00:e2:e0:17", "52:54:00:e2:e0:18"
	var disks []vbmc.QEMUDisk
	for i, serial := range []string{"ANVIL-VMEDIA-0001", "ANVIL-VMEDIA-0002"} {
		path := filepath.Join(dir, "nvme"+string(rune('0'+i))+".raw")
		writePattern(t, path, 64<<20)
		disks = append(disks, vbmc.QEMUDisk{Path: path, SizeMiB: 64, Serial: serial})
	}
	nic := &vbmc.QEMUNIC{MAC: mac, GuestFwd: []string{"tcp:" + guestAPI + "-cmd:" + self, imageFwd}}
	if bond {
		nic.MoreMACs = []string{mac2}
	}
	qc := vbmc.QEMUConfig{StateDir: filepath.Join(dir, "qemu"), Disks: disks, VirtualMedia: true, MemoryMiB: 768,
		NIC: nic, ShutdownTimeoutSeconds: 5}
	if firmware == "uefi" {
		qc.ExtraArgs = ovmfArgs(t, dir)
	}
	// What each of the bond's NICs sends, captured by QEMU (queue rx of
	// the NIC's hub port: the frames the guest transmits on it).
	dumps := []string{filepath.Join(dir, "nic0.pcap"), filepath.Join(dir, "nic1.pcap")}
	if bond {
		for i, f := range dumps {
			qc.ExtraArgs = append(qc.ExtraArgs, "-object", fmt.Sprintf("filter-dump,id=dump%d,netdev=net%d,queue=rx,file=%s", i, i, f))
		}
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
	cd := &virtualCD{bmcURL: bmcSrv.URL, qmp: q.QMPSocket()}

	links := []any{map[string]any{"id": "port0", "type": "phy", "ethernet_mac_address": mac}}
	link := "port0"
	if bond {
		links = append(links, map[string]any{"id": "port1", "type": "phy", "ethernet_mac_address": mac2},
			map[string]any{"id": "bond0", "type": "bond", "ethernet_mac_address": mac, "bond_mode": "active-backup",
				"bond_links": []any{"port0", "port1"}})
		link = "bond0"
	}
	networkData := map[string]any{
		"links": links,
		"networks": []any{map[string]any{"id": "prov", "type": "ipv4", "link": link, "ip_address": "10.0.2.50", "netmask": "255.255.255.0",
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
	if bond {
		c.mustCall(t, "POST", "/v1/ports", map[string]any{"address": mac2, "node_uuid": n["uuid"]})
	}
	c.mustCall(t, "PUT", "/v1/nodes/vm/states/provision", map[string]any{"target": "manage"})
	c.waitState(t, "vm", "manageable", time.Minute)
	c.mustCall(t, "PUT", "/v1/nodes/vm/states/provision", map[string]any{"target": "provide"})

	// Cleaning: the CD is inserted before the boot.
	cd.waitInserted(t, c, 2*time.Minute)
	md := node.Media() // as the BMC fetched it
	step("virtual media inserted: " + strings.Replace(md.Image, md.Image[strings.LastIndex(md.Image, "/")+1:], "<key>.iso", 1) + fmt.Sprintf(" (%.1f MiB)", float64(md.Bytes)/(1<<20)))
	if md.Bytes != m.ISO.Bytes {
		t.Errorf("the BMC fetched %d bytes, the ISO has %d", md.Bytes, m.ISO.Bytes)
	}
	// A controller restart while the node boots from the ISO: the BMC
	// (which reads the medium as the node needs it) still gets the same
	// bytes from the URL it was given.
	c.waitState(t, "vm", "clean wait", time.Minute)
	before := fetchISO(t, md.Image)
	c.restart(t)
	if after := fetchISO(t, md.Image); !bytes.Equal(before, after) {
		t.Errorf("after a controller restart the ISO's URL serves %d other bytes (before: %d)", len(after), len(before))
	}
	step("controller restarted while the node boots: its ISO's URL still serves the same ISO")

	var sent0, sent1 int // IPv4 frames the bond's links sent before the pull
	// Ejected once the agent called back, while the agent runs.
	waitHistory(t, c, "vm", "virtual media ejected (the agent called back)", 1, 5*time.Minute)
	cd.assertEmpty(t, "after the agent called back (cleaning)", true)
	step("virtual media ejected after the agent called back (Redfish and QMP agree)")
	if bond {
		// Pull the active link's cable: the bond must fail over to the
		// other link and cleaning go on through it.
		waitFor(t, c, "vm", 2*time.Minute, func(n map[string]any) bool {
			cs, _ := n["clean_step"].(map[string]any)
			return cs["step"] != nil
		})
		sent0, sent1 = countIPv4(t, dumps[0]), countIPv4(t, dumps[1])
		if _, err := vbmc.QMP(t.Context(), q.QMPSocket(), "set_link", map[string]any{"name": "nic0", "up": false}); err != nil {
			t.Fatal(err)
		}
		step(fmt.Sprintf("pulled the cable of the bond's first link (QMP set_link nic0 off); so far the guest sent %d IPv4 frames on nic0, %d on nic1", sent0, sent1))
		// active-backup: the first link carried everything, the second
		// (backup) nothing (balance-rr would use both).
		if sent0 == 0 || sent1 != 0 {
			t.Errorf("before the pull the guest sent %d IPv4 frames on nic0 and %d on nic1: want all on the active link nic0", sent0, sent1)
		}
	}

	got := c.waitState(t, "vm", "available", 10*time.Minute)
	step("available: cleaned through the agent booted from virtual media")
	if got["power_state"] != "power off" {
		t.Errorf("power_state %v after cleaning", got["power_state"])
	}
	cd.assertEmpty(t, "after cleaning", false)
	assertErased(t, disks)
	if bond {
		after0, after1 := countIPv4(t, dumps[0]), countIPv4(t, dumps[1])
		t.Logf("after the pull: %d more IPv4 frames on nic0, %d on nic1", after0-sent0, after1)
		if after1 == 0 {
			t.Errorf("nothing went out on nic1 after nic0's cable was pulled: the bond did not fail over")
		}
	}
	serial, _ := os.ReadFile(filepath.Join(dir, "qemu", "serial.log"))

	// Deploy: another virtual-media boot, the agent writes the image.
	deployImage(t, c, "vm", imageURL, diskImage, disks[0].Serial)
	cd.waitInserted(t, c, 2*time.Minute)
	step("deploy: virtual media inserted again")
	waitHistory(t, c, "vm", "virtual media ejected (the agent called back)", 2, 5*time.Minute)
	cd.assertEmpty(t, "after the agent called back (deploy)", true)
	step("deploy: virtual media ejected after the agent called back")
	c.waitState(t, "vm", "active", 10*time.Minute)
	step("active: image written, node left the ramdisk")
	cd.assertEmpty(t, "after the deploy", false)
	assertImageOnDisk(t, disks[0].Path, diskImage)
	if firmware == "bios" {
		// The image is a BIOS boot sector: SeaBIOS boots it (OVMF cannot).
		waitSerial(t, filepath.Join(dir, "qemu", "serial.log"), "ANVIL-BOOTED-FROM-DISK", 2*time.Minute)
		step("the VM booted the deployed image from its disk")
	}

	wants := []string{"static address configured", "10.0.2.50/24", "anvil.vmedia"}
	if bond {
		wants = append(wants, "bond created", "bond0", "active-backup")
	}
	for _, want := range wants {
		if !bytes.Contains(serial, []byte(want)) {
			t.Errorf("serial console (cleaning) lacks %q", want)
		}
	}
	serial, _ = os.ReadFile(filepath.Join(dir, "qemu", "serial.log")) // both boots
	for _, bad := range []string{"DHCPv4", "10.0.2.15"} {
		if bytes.Contains(serial, []byte(bad)) {
			t.Errorf("serial console shows %q: the agent must not run DHCP on the virtual-media path", bad)
		}
	}
	_, h := c.call(t, "GET", "/v1/nodes/vm/history", nil)
	hist := historyLines(h)
	for _, want := range []string{"virtual media inserted", "virtual media ejected (the agent called back)", "virtual media ejected (cleaning done",
		"virtual media ejected (deploy: leaving the ramdisk)"} {
		if !strings.Contains(hist, want) {
			t.Errorf("history lacks %q", want)
		}
	}
	t.Logf("history:\n%s", hist)
}

// virtualCD looks at the node's CD from outside: the BMC's Redfish
// VirtualMedia resource, and QEMU's block state over QMP (when it runs).
type virtualCD struct {
	bmcURL, qmp string
}

// redfish returns the BMC's VirtualMedia/Cd resource.
func (v *virtualCD) redfish(t *testing.T) (md vbmc.Media) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, v.bmcURL+"/redfish/v1/Managers/vmedia-node/VirtualMedia/Cd", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.SetBasicAuth("admin", "password")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var r struct {
		Inserted bool
		Image    *string
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET VirtualMedia/Cd: HTTP %d, %v", resp.StatusCode, err)
	}
	md.Inserted = r.Inserted
	if r.Image != nil {
		md.Image = *r.Image
	}
	return md
}

// qemuMedium reports whether QEMU's CD drive holds a medium (ok false:
// QEMU does not run).
func (v *virtualCD) qemuMedium(t *testing.T) (inserted, ok bool) {
	raw, err := vbmc.QMP(t.Context(), v.qmp, "query-block", nil)
	if err != nil {
		return false, false
	}
	var blocks []struct {
		Device   string          `json:"device"`
		Inserted json.RawMessage `json:"inserted"`
	}
	if err := json.Unmarshal(raw, &blocks); err != nil {
		t.Fatalf("query-block: %v", err)
	}
	for _, b := range blocks {
		if b.Device == "cd0-drive" {
			return len(b.Inserted) > 0, true
		}
	}
	t.Fatalf("query-block has no cd0-drive: %s", raw)
	return false, false
}

// waitInserted waits until the BMC shows an inserted medium.
func (v *virtualCD) waitInserted(t *testing.T, c *controller, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		if md := v.redfish(t); md.Inserted {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no virtual media inserted; provision state %v", c.mustCall(t, "GET", "/v1/nodes/vm", nil)["provision_state"])
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// assertEmpty: the BMC shows no medium, nor does QEMU's drive if the VM
// runs (running: it must, the agent is up).
func (v *virtualCD) assertEmpty(t *testing.T, when string, running bool) {
	t.Helper()
	if md := v.redfish(t); md.Inserted || md.Image != "" {
		t.Errorf("%s: Redfish VirtualMedia/Cd still shows a medium: %+v", when, md)
	}
	in, ok := v.qemuMedium(t)
	if running && !ok {
		t.Errorf("%s: QMP does not answer, the VM should run", when)
	}
	if in {
		t.Errorf("%s: QEMU's CD drive still holds a medium", when)
	}
}

// fetchISO GETs a per-node ISO as the BMC does.
func fetchISO(t *testing.T, url string) []byte {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET the node's ISO: HTTP %d, %v", resp.StatusCode, err)
	}
	return b
}

// waitHistory waits for the count-th history event of the node holding
// what.
func waitHistory(t *testing.T, c *controller, node, what string, count int, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		_, h := c.call(t, "GET", "/v1/nodes/"+node+"/history", nil)
		if strings.Count(historyLines(h), what) >= count {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("history has not %d× %q after %v:\n%s", count, what, timeout, historyLines(h))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// waitSerial waits for marker on the serial console.
func waitSerial(t *testing.T, path, marker string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		s, _ := os.ReadFile(path)
		if bytes.Contains(s, []byte(marker)) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%q not on the serial console after %v:\n%s", marker, timeout, tailBytes(s, 3000))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// countIPv4 counts the IPv4 frames in a pcap file QEMU's filter-dump
// wrote (what one NIC sent).
func countIPv4(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) < 24 || binary.LittleEndian.Uint32(b) != 0xa1b2c3d4 {
		t.Fatalf("%s: not a little-endian pcap file (%d bytes)", path, len(b))
	}
	n := 0
	for off := 24; off+16 <= len(b); {
		caplen := int(binary.LittleEndian.Uint32(b[off+8:]))
		frame := b[off+16 : min(off+16+caplen, len(b))]
		if len(frame) >= 14 && binary.BigEndian.Uint16(frame[12:]) == 0x0800 {
			n++
		}
		off += 16 + caplen
	}
	return n
}
