//go:build vm

package image

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/insomniacslk/dhcp/dhcpv4/nclient4"
	"github.com/insomniacslk/dhcp/dhcpv4/server4"
	"github.com/vishvananda/netlink"

	"github.com/anvil-metal/anvil/bmc/vbmc"
)

// The network-boot VM tests run in a child process with a network
// namespace of its own (CLONE_NEWNET): a Linux bridge with the
// controller's boot service on it, and one tap device per QEMU node. No
// slirp, no DHCP anywhere but on that bridge.
const netbootChild = "ANVIL_NETBOOT_VM_CHILD"

// netbootImage passes the parent's built image directory to the child.
const netbootImage = "ANVIL_NETBOOT_VM_IMAGE"

// bridgeIP is the controller's address on the provisioning bridge.
var bridgeIP = net.IPv4(10, 88, 0, 1)

// inNetbootNamespace builds the image in the parent (it may download
// Debian packages; the namespace has no way out), then runs the named test
// again in a child with its own network namespace and reports whether
// this is the child.
func inNetbootNamespace(t *testing.T, name string) bool {
	return inNamespace(t, name, func() string {
		kernel, _ := vmImage(t)
		return filepath.Dir(kernel)
	})
}

// inNamespace is inNetbootNamespace where image builds what the child
// is given as netbootBootDir (a test that boots no image of ours skips
// the build).
func inNamespace(t *testing.T, name string, image func() string) bool {
	if os.Getenv(netbootChild) == "1" {
		return true
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root for a network namespace, bridge and taps")
	}
	if _, err := os.Stat("/dev/net/tun"); err != nil {
		t.Skipf("no /dev/net/tun: %v", err)
	}
	dir := image()
	cmd := exec.Command(os.Args[0], "-test.run=^"+name+"$", "-test.v", "-test.count=1", "-test.timeout=15m")
	cmd.Env = append(os.Environ(), netbootChild+"=1", netbootImage+"="+dir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET}
	out, err := cmd.CombinedOutput()
	if errors.Is(err, syscall.EPERM) {
		t.Skipf("cannot create a network namespace here: %v", err)
	}
	t.Logf("namespace child:\n%s", out)
	if err != nil {
		t.Fatalf("child: %v", err)
	}
	if !strings.Contains(string(out), "--- PASS: "+name) {
		t.Fatalf("child did not pass %s", name)
	}
	return false
}

// netbootBootDir is the image the parent built (the child does not build
// it again).
func netbootBootDir(t *testing.T) string {
	dir := os.Getenv(netbootImage)
	if dir == "" {
		t.Fatal("not started by inNetbootNamespace")
	}
	return dir
}

// provisioningBridge makes br0 (10.88.0.1/24) and taps tap0..tap<n-1> on it.
func provisioningBridge(t *testing.T, taps int) {
	t.Helper()
	lo, err := netlink.LinkByName("lo")
	must(t, err)
	must(t, netlink.LinkSetUp(lo))
	br := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: "br0"}}
	must(t, netlink.LinkAdd(br))
	must(t, netlink.AddrAdd(br, &netlink.Addr{IPNet: &net.IPNet{IP: bridgeIP, Mask: net.CIDRMask(24, 32)}}))
	must(t, netlink.LinkSetUp(br))
	for i := range taps {
		tap := &netlink.Tuntap{LinkAttrs: netlink.LinkAttrs{Name: fmt.Sprintf("tap%d", i)}, Mode: netlink.TUNTAP_MODE_TAP,
			Flags: netlink.TUNTAP_DEFAULTS | netlink.TUNTAP_NO_PI}
		must(t, netlink.LinkAdd(tap))
		// netlink keeps the tap's file open; QEMU opens it again by name.
		for _, f := range tap.Fds {
			f.Close()
		}
		must(t, netlink.LinkSetMaster(tap, br))
		must(t, netlink.LinkSetUp(tap))
	}
	// A veth into the bridge for the test's own DHCP probes.
	must(t, netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "probe0"}, PeerName: "probe0-br"}))
	peer, err := netlink.LinkByName("probe0-br")
	must(t, err)
	must(t, netlink.LinkSetMaster(peer, br))
	must(t, netlink.LinkSetUp(peer))
	probe, err := netlink.LinkByName("probe0")
	must(t, err)
	must(t, netlink.LinkSetUp(probe))
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// netbootNode is a QEMU node booting from the network on a tap.
type netbootNode struct {
	name, mac string
	firmware  string // "bios" (SeaBIOS + QEMU's iPXE ROM), "uefi" (OVMF's own PXE), "uefi-http" (OVMF's HTTP boot) or "uefi-sb" (PXE, Secure Boot enforced)
	disks     []vbmc.QEMUDisk
	serial    string
	qemuArgs  []string // more devices (e.g. an in-band IPMI interface)
	cmd       *exec.Cmd
	exited    chan struct{}
}

// start boots the node with two NVMe disks carrying the erase pattern
// (made at its first start, kept across restarts).
func (n *netbootNode) start(t *testing.T, tap string) {
	t.Helper()
	dir := t.TempDir()
	const size = 64 << 20
	if n.disks == nil {
		for i := range 2 {
			path := filepath.Join(dir, fmt.Sprintf("nvme%d.raw", i))
			writePattern(t, path, size)
			n.disks = append(n.disks, vbmc.QEMUDisk{Path: path, SizeMiB: size >> 20, Serial: fmt.Sprintf("NB-%s-%d", n.name, i)})
		}
	}
	n.serial = filepath.Join(dir, "serial.log")
	nic := "virtio-net-pci,netdev=n0,mac=" + n.mac
	args := []string{"-accel", "tcg", "-m", "768", "-smp", "1", "-nographic", "-no-reboot", "-monitor", "none",
		"-netdev", "tap,id=n0,ifname=" + tap + ",script=no,downscript=no",
		"-device", "virtio-rng-pci", "-serial", "file:" + n.serial}
	if strings.HasPrefix(n.firmware, "uefi") {
		// Debian's .ms build has Microsoft's keys enrolled and Secure Boot
		// on: only Microsoft-signed shim (and what it trusts) runs.
		code, varsFile := "OVMF_CODE_4M.fd", "OVMF_VARS_4M.fd"
		if n.firmware == "uefi-sb" {
			code, varsFile = "OVMF_CODE_4M.ms.fd", "OVMF_VARS_4M.ms.fd"
		}
		vars := filepath.Join(dir, "OVMF_VARS.fd")
		raw, err := os.ReadFile("/usr/share/OVMF/" + varsFile)
		if err != nil {
			t.Skipf("OVMF (Debian package ovmf) not installed: %v", err)
		}
		must(t, os.WriteFile(vars, raw, 0o644))
		// No option ROM: OVMF's own virtio-net driver and PXE client, the
		// path of a real server's UEFI firmware.
		nic += ",romfile="
		args = append(args, "-drive", "if=pflash,format=raw,readonly=on,file=/usr/share/OVMF/"+code,
			"-drive", "if=pflash,format=raw,file="+vars)
		if n.firmware == "uefi-http" {
			// OVMF tries PXE over IPv4 and IPv6 before HTTP boot; its
			// fw_cfg knobs switch those off, so HTTP boot comes first.
			args = append(args, "-fw_cfg", "name=opt/org.tianocore/IPv4PXESupport,string=n",
				"-fw_cfg", "name=opt/org.tianocore/IPv6Support,string=n")
		}
		if n.firmware == "uefi-sb" {
			// The .ms firmware is built with SMM; QEMU must provide it.
			args = append(args, "-machine", "q35,smm=on", "-global", "driver=cfi.pflash01,property=secure,value=on")
		}
	} else {
		args = append(args, "-boot", "n")
	}
	args = append(args, "-device", nic)
	args = append(args, n.qemuArgs...)
	for i, d := range n.disks {
		args = append(args, "-drive", fmt.Sprintf("file=%s,if=none,id=d%d,format=raw", d.Path, i),
			"-device", fmt.Sprintf("nvme,serial=%s,drive=d%d", d.Serial, i))
	}
	cmd := exec.Command("qemu-system-x86_64", args...)
	out, err := os.Create(filepath.Join(dir, "qemu.log"))
	must(t, err)
	cmd.Stdout, cmd.Stderr = out, out
	must(t, cmd.Start())
	exited := make(chan struct{})
	n.cmd, n.exited = cmd, exited
	go func() { _ = cmd.Wait(); out.Close(); close(exited) }()
	serial := n.serial
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		if t.Failed() {
			s, _ := os.ReadFile(serial)
			q, _ := os.ReadFile(filepath.Join(dir, "qemu.log"))
			t.Logf("%s qemu:\n%s\nserial console (tail):\n%s", n.name, q, tailBytes(s, 4000))
		}
	})
}

// stop pulls the plug (the nodes are fake-hardware: the test is their
// power), so the node can boot again or its disks be read.
func (n *netbootNode) stop() {
	_ = n.cmd.Process.Kill()
	<-n.exited
}

// enrolNode creates a fake-hardware node (the test is its power) with its
// port; extra fields go into the create request.
func enrolNode(t *testing.T, c *controller, name, mac string, extra ...map[string]any) {
	t.Helper()
	body := map[string]any{"driver": "fake-hardware", "name": name, "deploy_interface": "direct"}
	for _, e := range extra {
		for k, v := range e {
			body[k] = v
		}
	}
	n := c.mustCall(t, "POST", "/v1/nodes", body)
	c.mustCall(t, "POST", "/v1/ports", map[string]any{"address": mac, "node_uuid": n["uuid"]})
	c.mustCall(t, "PUT", "/v1/nodes/"+name+"/states/provision", map[string]any{"target": "manage"})
	c.waitState(t, name, "manageable", time.Minute)
}

// cleanOverNetboot provides the nodes (automated cleaning), boots each
// over the network, and waits until all are available with their disks
// erased as seen from the host.
func cleanOverNetboot(t *testing.T, c *controller, nodes []*netbootNode) {
	t.Helper()
	start := time.Now()
	for i, n := range nodes {
		c.mustCall(t, "PUT", "/v1/nodes/"+n.name+"/states/provision", map[string]any{"target": "provide"})
		c.waitState(t, n.name, "clean wait", time.Minute)
		n.start(t, fmt.Sprintf("tap%d", i))
	}
	waitAll(t, c, nodes, "available")
	t.Logf("[%6.1fs] %d node(s) network-booted, cleaned and available", time.Since(start).Seconds(), len(nodes))
	for _, n := range nodes {
		assertErased(t, n.disks)
		_, h := c.call(t, "GET", "/v1/nodes/"+n.name+"/history", nil)
		hist := historyLines(h)
		for _, want := range []string{"boot service: ", "looked up"} {
			if !strings.Contains(hist, want) {
				t.Errorf("%s: history has no %q:\n%s", n.name, want, hist)
			}
		}
		if t.Failed() || testing.Verbose() {
			t.Logf("%s history:\n%s", n.name, hist)
		}
	}
}

// waitAll waits until every node rests in want; a node that fails fails
// the test at once.
func waitAll(t *testing.T, c *controller, nodes []*netbootNode, want string) {
	t.Helper()
	var wg sync.WaitGroup
	for _, n := range nodes {
		wg.Go(func() {
			waitFor(t, c, n.name, 6*time.Minute, func(m map[string]any) bool {
				if s, _ := m["provision_state"].(string); strings.HasSuffix(s, "failed") {
					t.Errorf("%s: %s: %v", n.name, s, m["last_error"])
					return true
				}
				return m["provision_state"] == want
			})
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
}

// probeNoOffer asks for an address as BIOS PXE firmware with mac from the
// probe interface and requires silence.
func probeNoOffer(t *testing.T, mac string) {
	t.Helper()
	hw, err := net.ParseMAC(mac)
	must(t, err)
	cl, err := nclient4.New("probe0", nclient4.WithHWAddr(hw), nclient4.WithTimeout(time.Second), nclient4.WithRetry(2))
	must(t, err)
	defer cl.Close()
	offer, err := cl.DiscoverOffer(context.Background(), func(m *dhcpv4.DHCPv4) {
		dhcpv4.WithOption(dhcpv4.OptClassIdentifier("PXEClient:Arch:00000:UNDI:002001"))(m)
	})
	if err == nil {
		t.Errorf("%s got an offer it must not get: %s", mac, offer.Summary())
	}
}

// TestVMNetbootFull: the controller alone on the provisioning network
// (--boot-dhcp full). Two SeaBIOS nodes boot at once: QEMU's iPXE ROM gets
// an address and the node's script URL from the controller, loads the
// agent over HTTP, and the agent cleans the disks. All the while a
// stranger on the network polls lookup for both nodes' MACs every 10 ms
// and fetches their boot scripts (issue #30): it gets neither a token nor
// a nonce, and the nodes' histories stay short. Then one node is deployed
// over the network the same way, the stranger still polling, and the
// host finds the image on its disk. Last, a stranger's MAC and a node the
// controller is not booting get no DHCP offer, and the latter's history
// says why.
func TestVMNetbootFull(t *testing.T) {
	if !inNetbootNamespace(t, "TestVMNetbootFull") {
		return
	}
	bootDir := netbootBootDir(t)
	provisioningBridge(t, 2)
	c := startControllerOn(t, bridgeIP.String()+":0", "--allow-insecure-noauth", "--boot-dir", bootDir,
		"--boot-dhcp", "full", "--boot-interface", "br0", "--boot-dhcp-range", "10.88.0.100-10.88.0.150")
	nodes := []*netbootNode{{name: "nb-a", mac: "52:54:00:88:00:01", firmware: "bios"}, {name: "nb-b", mac: "52:54:00:88:00:02", firmware: "bios"}}
	for _, n := range nodes {
		enrolNode(t, c, n.name, n.mac)
	}
	st := newStranger(t, c)
	stop := st.poll(nodes[0].mac, nodes[1].mac)
	start := time.Now()
	cleanOverNetboot(t, c, nodes)

	deployOverNetboot(t, c, nodes[:1])
	stop()

	if got := st.tokens.Load(); got != 0 {
		t.Errorf("the stranger got an agent token %d times", got)
	}
	if got := st.nonces.Load(); got != 0 {
		t.Errorf("the stranger got a boot script with the nonce %d times", got)
	}
	if st.polls.Load() < 1000 {
		t.Errorf("the stranger polled only %d times", st.polls.Load())
	}
	budget := 5 + int(time.Since(start)/time.Minute) + 2 // the burst, one a minute, the boots' own
	for _, n := range nodes {
		_, h := c.call(t, "GET", "/v1/nodes/"+n.name+"/history", nil)
		hist := historyLines(h)
		if got := refusedLines(hist); got == 0 || got > budget {
			t.Errorf("%s: %d history lines about the stranger (want 1 to %d):\n%s", n.name, got, budget, hist)
		}
		if strings.Contains(hist, "SECURITY") {
			t.Errorf("%s: a stranger without the secret must not stop anything:\n%s", n.name, hist)
		}
	}
	t.Logf("the stranger sent %d lookups over %v; none got a token", st.polls.Load(), time.Since(start).Round(time.Second))

	probeNoOffer(t, "52:54:00:88:00:99")
	probeNoOffer(t, nodes[1].mac)
	_, h := c.call(t, "GET", "/v1/nodes/nb-b/history", nil)
	if hist := historyLines(h); !strings.Contains(hist, "not answered: the node is available") {
		t.Errorf("nb-b's history does not say why its DHCP went unanswered:\n%s", hist)
	}
}

// deployOverNetboot deploys a whole-disk image to each node's first disk
// over the network: once the controller awaits the ramdisk, the test
// restarts the node (fake power: the test pulls the plug), its firmware
// boots the script again, now with this boot's nonce, and the agent writes
// the image; the host then finds it on the disk.
func deployOverNetboot(t *testing.T, c *controller, nodes []*netbootNode) {
	t.Helper()
	start := time.Now()
	image, imageURL := serveImageOnBridge(t)
	for i, n := range nodes {
		deployImage(t, c, n.name, imageURL, image, n.disks[0].Serial)
		c.waitState(t, n.name, "wait call-back", time.Minute)
		n.stop()
		n.start(t, fmt.Sprintf("tap%d", i))
	}
	waitAll(t, c, nodes, "active")
	for _, n := range nodes {
		n.stop()
		assertImageOnDisk(t, n.disks[0].Path, image)
	}
	t.Logf("[%6.1fs] %d node(s) network-booted again and deployed", time.Since(start).Seconds(), len(nodes))
}

// serveImageOnBridge serves a whole-disk image (a boot sector that prints
// a marker) on the provisioning bridge, where the nodes reach it.
func serveImageOnBridge(t *testing.T) ([]byte, string) {
	t.Helper()
	image := BootSectorDisk("ANVIL-BOOTED-FROM-DISK", 1<<20)
	ln, err := net.Listen("tcp", bridgeIP.String()+":0")
	must(t, err)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write(image) }), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close() })
	return image, "http://" + ln.Addr().String() + "/disk.raw"
}

// TestVMNetbootProxy: the site's own DHCP server (a small one the test
// runs on the bridge) gives addresses; the controller (--boot-dhcp proxy)
// only adds boot information. First a stranger fetches the node's boot
// script before the node's firmware does (issue #30): the firmware's own
// fetch exposes it, and the cleaning stops — clean failed, maintenance,
// a security alarm — instead of going on with whoever came first. Once
// an operator has looked, the node is cleaned: its SeaBIOS firmware boots
// the agent, which erases the disks.
func TestVMNetbootProxy(t *testing.T) {
	if !inNetbootNamespace(t, "TestVMNetbootProxy") {
		return
	}
	bootDir := netbootBootDir(t)
	provisioningBridge(t, 1)
	siteDHCP(t)
	c := startControllerOn(t, bridgeIP.String()+":0", "--allow-insecure-noauth", "--boot-dir", bootDir,
		"--boot-dhcp", "proxy", "--boot-interface", "br0")
	n := &netbootNode{name: "nb-proxy", mac: "52:54:00:88:01:01", firmware: "bios"}
	enrolNode(t, c, n.name, n.mac)

	c.mustCall(t, "PUT", "/v1/nodes/"+n.name+"/states/provision", map[string]any{"target": "provide"})
	c.waitState(t, n.name, "clean wait", time.Minute)
	st := newStranger(t, c)
	if code, carried := st.script(n.mac); code != http.StatusOK || !carried {
		t.Fatalf("the stranger's first fetch: HTTP %d, nonce %v (without our DHCP the first fetch gets it)", code, carried)
	}
	n.start(t, "tap0")
	failed := waitFor(t, c, n.name, 3*time.Minute, func(m map[string]any) bool { return m["provision_state"] == "clean failed" })
	n.stop()
	if msg, _ := failed["last_error"].(string); !strings.Contains(msg, "SECURITY ALARM in clean wait: second agent claimant: boot ipxe from 10.88.0.") ||
		!strings.Contains(msg, "after this boot's secret went to "+strangerIP) {
		t.Fatalf("last_error does not name the alarm: %q", msg)
	}
	if failed["maintenance"] != true {
		t.Errorf("a node whose boot had a second claimant must be in maintenance")
	}
	c.mustCall(t, "DELETE", "/v1/nodes/"+n.name+"/maintenance", nil)
	c.mustCall(t, "PUT", "/v1/nodes/"+n.name+"/states/provision", map[string]any{"target": "manage"})
	c.waitState(t, n.name, "manageable", time.Minute)

	cleanOverNetboot(t, c, []*netbootNode{n})
	_, h := c.call(t, "GET", "/v1/nodes/nb-proxy/history", nil)
	hist := historyLines(h)
	for _, want := range []string{"proxyDHCP OFFER to iPXE", "SECURITY: second agent claimant: boot ipxe from 10.88.0."} {
		if !strings.Contains(hist, want) {
			t.Errorf("history has no %q:\n%s", want, hist)
		}
	}
}

// TestVMNetbootUEFI: two OVMF nodes at once. One boots with OVMF's own PXE
// client (UEFI x64, no iPXE ROM) and gets snponly.efi over the controller's
// TFTP; the other with OVMF's UEFI HTTP boot (vendor class HTTPClient, arch
// 16; PXE switched off through OVMF's fw_cfg knobs) and gets the iPXE EFI
// binary by URL. Both then take their script from iPXE, and the agents
// clean the disks; then both boot the same way again and are deployed.
func TestVMNetbootUEFI(t *testing.T) {
	if !inNetbootNamespace(t, "TestVMNetbootUEFI") {
		return
	}
	bootDir := netbootBootDir(t)
	provisioningBridge(t, 2)
	c := startControllerOn(t, bridgeIP.String()+":0", "--allow-insecure-noauth", "--boot-dir", bootDir,
		"--boot-dhcp", "full", "--boot-interface", "br0", "--boot-dhcp-range", "10.88.0.100-10.88.0.150")
	nodes := []*netbootNode{{name: "nb-uefi", mac: "52:54:00:88:02:01", firmware: "uefi"}, {name: "nb-http", mac: "52:54:00:88:04:01", firmware: "uefi-http"}}
	for _, n := range nodes {
		enrolNode(t, c, n.name, n.mac)
	}
	cleanOverNetboot(t, c, nodes)
	deployOverNetboot(t, c, nodes)
	for name, wants := range map[string][]string{
		"nb-uefi": {"DHCP ACK to UEFI PXE of port 52:54:00:88:02:01", "snponly.efi over TFTP", "TFTP sent snponly.efi (173792 bytes", "DHCP ACK to iPXE"},
		"nb-http": {"DHCP ACK to UEFI HTTP of port 52:54:00:88:04:01", "/v1/boot/files/ipxe.efi", "DHCP ACK to iPXE"},
	} {
		_, h := c.call(t, "GET", "/v1/nodes/"+name+"/history", nil)
		hist := historyLines(h)
		for _, want := range wants {
			if !strings.Contains(hist, want) {
				t.Errorf("%s: history has no %q:\n%s", name, want, hist)
			}
		}
	}
}

// TestVMNetbootSecureBoot: OVMF with Secure Boot enforced (Microsoft keys)
// and a node that asks for it (capability secure_boot:true): Debian's
// signed shim and network GRUB over TFTP, GRUB's per-node configuration
// (with the boot's nonce, for the TFTP client's leased address) and
// Debian's signed kernel over TFTP, the agent cleans the disks; then the
// node boots the same way again and is deployed.
func TestVMNetbootSecureBoot(t *testing.T) {
	if !inNetbootNamespace(t, "TestVMNetbootSecureBoot") {
		return
	}
	bootDir := netbootBootDir(t)
	for _, f := range []string{"shimx64.efi", "grubx64.efi"} {
		if _, err := os.Stat(filepath.Join(bootDir, f)); err != nil {
			t.Fatalf("make image did not provide %s: %v", f, err)
		}
	}
	provisioningBridge(t, 1)
	c := startControllerOn(t, bridgeIP.String()+":0", "--allow-insecure-noauth", "--boot-dir", bootDir,
		"--boot-dhcp", "full", "--boot-interface", "br0", "--boot-dhcp-range", "10.88.0.100-10.88.0.150")
	n := &netbootNode{name: "nb-sb", mac: "52:54:00:88:03:01", firmware: "uefi-sb"}
	enrolNode(t, c, n.name, n.mac, map[string]any{"properties": map[string]any{"capabilities": "boot_mode:uefi,secure_boot:true"}})
	cleanOverNetboot(t, c, []*netbootNode{n})
	serial, _ := os.ReadFile(n.serial) // the cleaning boot's console
	deployOverNetboot(t, c, []*netbootNode{n})
	_, h := c.call(t, "GET", "/v1/nodes/nb-sb/history", nil)
	hist := historyLines(h)
	for _, want := range []string{"DHCP ACK to UEFI PXE of port 52:54:00:88:03:01: address 10.88.0.100; boot file shimx64.efi over TFTP",
		"TFTP sent shimx64.efi", "TFTP sent grubx64.efi", "TFTP sent grub/nodes/52:54:00:88:03:01.cfg", "TFTP sent vmlinuz", "TFTP sent initramfs.cpio."} {
		if !strings.Contains(hist, want) {
			t.Errorf("history has no %q:\n%s", want, hist)
		}
	}
	if !strings.Contains(string(serial), "Secure boot enabled") {
		t.Errorf("the kernel did not report Secure Boot on; serial (tail):\n%s", tailBytes(serial, 3000))
	}
}

// siteDHCP is the site's DHCP server in the proxy test: addresses from
// 10.88.0.200 up to anyone, no boot information.
func siteDHCP(t *testing.T) {
	t.Helper()
	var mu sync.Mutex
	next, leases := byte(200), map[string]net.IP{}
	handler := func(conn net.PacketConn, _ net.Addr, m *dhcpv4.DHCPv4) {
		var typ dhcpv4.MessageType
		switch m.MessageType() {
		case dhcpv4.MessageTypeDiscover:
			typ = dhcpv4.MessageTypeOffer
		case dhcpv4.MessageTypeRequest:
			typ = dhcpv4.MessageTypeAck
		default:
			return
		}
		mu.Lock()
		ip, ok := leases[m.ClientHWAddr.String()]
		if !ok {
			ip = net.IPv4(10, 88, 0, next)
			next++
			leases[m.ClientHWAddr.String()] = ip
		}
		mu.Unlock()
		site := net.IPv4(10, 88, 0, 254)
		reply, err := dhcpv4.NewReplyFromRequest(m, dhcpv4.WithMessageType(typ), dhcpv4.WithYourIP(ip),
			dhcpv4.WithNetmask(net.CIDRMask(24, 32)), dhcpv4.WithLeaseTime(3600),
			dhcpv4.WithOption(dhcpv4.OptServerIdentifier(site)))
		if err != nil {
			return
		}
		_, _ = conn.WriteTo(reply.ToBytes(), &net.UDPAddr{IP: net.IPv4bcast, Port: dhcpv4.ClientPort})
	}
	// Its own address on the bridge, so clients can renew by unicast.
	br, err := netlink.LinkByName("br0")
	must(t, err)
	must(t, netlink.AddrAdd(br, &netlink.Addr{IPNet: &net.IPNet{IP: net.IPv4(10, 88, 0, 254), Mask: net.CIDRMask(24, 32)}}))
	srv, err := server4.NewServer("br0", &net.UDPAddr{Port: dhcpv4.ServerPort}, handler)
	must(t, err)
	go func() { _ = srv.Serve() }()
	t.Cleanup(func() { srv.Close() })
}
