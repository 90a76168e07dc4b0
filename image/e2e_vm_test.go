//go:build vm

package image

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anvil-metal/anvil/bmc/vbmc"
	"github.com/anvil-metal/anvil/bmc/vbmc/ipmisim"
)

// TestVME2ERedfishCleanAndDeploy is the whole system on virtual hardware: a
// QEMU node behind anvil-vbmc (Redfish), driven by anvil-controller through
// bmclib, booting the agent ramdisk when the controller sets PXE and
// reboots it, cleaning its two NVMe disks for real (the host then reads the
// disk image files: nothing the test wrote there may remain), then
// deploying a whole-disk image that the VM boots.
// e2e is one virtual node behind anvil-vbmc and a controller driving it.
type e2e struct {
	c        *controller
	node     *vbmc.Node
	qemu     *vbmc.QEMU
	bmc      *vbmc.Server
	disks    []vbmc.QEMUDisk
	dir      string
	bmcURL   string
	mac      string
	imageURL string // where the guest fetches the deploy image
	image    []byte
	bmcLog   *lockedBuffer // what anvil-vbmc and its QEMU backend logged
}

// lockedBuffer is a log sink that goroutines share.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// newE2E starts a controller (with extra flags), a QEMU node behind an
// in-process anvil-vbmc, an image server reachable from the guest, and
// two NVMe disks pre-filled with a pattern and GPT headers.
func newE2E(t *testing.T, controllerArgs ...string) *e2e {
	return newE2EWith(t, e2eConfig{controllerArgs: controllerArgs})
}

// e2eConfig varies the virtual node of newE2EWith.
type e2eConfig struct {
	controllerArgs []string
	// disks: their serials and buses (paths are made up); default two
	// NVMe disks, ANVIL-E2E-0001 and -0002.
	disks []vbmc.QEMUDisk
	// netboot: the node boots the agent over the network (its NIC's iPXE
	// chains to the controller's per-node script) instead of a direct
	// kernel boot, so the controller's kernel command line applies
	// (driver_info.kernel_append_params).
	netboot bool
	// memoryMiB of the node; 0 is vbmc's default (512).
	memoryMiB int
	// virtualMedia gives the node a CD drive that Redfish VirtualMedia
	// fills (the agent still boots directly from kernel and initrd).
	virtualMedia bool
	// serialSOL serves the node's serial port for ipmi_sim's SOL
	// (e.qemu.SerialAddr()).
	serialSOL bool
}

func newE2EWith(t *testing.T, cfg e2eConfig) *e2e {
	kernel, initrd := vmDirect(t)
	args := append([]string{"--bmc-min-interval", "200ms"}, cfg.controllerArgs...)
	if cfg.netboot {
		// The controller serves vmlinuz (the bzImage) from the directory.
		args = append(args, "--boot-dir", filepath.Dir(kernel), "--public-url", "http://"+guestAPI)
	}
	c := startController(t, args...)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// QEMU inherits this: its guestfwd relay (the test binary) dials the controller.
	t.Setenv(guestfwdEnv, "127.0.0.1:"+c.port)

	e := &e2e{c: c, dir: t.TempDir(), mac: "52:54:00:e2:e0:01", bmcLog: &lockedBuffer{}}
	bmcLog := slog.New(slog.NewTextHandler(e.bmcLog, nil))
	const size = 64 << 20
	if cfg.disks == nil {
		cfg.disks = []vbmc.QEMUDisk{{Serial: "ANVIL-E2E-0001"}, {Serial: "ANVIL-E2E-0002"}}
	}
	for i, d := range cfg.disks {
		d.Path = filepath.Join(e.dir, fmt.Sprintf("disk%d.raw", i))
		d.SizeMiB = size >> 20
		writePattern(t, d.Path, size)
		e.disks = append(e.disks, d)
	}
	var imageFwd string
	e.image, e.imageURL, imageFwd = serveDeployImage(t, self)

	qc := vbmc.QEMUConfig{StateDir: filepath.Join(e.dir, "qemu"), Disks: e.disks, MemoryMiB: cfg.memoryMiB,
		NIC:    &vbmc.QEMUNIC{MAC: e.mac, GuestFwd: []string{"tcp:" + guestAPI + "-cmd:" + self, imageFwd}},
		Kernel: kernel, Initrd: initrd, Append: "console=ttyS0 panic=-1 anvil.api=http://" + guestAPI,
		ShutdownTimeoutSeconds: 5, VirtualMedia: cfg.virtualMedia}
	if cfg.serialSOL {
		qc.SerialListen = "127.0.0.1:0"
	}
	if cfg.netboot {
		// slirp's DHCP and TFTP hand iPXE a script that chains to the
		// controller's script for this MAC.
		tftp := filepath.Join(e.dir, "tftp")
		script := "#!ipxe\nchain http://" + guestAPI + "/v1/boot/${net0/mac}/ipxe\n"
		if err := os.MkdirAll(tftp, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(tftp, "boot.ipxe"), []byte(script), 0o644); err != nil {
			t.Fatal(err)
		}
		qc.Kernel, qc.Initrd, qc.Append = "", "", ""
		qc.NIC.TFTP, qc.NIC.BootFile = tftp, "boot.ipxe"
	}
	q, err := vbmc.NewQEMU(bmcLog, qc)
	if err != nil {
		t.Fatal(err)
	}
	e.node, e.qemu = vbmc.NewNode("e2e-node", q), q
	e.bmc = vbmc.NewServer(bmcLog, "admin", "password", e.node)
	bmcSrv := httptest.NewServer(e.bmc.Handler())
	e.bmcURL = bmcSrv.URL
	t.Cleanup(func() {
		vbmc.CloseNodes([]*vbmc.Node{e.node})
		bmcSrv.Close()
		e.bmc.Close()
		if t.Failed() {
			s, _ := os.ReadFile(filepath.Join(e.dir, "qemu", "serial.log"))
			t.Logf("serial console:\n%s", tailBytes(s, 6000))
		}
	})
	return e
}

// serveDeployImage serves the whole-disk image a deploy writes (a boot
// sector that prints ANVIL-BOOTED-FROM-DISK on the serial console) on the
// host's loopback, and returns it, the URL the guest fetches it from and
// the guestfwd rule (for the slirp network; self is the test binary,
// which relays the one connection slirp hands it) that makes it reachable.
func serveDeployImage(t *testing.T, self string) (image []byte, guestURL, guestFwd string) {
	image = BootSectorDisk("ANVIL-BOOTED-FROM-DISK", 1<<20)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write(image) }))
	t.Cleanup(srv.Close)
	const imageHost = "10.0.2.101:8080"
	return image, "http://" + imageHost + "/disk.raw", "tcp:" + imageHost + "-cmd:" + self + " " + relayFlag + strings.TrimPrefix(srv.URL, "http://")
}

// deployImage sets the node's instance_info to the image at url (its
// sha256 checked by the agent) on the disk with the given serial, and
// moves the node to active.
func deployImage(t *testing.T, c *controller, node, url string, image []byte, serial string) {
	sum := sha256.Sum256(image)
	c.mustCall(t, "PATCH", "/v1/nodes/"+node, []map[string]any{
		{"op": "add", "path": "/instance_info/image_source", "value": url},
		{"op": "add", "path": "/instance_info/image_checksum", "value": "sha256:" + hex.EncodeToString(sum[:])},
		{"op": "add", "path": "/properties/root_device", "value": map[string]any{"serial": serial}},
	})
	c.mustCall(t, "PUT", "/v1/nodes/"+node+"/states/provision", map[string]any{"target": "active"})
}

// assertImageOnDisk reads the disk image file from the host: it must
// start with the deployed image.
func assertImageOnDisk(t *testing.T, path string, image []byte) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got := make([]byte, len(image))
	if _, err := io.ReadFull(f, got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, image) {
		t.Errorf("%s does not hold the deployed image", path)
	}
}

// enroll creates a redfish node for the VM (password as given) and its port.
func (e *e2e) enroll(t *testing.T, name, password string) {
	n := e.c.mustCall(t, "POST", "/v1/nodes", map[string]any{"driver": "redfish", "name": name, "deploy_interface": "direct",
		"inspect_interface": "agent", "driver_info": map[string]any{"redfish_address": e.bmcURL, "redfish_system_id": "/redfish/v1/Systems/e2e-node",
			"redfish_username": "admin", "redfish_password": password}})
	if password == "password" {
		e.c.mustCall(t, "POST", "/v1/ports", map[string]any{"address": e.mac, "node_uuid": n["uuid"]})
	}
}

func (e *e2e) verb(t *testing.T, node, target string) {
	e.c.mustCall(t, "PUT", "/v1/nodes/"+node+"/states/provision", map[string]any{"target": target})
}

func TestVME2ERedfishCleanAndDeploy(t *testing.T) {
	e := newE2E(t)
	c, node, disks, diskImage := e.c, e.node, e.disks, e.image
	dir := e.dir
	start := time.Now()
	step := func(what string) { t.Logf("[%6.1fs] %s", time.Since(start).Seconds(), what) }
	e.enroll(t, "e2e", "password")
	e.verb(t, "e2e", "manage")
	c.waitState(t, "e2e", "manageable", time.Minute)
	step("manageable: credentials verified against the virtual BMC")

	e.verb(t, "e2e", "provide")
	got := c.waitState(t, "e2e", "available", 5*time.Minute)
	step("available: automated cleaning done")
	if got["power_state"] != "power off" {
		t.Errorf("power_state %v after cleaning, want power off", got["power_state"])
	}
	if on, _ := node.On(t.Context()); on {
		t.Errorf("the VM is still running after cleaning")
	}

	assertErased(t, disks)
	_, steps := c.call(t, "GET", "/v1/nodes/e2e/cleaning/steps", nil)
	b := strings.Join(strings.Fields(strings.ReplaceAll(strings.ReplaceAll(toJSON(steps), ",", " "), "\"", "")), " ")
	for _, want := range []string{"erase_devices_metadata", "erase_devices"} {
		if !strings.Contains(b, "step:"+want) {
			t.Errorf("cached steps lack %s: %s", want, b)
		}
	}

	// Deploy: the agent writes the image to the disk named by the hint,
	// checks its sha256, the controller switches the boot device to disk
	// and powers the node on; the VM must boot the deployed image.
	deployImage(t, c, "e2e", e.imageURL, diskImage, disks[0].Serial)
	c.waitState(t, "e2e", "active", 5*time.Minute)
	step("active: image written and node powered on from disk")
	assertImageOnDisk(t, disks[0].Path, diskImage)
	serial := filepath.Join(dir, "qemu", "serial.log")
	deadline := time.Now().Add(time.Minute)
	for {
		s, _ := os.ReadFile(serial)
		if i := bytes.Index(s, []byte("ANVIL-BOOTED-FROM-DISK")); i >= 0 {
			step("the VM booted the deployed image (marker on its serial console)")
			t.Logf("serial console before the marker:\n%s", tailBytes(s[:i+22], 400))
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the deployed image did not boot; serial console:\n%s", tailBytes(s, 3000))
		}
		time.Sleep(200 * time.Millisecond)
	}
	_, h := c.call(t, "GET", "/v1/nodes/e2e/history", nil)
	t.Logf("history:\n%s", historyLines(h))
}

// writePattern fills a sparse disk image with 0x5a at its start, middle
// and end, and GPT headers at both ends.
func writePattern(t *testing.T, path string, size int64) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	block := bytes.Repeat([]byte{0x5a}, 1<<20)
	for _, off := range []int64{0, size / 2, size - 1<<20} {
		if _, err := f.WriteAt(block, off); err != nil {
			t.Fatal(err)
		}
	}
	for _, off := range []int64{512, size - 512} {
		if _, err := f.WriteAt([]byte("EFI PART"), off); err != nil {
			t.Fatal(err)
		}
	}
}

func tailBytes(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

func toJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// historyLines renders a node history response one event per line.
func historyLines(h map[string]any) string {
	var lines []string
	events, _ := h["history"].([]any)
	for _, e := range events {
		em, _ := e.(map[string]any)
		lines = append(lines, fmt.Sprintf("%v %-8v %v", em["created_at"], em["event_type"], em["event"]))
	}
	return strings.Join(lines, "\n")
}

// TestVME2EFaults: a wrong BMC password, the VM dying in the middle of a
// clean step, and an abort during clean wait, all on the real VM.
func TestVME2EFaults(t *testing.T) {
	e := newE2E(t, "--agent-silence-timeout", "6s", "--timeout-check-interval", "1s", "--heartbeat-interval", "1s")
	c := e.c
	start := time.Now()
	step := func(what string) { t.Logf("[%6.1fs] %s", time.Since(start).Seconds(), what) }

	// wrong BMC password: back to enroll with last_error
	e.enroll(t, "badpw", "wrong")
	e.verb(t, "badpw", "manage")
	n := waitFor(t, c, "badpw", time.Minute, func(n map[string]any) bool { return n["provision_state"] == "enroll" && n["last_error"] != nil })
	if le := fmt.Sprint(n["last_error"]); !strings.Contains(le, "Failed to verify management access") || strings.Contains(le, "wrong") {
		t.Errorf("last_error %q: want a verification failure that does not show the password", le)
	}
	step("wrong BMC password: node back in enroll with last_error")

	// the VM dies while the agent runs a clean step
	e.enroll(t, "e2e", "password")
	e.verb(t, "e2e", "manage")
	c.waitState(t, "e2e", "manageable", time.Minute)
	e.verb(t, "e2e", "provide")
	n = waitFor(t, c, "e2e", 2*time.Minute, func(n map[string]any) bool {
		cs, _ := n["clean_step"].(map[string]any)
		return cs["step"] != nil
	})
	running := fmt.Sprint(n["clean_step"].(map[string]any)["step"])
	if err := e.node.Reset(t.Context(), vbmc.ResetForceOff); err != nil {
		t.Fatal(err)
	}
	step("killed the VM during step " + running)
	n = c.waitState(t, "e2e", "clean failed", 2*time.Minute)
	if le := fmt.Sprint(n["last_error"]); !strings.Contains(le, "went silent during step deploy."+running) {
		t.Errorf("last_error %q: want the agent-silence message naming step %s", le, running)
	}
	step("clean failed after the silence timeout: " + fmt.Sprint(n["last_error"]))

	// abort during clean wait: clean failed, and the VM is powered off
	// (first the teardown of the failed cleaning releases the node)
	waitFor(t, c, "e2e", time.Minute, func(n map[string]any) bool { return n["reservation"] == nil })
	c.mustCall(t, "DELETE", "/v1/nodes/e2e/maintenance", nil)
	e.verb(t, "e2e", "manage")
	c.waitState(t, "e2e", "manageable", time.Minute)
	e.verb(t, "e2e", "provide")
	waitFor(t, c, "e2e", 2*time.Minute, func(n map[string]any) bool {
		cs, _ := n["clean_step"].(map[string]any)
		return n["provision_state"] == "clean wait" && cs["step"] != nil
	})
	e.verb(t, "e2e", "abort")
	n = c.waitState(t, "e2e", "clean failed", time.Minute)
	if le := fmt.Sprint(n["last_error"]); !strings.Contains(le, "By request, the clean operation was aborted") {
		t.Errorf("last_error %q: want the abort message", le)
	}
	waitFor(t, c, "e2e", time.Minute, func(n map[string]any) bool { return n["power_state"] == "power off" && n["reservation"] == nil })
	if on, _ := e.node.On(t.Context()); on {
		t.Errorf("the VM still runs after the abort")
	}
	step("abort in clean wait: clean failed, VM powered off")
}

// waitFor polls a node until ok says so.
func waitFor(t *testing.T, c *controller, node string, timeout time.Duration, ok func(map[string]any) bool) map[string]any {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		_, n := c.call(t, "GET", "/v1/nodes/"+node, nil)
		if ok(n) {
			return n
		}
		if time.Now().After(deadline) {
			t.Fatalf("node %s: condition not met after %v: state %v, last_error %v", node, timeout, n["provision_state"], n["last_error"])
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestVME2EBaremetalCLI: python-ironicclient's baremetal CLI drives the
// virtual node through manage and provide (automated cleaning), as an
// operator would; the host then checks the disks.
func TestVME2EBaremetalCLI(t *testing.T) {
	if _, err := exec.LookPath("baremetal"); err != nil {
		t.Skip("the baremetal CLI (python3-ironicclient) is not installed; .ci/run installs it")
	}
	e := newE2E(t)
	e.enroll(t, "cli-vm", "password")
	cli := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("baremetal", args...)
		cmd.Env = append(os.Environ(), "OS_AUTH_TYPE=none", "OS_ENDPOINT="+e.c.url, "HOME="+t.TempDir())
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("baremetal %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	start := time.Now()
	cli("node", "manage", "cli-vm", "--wait", "120")
	t.Logf("[%6.1fs] baremetal node manage --wait: done", time.Since(start).Seconds())
	cli("node", "provide", "cli-vm", "--wait", "300")
	t.Logf("[%6.1fs] baremetal node provide --wait: done", time.Since(start).Seconds())
	if got := strings.TrimSpace(cli("node", "show", "cli-vm", "-f", "value", "-c", "provision_state")); got != "available" {
		t.Fatalf("provision_state %q after provide, want available", got)
	}
	assertErased(t, e.disks)
}

// TestVME2EIPMICleaning is scenario 1 over IPMI: OpenIPMI's ipmi_sim on a
// loopback UDP port, whose chassis control drives the same QEMU node, and
// bmclib's ipmitool provider in the controller.
func TestVME2EIPMICleaning(t *testing.T) {
	ipmisim.SkipIfMissing(t)
	e := newE2E(t)
	sim := ipmisim.Start(t, ipmisim.Options{ChassisControl: fmt.Sprintf("%s chassis-control --url %s/control/e2e-node --username admin --password password",
		ipmisim.BuildVBMC(t), e.bmcURL)})
	n := e.c.mustCall(t, "POST", "/v1/nodes", map[string]any{"driver": "ipmi", "name": "ipmi-vm", "deploy_interface": "direct",
		"driver_info": map[string]any{"ipmi_address": "127.0.0.1", "ipmi_port": sim.Port, "ipmi_username": "admin", "ipmi_password": "password"}})
	e.c.mustCall(t, "POST", "/v1/ports", map[string]any{"address": e.mac, "node_uuid": n["uuid"]})
	start := time.Now()
	e.verb(t, "ipmi-vm", "manage")
	e.c.waitState(t, "ipmi-vm", "manageable", time.Minute)
	t.Logf("[%6.1fs] manageable: credentials verified over IPMI", time.Since(start).Seconds())
	e.verb(t, "ipmi-vm", "provide")
	got := e.c.waitState(t, "ipmi-vm", "available", 5*time.Minute)
	t.Logf("[%6.1fs] available: cleaned over IPMI", time.Since(start).Seconds())
	if got["power_state"] != "power off" {
		t.Errorf("power_state %v after cleaning, want power off", got["power_state"])
	}
	assertErased(t, e.disks)
	_, h := e.c.call(t, "GET", "/v1/nodes/ipmi-vm/history", nil)
	if hist := historyLines(h); !strings.Contains(hist, "via ipmitool") {
		t.Errorf("history does not show the ipmitool provider:\n%s", hist)
	}
}

// TestVME2ESoftwareRAID is scenario 2: a manual clean builds a RAID1 across
// the two NVMe disks from the node's target_raid_config, the next inventory
// shows the array, and delete_configuration removes it; the host checks the
// md superblocks in the disk image files.
func TestVME2ESoftwareRAID(t *testing.T) {
	e := newE2E(t, "--heartbeat-interval", "1s")
	c := e.c
	start := time.Now()
	step := func(what string) { t.Logf("[%6.1fs] %s", time.Since(start).Seconds(), what) }
	e.enroll(t, "raid", "password")
	e.verb(t, "raid", "manage")
	c.waitState(t, "raid", "manageable", time.Minute)
	c.mustCall(t, "PUT", "/v1/nodes/raid/states/raid", map[string]any{"logical_disks": []any{
		map[string]any{"size_gb": "MAX", "raid_level": "1", "controller": "software"}}})

	clean := func(steps ...map[string]any) {
		t.Helper()
		c.mustCall(t, "PUT", "/v1/nodes/raid/states/provision", map[string]any{"target": "clean", "clean_steps": steps})
		waitFor(t, c, "raid", 5*time.Minute, func(n map[string]any) bool {
			if strings.HasSuffix(fmt.Sprint(n["provision_state"]), "failed") {
				t.Fatalf("cleaning failed: %v", n["last_error"])
			}
			return n["provision_state"] == "manageable" && n["reservation"] == nil
		})
	}
	clean(map[string]any{"interface": "raid", "step": "create_configuration"},
		map[string]any{"interface": "deploy", "step": "erase_devices_metadata"})
	step("manual clean: create_configuration (RAID1 from target_raid_config), erase_devices_metadata")
	for _, d := range e.disks {
		if !hasMDSuperblock(t, d.Path) {
			t.Errorf("%s: no md superblock after create_configuration", d.Serial)
		}
	}

	e.verb(t, "raid", "inspect")
	waitFor(t, c, "raid", 3*time.Minute, func(n map[string]any) bool {
		return n["provision_state"] == "manageable" && n["inspection_finished_at"] != nil && n["reservation"] == nil
	})
	_, inv := c.call(t, "GET", "/v1/nodes/raid/inventory", nil)
	arrays, _ := inv["inventory"].(map[string]any)["raid_arrays"].([]any)
	if len(arrays) != 1 || !strings.Contains(toJSON(arrays[0]), "raid1") {
		t.Fatalf("the next inventory should show one RAID1 array: %s", toJSON(arrays))
	}
	step("inspection: the array is in the inventory: " + toJSON(arrays[0]))

	// erase_devices erases the array through md, and each member disk
	// gets the signed record (#21), by its own serial and size, saying
	// what the writes through the array did not reach.
	clean(map[string]any{"interface": "deploy", "step": "erase_devices"})
	step("manual clean: erase_devices through the array")
	_, body := c.call(t, "GET", "/v1/nodes/raid/erase-records", nil)
	recs, _ := body["erase_records"].([]any)
	out := toJSON(recs)
	if len(recs) != 2 {
		t.Errorf("%d records, want one per member disk (none for the array):\n%s", len(recs), out)
	}
	for _, d := range e.disks {
		if !strings.Contains(out, `"serial":"`+d.Serial+`"`) {
			t.Errorf("no record names member disk %s:\n%s", d.Serial, out)
		}
	}
	for _, want := range []string{`"size_bytes":67108864`, `through software RAID /dev/md`, `"scope":"the data areas of software RAID member partition(s) `} {
		if n := strings.Count(out, want); n != 2 {
			t.Errorf("%d records with %s, want 2:\n%s", n, want, out)
		}
	}
	step("records for both member disks, through the array")

	clean(map[string]any{"interface": "raid", "step": "delete_configuration"})
	step("manual clean: delete_configuration")
	for _, d := range e.disks {
		if hasMDSuperblock(t, d.Path) {
			t.Errorf("%s: an md superblock survived delete_configuration", d.Serial)
		}
	}
}

// hasMDSuperblock looks for an md v1.x superblock (magic a92b4efc, major
// version 1, little endian) anywhere in a disk image: the members are
// partitions inside the image, which mdadm --examine on the whole file does
// not look into.
func hasMDSuperblock(t *testing.T, path string) bool {
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return bytes.Contains(data, []byte{0xfc, 0x4e, 0x2b, 0xa9, 0x01, 0x00, 0x00, 0x00})
}

// TestVME2EControllerRestart: the controller is killed (SIGKILL) while the
// agent erases the disks and started again on the same database; cleaning
// completes after the restart and the disks are erased.
func TestVME2EControllerRestart(t *testing.T) {
	e := newE2E(t, "--heartbeat-interval", "1s")
	c := e.c
	start := time.Now()
	step := func(what string) { t.Logf("[%6.1fs] %s", time.Since(start).Seconds(), what) }
	e.enroll(t, "rs", "password")
	e.verb(t, "rs", "manage")
	c.waitState(t, "rs", "manageable", time.Minute)
	e.verb(t, "rs", "provide")
	n := waitFor(t, c, "rs", 2*time.Minute, func(n map[string]any) bool {
		cs, _ := n["clean_step"].(map[string]any)
		return cs["step"] != nil
	})
	c.restart(t)
	step(fmt.Sprintf("killed and restarted the controller during step %v", n["clean_step"].(map[string]any)["step"]))
	got := c.waitState(t, "rs", "available", 5*time.Minute)
	step("cleaning completed after the restart")
	if got["power_state"] != "power off" {
		t.Errorf("power_state %v, want power off", got["power_state"])
	}
	assertErased(t, e.disks)
	_, h := c.call(t, "GET", "/v1/nodes/rs/history", nil)
	hist := historyLines(h)
	if !strings.Contains(hist, "resumed the operation") && !strings.Contains(hist, "clean step deploy.erase_devices finished") {
		t.Errorf("history does not show the resumed cleaning:\n%s", hist)
	}
	for _, s := range []string{"erase_devices_metadata started", "erase_devices started"} {
		if c := strings.Count(hist, "clean step deploy."+s); c > 1 {
			t.Errorf("%q appears %d times: a step ran twice\n%s", s, c, hist)
		}
	}
}

// assertErased reads the disk image files from the host: neither the
// pattern nor a GPT header the test wrote may remain anywhere.
func assertErased(t *testing.T, disks []vbmc.QEMUDisk) {
	t.Helper()
	for _, d := range disks {
		assertErasedFile(t, d.Path, d.Serial)
	}
}
