//go:build vm

package image

import (
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/anvil-metal/anvil/bmc/vbmc"
)

// TestVME2EVerifyHardware (#32): a node inspected with two SATA disks and
// 1 GiB of RAM passes deploy.verify_hardware in automated cleaning while
// unchanged, then, booted with its second disk removed and 768 MiB, fails
// it: last_error names the missing disk by serial and the memory
// difference. The erase steps are disabled (priority 0) and verification
// runs at 100, so the only check is the one under test. Three boots:
// inspection, the passing clean, the failing clean on the changed machine
// (a second QEMU behind a second virtual BMC, the node's driver_info
// pointed at it: the "same" server after a DIMM and a disk were pulled).
func TestVME2EVerifyHardware(t *testing.T) {
	serials := []string{"ANVIL-VERIFY-0001", "ANVIL-VERIFY-0002", "ANVIL-VERIFY-0003"}
	// Two SATA disks and an NVMe one: QEMU answers SMART READ DATA
	// (through SG_IO) and the NVMe SMART / Health log page, so both
	// decoders read what an emulated device really sends.
	e := newE2EWith(t, e2eConfig{memoryMiB: 1024,
		disks: []vbmc.QEMUDisk{{Serial: serials[0], Bus: vbmc.BusAHCI}, {Serial: serials[1], Bus: vbmc.BusAHCI}, {Serial: serials[2], Bus: vbmc.BusNVMe}},
		controllerArgs: []string{"--clean-step-priority",
			"deploy.verify_hardware:100,deploy.erase_devices_metadata:0,deploy.erase_devices:0"}})
	c := e.c
	start := time.Now()
	step := func(what string) { t.Logf("[%6.1fs] %s", time.Since(start).Seconds(), what) }
	e.enroll(t, "vh", "password")
	e.verb(t, "vh", "manage")
	c.waitState(t, "vh", "manageable", time.Minute)

	e.verb(t, "vh", "inspect")
	n := waitFor(t, c, "vh", 4*time.Minute, func(n map[string]any) bool {
		failIfFailed(t, n)
		return n["provision_state"] == "manageable" && n["inspection_finished_at"] != nil && n["reservation"] == nil
	})
	props, _ := n["properties"].(map[string]any)
	if fmt.Sprint(props["memory_mb"]) != "1024" {
		t.Fatalf("inspection set memory_mb %v, want 1024 (properties %s)", props["memory_mb"], toJSON(props))
	}
	step("inspected: properties " + toJSON(props))

	// Unchanged: verification passes and the node becomes available.
	e.verb(t, "vh", "provide")
	waitFor(t, c, "vh", 4*time.Minute, func(n map[string]any) bool {
		failIfFailed(t, n)
		return n["provision_state"] == "available" && n["reservation"] == nil
	})
	pass := lastVerification(t, c, "vh")
	res, _ := pass["result"].(map[string]any)
	if pass["outcome"] != "succeeded" || res["passed"] != true {
		t.Fatalf("verification of the unchanged node: %s", toJSON(pass))
	}
	health, _ := res["health"].(map[string]any)
	if ata, _ := health["ata"].([]any); len(ata) != 2 {
		t.Errorf("SMART READ DATA through SG_IO read %d of the 2 SATA disks; skipped: %v", len(ata), health["skipped"])
	}
	nvme, _ := health["nvme"].([]any)
	if len(nvme) != 1 {
		t.Errorf("the NVMe SMART / Health log was read from %d of the 1 NVMe disk; skipped: %v", len(nvme), health["skipped"])
	} else if log, _ := nvme[0].(map[string]any); log["temperature_c"] == nil || fmt.Sprint(log["critical_warning"]) != "0" {
		t.Errorf("QEMU's NVMe SMART log decoded as %s", toJSON(log))
	} else {
		t.Logf("QEMU's NVMe SMART log as decoded: %s", toJSON(log))
	}
	step(fmt.Sprintf("unchanged node verified and available: %v", pass["summary"]))

	// The changed machine: 768 MiB and only the first disk.
	e.verb(t, "vh", "manage")
	c.waitState(t, "vh", "manageable", time.Minute)
	waitFor(t, c, "vh", time.Minute, func(n map[string]any) bool { return n["power_state"] == "power off" })
	changedURL := changedMachine(t, e, 768, []vbmc.QEMUDisk{e.disks[0], e.disks[2]})
	c.mustCall(t, "PATCH", "/v1/nodes/vh", []map[string]any{{"op": "replace", "path": "/driver_info/redfish_address", "value": changedURL}})
	e.verb(t, "vh", "provide")
	n = waitFor(t, c, "vh", 4*time.Minute, func(n map[string]any) bool {
		if s := n["provision_state"]; s == "available" {
			t.Fatalf("the changed node passed verification: %v", toJSON(lastVerification(t, c, "vh")))
		}
		return n["provision_state"] == "clean failed" && n["reservation"] == nil
	})
	lastError := fmt.Sprint(n["last_error"])
	step("clean failed: " + lastError)
	for _, want := range []string{"deploy.verify_hardware", "disk " + serials[1] + " (inspection)", "→ missing",
		"memory (properties): 1024 MiB → 768 MiB"} {
		if !strings.Contains(lastError, want) {
			t.Errorf("last_error lacks %q", want)
		}
	}
	if strings.Contains(lastError, serials[0]) || strings.Contains(lastError, serials[2]) {
		t.Errorf("last_error names a disk that is still there")
	}
	fail := lastVerification(t, c, "vh")
	if fail["outcome"] != "failed" || !strings.Contains(fmt.Sprint(fail["summary"]), "hardware verification FAILED") {
		t.Errorf("the failed verification's step result: %s", toJSON(fail))
	}
	step("the failed run's result is stored: " + fmt.Sprint(fail["summary"]))
}

// lastVerification is the node's newest deploy.verify_hardware step result.
func lastVerification(t *testing.T, c *controller, node string) map[string]any {
	t.Helper()
	_, body := c.call(t, "GET", "/v1/nodes/"+node+"/steps/results", nil)
	results, _ := body["results"].([]any)
	for _, r := range results {
		if m, _ := r.(map[string]any); m["step"] == "deploy.verify_hardware" {
			return m
		}
	}
	t.Fatalf("no deploy.verify_hardware result: %s", toJSON(body))
	return nil
}

// changedMachine starts a second virtual BMC whose system (same name, same
// MAC, the given disk files) has memMiB of memory, and returns its URL.
func changedMachine(t *testing.T, e *e2e, memMiB int, disks []vbmc.QEMUDisk) string {
	t.Helper()
	kernel, initrd := vmDirect(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(e.dir, "qemu-changed")
	q, err := vbmc.NewQEMU(nil, vbmc.QEMUConfig{StateDir: dir, Disks: disks, MemoryMiB: memMiB,
		NIC:    &vbmc.QEMUNIC{MAC: e.mac, GuestFwd: []string{"tcp:" + guestAPI + "-cmd:" + self}},
		Kernel: kernel, Initrd: initrd, Append: "console=ttyS0 panic=-1 anvil.api=http://" + guestAPI,
		ShutdownTimeoutSeconds: 5})
	if err != nil {
		t.Fatal(err)
	}
	node := vbmc.NewNode("e2e-node", q)
	bmc := vbmc.NewServer(nil, "admin", "password", node)
	srv := httptest.NewServer(bmc.Handler())
	t.Cleanup(func() {
		vbmc.CloseNodes([]*vbmc.Node{node})
		srv.Close()
		bmc.Close()
		if t.Failed() {
			s, _ := os.ReadFile(filepath.Join(dir, "serial.log"))
			t.Logf("serial console of the changed machine:\n%s", tailBytes(s, 6000))
		}
	})
	return srv.URL
}
