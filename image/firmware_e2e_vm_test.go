//go:build vm

package image

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/anvil-metal/anvil/bmc/vbmc"
)

// firmwareVersion is the microversion of GET /v1/nodes/{node}/firmware.
const firmwareVersion = "1.86"

// TestVME2EBIOSAndFirmware: the QEMU node behind anvil-vbmc (Redfish) gets
// uniform BIOS settings and a new BMC firmware in one manual cleaning, with
// an agent step after them (so the node boots its ramdisk again after the
// BIOS reboot); a read-only attribute in the request is refused before
// anything runs; the BMC pulls its image from the controller, which
// serves it from --firmware-dir; the BMC drops off the network after its
// update, as real ones do; then a firmware baseline the node does not
// meet fails automated cleaning, naming the component, before any disk
// is erased; then the node is deployed and serviced (1.87) with
// bios.apply_configuration, and boots its instance again.
func TestVME2EBIOSAndFirmware(t *testing.T) {
	fwDir := t.TempDir()
	image := vbmc.FirmwareImage(vbmc.FirmwareBMC, "2.00.00", bytes.Repeat([]byte("bmc firmware "), 4096))
	if err := os.WriteFile(filepath.Join(fwDir, "bmc-2.00.00.bin"), image, 0o644); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(image)
	e := newE2E(t, "--firmware-dir", fwDir, "--timeout-check-interval", "1s", "--heartbeat-interval", "2s")
	e.bmc.SetFirmwareOptions(vbmc.FirmwareOptions{UpdateDuration: 2 * time.Second, OfflineAfterBMCUpdate: true, BMCRestart: 5 * time.Second})
	c := e.c
	start := time.Now()
	step := func(what string) { t.Logf("[%6.1fs] %s", time.Since(start).Seconds(), what) }

	e.enroll(t, "fw", "password")
	e.verb(t, "fw", "manage")
	c.waitState(t, "fw", "manageable", time.Minute)
	step("manageable: BIOS settings and firmware versions cached")
	if v := biosValue(t, c, "ProcVirtualization"); v != "Enabled" {
		t.Fatalf("ProcVirtualization cached as %q before, want Enabled", v)
	}
	fw := firmware(t, c, "fw")
	if fw["bmc"]["current_version"] != "1.00.00" {
		t.Fatalf("bmc firmware before: %v", fw["bmc"])
	}

	settings := []any{
		map[string]any{"name": "ProcVirtualization", "value": "Disabled"}, // needs a reboot
		map[string]any{"name": "PxeDev1VlanId", "value": 100},
		map[string]any{"name": "WakeOnLan", "value": false}, // applies without one
	}
	bios := func(s []any) map[string]any {
		return map[string]any{"interface": "bios", "step": "apply_configuration", "args": map[string]any{"settings": s}}
	}
	// a read-only attribute in the same request: refused, nothing runs
	code, body := c.call(t, "PUT", "/v1/nodes/fw/states/provision", map[string]any{"target": "clean",
		"clean_steps": []any{bios(append(append([]any{}, settings...), map[string]any{"name": "SystemServiceTag", "value": "HACKED"}))}})
	if code != http.StatusBadRequest || !strings.Contains(toJSON(body), "SystemServiceTag") {
		t.Fatalf("clean with a read-only attribute = HTTP %d %v, want 400 naming SystemServiceTag", code, body)
	}
	if n := c.mustCall(t, "GET", "/v1/nodes/fw", nil); n["provision_state"] != "manageable" {
		t.Fatalf("node moved to %v after a refused request", n["provision_state"])
	}
	if on, _ := e.node.On(t.Context()); on {
		t.Fatal("the VM was powered on for a refused request")
	}
	step("read-only attribute refused with 400 before anything ran")

	c.mustCall(t, "PUT", "/v1/nodes/fw/states/provision", map[string]any{"target": "clean", "clean_steps": []any{
		bios(settings),
		map[string]any{"interface": "firmware", "step": "update", "args": map[string]any{"settings": []any{map[string]any{
			"component": "bmc", "url": c.url + "/v1/boot/firmware/bmc-2.00.00.bin", "checksum": "sha256:" + hex.EncodeToString(sum[:])}}}},
		map[string]any{"interface": "deploy", "step": "erase_devices_metadata"},
	}})
	n := c.waitState(t, "fw", "manageable", 6*time.Minute)
	if n["last_error"] != nil {
		t.Fatalf("manual cleaning: last_error %v", n["last_error"])
	}
	step("manual cleaning done: BIOS applied, BMC flashed, metadata erased")
	for name, want := range map[string]string{"ProcVirtualization": "Disabled", "PxeDev1VlanId": "100", "WakeOnLan": "0"} {
		if got := biosValue(t, c, name); got != want {
			t.Errorf("GET /bios: %s = %q, want %q", name, got, want)
		}
	}
	if active, _ := e.bmc.FirmwareVersion("e2e-node", vbmc.FirmwareBMC); active != "2.00.00" {
		t.Errorf("the BMC runs %s, want 2.00.00", active)
	}
	fw = firmware(t, c, "fw")
	if b := fw["bmc"]; b["current_version"] != "2.00.00" || b["initial_version"] != "1.00.00" || b["last_version_flashed"] != "2.00.00" {
		t.Errorf("GET /firmware bmc = %v, want current 2.00.00, initial 1.00.00, last flashed 2.00.00", b)
	}
	for _, d := range e.disks {
		if hasAt(t, d.Path, 512, []byte("EFI PART")) {
			t.Errorf("%s: GPT header still there: the agent step after the BIOS and firmware steps did not run", d.Path)
		}
	}
	_, h := c.call(t, "GET", "/v1/nodes/fw/history", nil)
	hist := historyLines(h)
	for _, want := range []string{"booting the ramdisk again", "firmware of bmc updated: 1.00.00 → 2.00.00"} {
		if !strings.Contains(hist, want) {
			t.Errorf("history lacks %q:\n%s", want, hist)
		}
	}

	// a baseline the node does not meet: automated cleaning fails first
	c.mustCall(t, "PATCH", "/v1/nodes/fw", []map[string]any{{"op": "add", "path": "/properties/firmware_baseline",
		"value": map[string]any{"bmc": []any{"3.00.00", "3.10.00"}, "bios": "2.19.1"}}})
	e.verb(t, "fw", "provide")
	n = waitFor(t, c, "fw", 4*time.Minute, func(n map[string]any) bool { return n["provision_state"] == "clean failed" })
	msg, _ := n["last_error"].(string)
	if !strings.Contains(msg, "firmware.verify") || !strings.Contains(msg, "bmc runs 2.00.00, the baseline allows 3.00.00 or 3.10.00") || strings.Contains(msg, "bios runs") {
		t.Errorf("last_error %q: want firmware.verify naming bmc only", msg)
	}
	for _, d := range e.disks {
		if !hasAt(t, d.Path, 32<<20, bytes.Repeat([]byte{0x5a}, 64)) {
			t.Errorf("%s was erased although firmware.verify failed first", d.Path)
		}
	}
	step("automated cleaning failed on the baseline, naming the BMC, before any erase")

	// Servicing (1.87): the node is deployed (no automated cleaning, so
	// no erase), then serviced with bios.apply_configuration: the BIOS
	// step reboots the running instance to apply the setting, the node
	// returns to active and boots its image again from disk.
	// The failed cleaning's tear-down powers the node off in the
	// background, holding its reservation; a verb before it ends is a 409
	// (NodeLocked), which BMO retries and this test waits out.
	waitFor(t, c, "fw", time.Minute, func(n map[string]any) bool {
		return n["reservation"] == nil && n["target_power_state"] == nil
	})
	e.verb(t, "fw", "manage")
	c.waitState(t, "fw", "manageable", time.Minute)
	c.mustCall(t, "DELETE", "/v1/nodes/fw/maintenance", nil) // the failed cleaning's
	c.mustCall(t, "PATCH", "/v1/nodes/fw", []map[string]any{{"op": "remove", "path": "/properties/firmware_baseline"},
		{"op": "replace", "path": "/automated_clean", "value": false}})
	e.verb(t, "fw", "provide")
	c.waitState(t, "fw", "available", time.Minute)
	deployImage(t, c, "fw", e.imageURL, e.image, e.disks[0].Serial)
	c.waitState(t, "fw", "active", 6*time.Minute)
	booted := waitSerialMarkers(t, e, 1, time.Minute)
	step("active: the deployed image booted")
	putAt(t, c, "1.87", "/v1/nodes/fw/states/provision", map[string]any{"target": "service", "service_steps": []any{
		bios([]any{map[string]any{"name": "ProcVirtualization", "value": "Enabled"}})}})
	n = waitFor(t, c, "fw", 4*time.Minute, func(n map[string]any) bool {
		return n["provision_state"] == "active" || n["provision_state"] == "service failed"
	})
	if n["provision_state"] != "active" || n["last_error"] != nil {
		t.Fatalf("service: %v, last_error %v", n["provision_state"], n["last_error"])
	}
	if got := biosValue(t, c, "ProcVirtualization"); got != "Enabled" {
		t.Errorf("GET /bios after the service: ProcVirtualization = %q, want Enabled", got)
	}
	if n["power_state"] != "power on" {
		t.Errorf("power_state %v after the service, want power on", n["power_state"])
	}
	waitSerialMarkers(t, e, booted+1, 2*time.Minute)
	assertImageOnDisk(t, e.disks[0].Path, e.image)
	_, h = c.call(t, "GET", "/v1/nodes/fw/history", nil)
	for _, want := range []string{"active -> servicing (service requested)", "service step bios.apply_configuration finished", "servicing -> active (done)"} {
		if hist := historyLines(h); !strings.Contains(hist, want) {
			t.Errorf("history lacks %q:\n%s", want, hist)
		}
	}
	step("serviced: BIOS applied on the running instance, which booted from its disk again")
}

// waitSerialMarkers waits until the node's serial console shows the
// deployed image's boot marker at least want times, and returns the count.
func waitSerialMarkers(t *testing.T, e *e2e, want int, timeout time.Duration) int {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		s, _ := os.ReadFile(filepath.Join(e.dir, "qemu", "serial.log"))
		if n := bytes.Count(s, []byte("ANVIL-BOOTED-FROM-DISK")); n >= want {
			return n
		}
		if time.Now().After(deadline) {
			t.Fatalf("the deployed image did not boot (%d times wanted); serial console:\n%s", want, tailBytes(s, 3000))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// putAt sends a PUT at a microversion above the tests' apiVersion.
func putAt(t *testing.T, c *controller, version, path string, body any) {
	t.Helper()
	b, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest("PUT", c.url+path, bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-OpenStack-Ironic-API-Version", version)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		raw, _ := io.ReadAll(resp.Body)
		t.Fatalf("PUT %s at %s: HTTP %d %s", path, version, resp.StatusCode, raw)
	}
}

func biosValue(t *testing.T, c *controller, name string) string {
	t.Helper()
	s := c.mustCall(t, "GET", "/v1/nodes/fw/bios/"+name, nil)
	v, _ := s[name].(map[string]any)
	str, _ := v["value"].(string)
	return str
}

// firmware is GET /v1/nodes/{node}/firmware at 1.86, by component.
func firmware(t *testing.T, c *controller, node string) map[string]map[string]any {
	t.Helper()
	req, err := http.NewRequest("GET", c.url+"/v1/nodes/"+node+"/firmware", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-OpenStack-Ironic-API-Version", firmwareVersion)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET firmware: HTTP %d %s", resp.StatusCode, b)
	}
	var body struct {
		Firmware []map[string]any `json:"firmware"`
	}
	if err := json.Unmarshal(b, &body); err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]any{}
	for _, c := range body.Firmware {
		out[c["component"].(string)] = c
	}
	return out
}

// hasAt reports whether the file holds want at off.
func hasAt(t *testing.T, path string, off int64, want []byte) bool {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got := make([]byte, len(want))
	if _, err := f.ReadAt(got, off); err != nil {
		t.Fatal(err)
	}
	return bytes.Equal(got, want)
}
