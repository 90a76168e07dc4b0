//go:build vm

package image

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/anvil-metal/anvil/bmc/vbmc"
)

// TestVME2ERedfishCleanAndDeploy is the whole system on virtual hardware: a
// QEMU node behind anvil-vbmc (Redfish), driven by anvil-controller through
// bmclib, booting the agent ramdisk when the controller sets PXE and
// reboots it, cleaning its two NVMe disks for real (the host then reads the
// disk image files: nothing the test wrote there may remain), then
// deploying a whole-disk image that the VM boots.
func TestVME2ERedfishCleanAndDeploy(t *testing.T) {
	kernel, initrd := vmImage(t)
	c := startController(t, "--bmc-min-interval", "200ms")
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// QEMU inherits this: its guestfwd relay (the test binary) dials the controller.
	t.Setenv(guestfwdEnv, "127.0.0.1:"+c.port)

	dir := t.TempDir()
	const size = 64 << 20
	var disks []vbmc.QEMUDisk
	for i, serial := range []string{"ANVIL-E2E-0001", "ANVIL-E2E-0002"} {
		path := filepath.Join(dir, "nvme"+string(rune('0'+i))+".raw")
		writePattern(t, path, size)
		disks = append(disks, vbmc.QEMUDisk{Path: path, SizeMiB: size >> 20, Serial: serial})
	}
	// The whole-disk image the deploy writes: a boot sector that prints a
	// marker on the serial console, padded to 1 MiB. The guest fetches it
	// through a second forward to a server on the host's loopback.
	diskImage := BootSectorDisk("ANVIL-BOOTED-FROM-DISK", 1<<20)
	imgSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write(diskImage) }))
	defer imgSrv.Close()
	const imageHost = "10.0.2.101:8080"

	const mac = "52:54:00:e2:e0:01"
	q, err := vbmc.NewQEMU(nil, vbmc.QEMUConfig{StateDir: filepath.Join(dir, "qemu"), Disks: disks,
		NIC: &vbmc.QEMUNIC{MAC: mac, GuestFwd: []string{"tcp:" + guestAPI + "-cmd:" + self,
			"tcp:" + imageHost + "-cmd:" + self + " " + relayFlag + strings.TrimPrefix(imgSrv.URL, "http://")}},
		Kernel: kernel, Initrd: initrd, Append: "console=ttyS0 panic=-1 anvil.api=http://" + guestAPI,
		ShutdownTimeoutSeconds: 5})
	if err != nil {
		t.Fatal(err)
	}
	node := vbmc.NewNode("e2e-node", q)
	bmcSrv := httptest.NewServer(vbmc.NewServer(nil, "admin", "password", node).Handler())
	defer bmcSrv.Close()
	defer vbmc.CloseNodes([]*vbmc.Node{node})
	t.Cleanup(func() {
		if t.Failed() {
			s, _ := os.ReadFile(filepath.Join(dir, "qemu", "serial.log"))
			t.Logf("serial console:\n%s", tailBytes(s, 6000))
		}
	})

	start := time.Now()
	step := func(what string) { t.Logf("[%6.1fs] %s", time.Since(start).Seconds(), what) }
	n := c.mustCall(t, "POST", "/v1/nodes", map[string]any{"driver": "redfish", "name": "e2e", "deploy_interface": "direct",
		"driver_info": map[string]any{"redfish_address": bmcSrv.URL, "redfish_system_id": "/redfish/v1/Systems/e2e-node",
			"redfish_username": "admin", "redfish_password": "password"}})
	c.mustCall(t, "POST", "/v1/ports", map[string]any{"address": mac, "node_uuid": n["uuid"]})
	c.mustCall(t, "PUT", "/v1/nodes/e2e/states/provision", map[string]any{"target": "manage"})
	c.waitState(t, "e2e", "manageable", time.Minute)
	step("manageable: credentials verified against the virtual BMC")

	c.mustCall(t, "PUT", "/v1/nodes/e2e/states/provision", map[string]any{"target": "provide"})
	got := c.waitState(t, "e2e", "available", 5*time.Minute)
	step("available: automated cleaning done")
	if got["power_state"] != "power off" {
		t.Errorf("power_state %v after cleaning, want power off", got["power_state"])
	}
	if on, _ := node.On(t.Context()); on {
		t.Errorf("the VM is still running after cleaning")
	}

	for _, d := range disks {
		data, err := os.ReadFile(d.Path)
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(data, []byte("EFI PART")) {
			t.Errorf("%s: a GPT header survived cleaning", d.Serial)
		}
		if i := bytes.IndexByte(data, 0x5a); i >= 0 {
			t.Errorf("%s: the test pattern survived at offset %d", d.Serial, i)
		}
	}
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
	sum := sha256.Sum256(diskImage)
	c.mustCall(t, "PATCH", "/v1/nodes/e2e", []map[string]any{
		{"op": "add", "path": "/instance_info/image_source", "value": "http://" + imageHost + "/disk.raw"},
		{"op": "add", "path": "/instance_info/image_checksum", "value": "sha256:" + hex.EncodeToString(sum[:])},
		{"op": "add", "path": "/properties/root_device", "value": map[string]any{"serial": disks[0].Serial}},
	})
	c.mustCall(t, "PUT", "/v1/nodes/e2e/states/provision", map[string]any{"target": "active"})
	got = c.waitState(t, "e2e", "active", 5*time.Minute)
	step("active: image written and node powered on from disk")
	written, err := os.ReadFile(disks[0].Path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(written[:len(diskImage)], diskImage) {
		t.Errorf("the root device does not hold the image")
	}
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
