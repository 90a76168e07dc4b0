//go:build vm

package image

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/anvil-metal/anvil/bmc/vbmc"
)

// TestVME2ERedfishCleaning is the whole system on virtual hardware: a QEMU
// node behind anvil-vbmc (Redfish), driven by anvil-controller through
// bmclib, booting the agent ramdisk when the controller sets PXE and
// reboots it, and cleaning its two NVMe disks for real. The host then reads
// the disk image files: nothing the test wrote there may remain.
func TestVME2ERedfishCleaning(t *testing.T) {
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
	const mac = "52:54:00:e2:e0:01"
	q, err := vbmc.NewQEMU(nil, vbmc.QEMUConfig{StateDir: filepath.Join(dir, "qemu"), Disks: disks,
		NIC:    &vbmc.QEMUNIC{MAC: mac, GuestFwd: []string{"tcp:" + guestAPI + "-cmd:" + self}},
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
