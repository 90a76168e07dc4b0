//go:build vm

package image

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/anvil-metal/anvil/bmc/vbmc"
)

// Cleaning fails closed (#23): a disk the agent cannot see fails the
// cleaning and leaves the node out of service, never reports it clean.

// TestVME2ECleaningFailsClosedWhenSATAVanishes inspects a node whose two
// disks sit on AHCI with the default ramdisk (it has the driver), then
// runs automated cleaning on a boot whose kernel command line keeps ahci
// from loading (driver_info.kernel_append_params, over the network boot).
// The node must end in clean failed and maintenance with both disks named
// in last_error, and the host must find both disk images untouched.
func TestVME2ECleaningFailsClosedWhenSATAVanishes(t *testing.T) {
	serials := []string{"ANVIL-SATA-0001", "ANVIL-SATA-0002"}
	e := newE2EWith(t, e2eConfig{netboot: true, disks: []vbmc.QEMUDisk{
		{Serial: serials[0], Bus: vbmc.BusAHCI}, {Serial: serials[1], Bus: vbmc.BusAHCI}}})
	c := e.c
	start := time.Now()
	step := func(what string) { t.Logf("[%6.1fs] %s", time.Since(start).Seconds(), what) }
	e.enroll(t, "sata", "password")
	e.verb(t, "sata", "manage")
	c.waitState(t, "sata", "manageable", time.Minute)

	e.verb(t, "sata", "inspect")
	waitFor(t, c, "sata", 4*time.Minute, func(n map[string]any) bool {
		failIfFailed(t, n)
		return n["provision_state"] == "manageable" && n["inspection_finished_at"] != nil && n["reservation"] == nil
	})
	_, inv := c.call(t, "GET", "/v1/nodes/sata/inventory", nil)
	for _, s := range serials {
		if !strings.Contains(toJSON(inv), s) {
			t.Fatalf("inspection did not see disk %s: %s", s, toJSON(inv))
		}
	}
	step("inspected over the network boot: both SATA disks in the inventory")

	c.mustCall(t, "PATCH", "/v1/nodes/sata", []map[string]any{
		{"op": "add", "path": "/driver_info/kernel_append_params", "value": "%default% module_blacklist=ahci"}})
	e.verb(t, "sata", "provide")
	n := waitFor(t, c, "sata", 4*time.Minute, func(n map[string]any) bool {
		return n["provision_state"] == "clean failed" && n["reservation"] == nil
	})
	lastError := fmt.Sprint(n["last_error"])
	step("clean failed: " + lastError)

	if n["maintenance"] != true {
		t.Errorf("maintenance %v after a failed automated cleaning, want true", n["maintenance"])
	}
	for _, want := range append(serials, "disk check failed, nothing was erased", "2 expected disks not found",
		"QEMU HARDDISK", "64.0 MiB", "SATA controller", "ahci") {
		if !strings.Contains(lastError, want) {
			t.Errorf("last_error lacks %q", want)
		}
	}
	dii, _ := n["driver_internal_info"].(map[string]any)
	check, _ := dii["disk_check"].(map[string]any)
	if missing, _ := check["missing"].([]any); len(missing) != 2 || check["ok"] != false {
		t.Errorf("driver_internal_info.disk_check: want not ok with 2 missing disks: %s", toJSON(check))
	}
	_, h := c.call(t, "GET", "/v1/nodes/sata/history", nil)
	hist := historyLines(h)
	var checkLine string
	for _, l := range strings.Split(hist, "\n") {
		if strings.Contains(l, "disk check before deploy.erase_devices_metadata") {
			checkLine = l
		}
	}
	for _, want := range append(serials, "expected 2 disks", "seen 0; missing: ") {
		if !strings.Contains(checkLine, want) {
			t.Errorf("the history's disk check lacks %q:\n%s", want, hist)
		}
	}

	// The cleaning boot really ran without ahci, and the disks still hold
	// what the test wrote: the failure was not hiding a partial erase.
	console, _ := os.ReadFile(filepath.Join(e.dir, "qemu", "serial.log"))
	if !bytes.Contains(console, []byte("module_blacklist=ahci")) {
		t.Errorf("no boot on the serial console carried module_blacklist=ahci")
	}
	waitFor(t, c, "sata", time.Minute, func(n map[string]any) bool { return n["power_state"] == "power off" })
	assertUntouched(t, e.disks)
	step("both disk images still hold the pattern and GPT headers")
}

// TestVME2ECleaningFailsClosedWithoutDriver: a node never inspected whose
// only disk sits behind a storage controller the ramdisk has no module for
// (LSI 53C895A) fails cleaning with "no disks found", naming the
// controller. Declared diskless (properties.diskless) the same node cleans,
// and says why it found nothing to erase.
func TestVME2ECleaningFailsClosedWithoutDriver(t *testing.T) {
	e := newE2EWith(t, e2eConfig{disks: []vbmc.QEMUDisk{{Serial: "ANVIL-LSI-0001", Bus: vbmc.BusLSI}}})
	c := e.c
	start := time.Now()
	step := func(what string) { t.Logf("[%6.1fs] %s", time.Since(start).Seconds(), what) }
	e.enroll(t, "lsi", "password")
	e.verb(t, "lsi", "manage")
	c.waitState(t, "lsi", "manageable", time.Minute)

	e.verb(t, "lsi", "provide")
	n := waitFor(t, c, "lsi", 4*time.Minute, func(n map[string]any) bool {
		return n["provision_state"] == "clean failed" && n["reservation"] == nil
	})
	lastError := fmt.Sprint(n["last_error"])
	step("clean failed: " + lastError)
	if n["maintenance"] != true {
		t.Errorf("maintenance %v after a failed automated cleaning, want true", n["maintenance"])
	}
	// lsi53c895a: PCI 1000:0012, class 0100 (SCSI).
	for _, want := range []string{"no disks found", "SCSI controller", "(1000:0012) has no driver", "the ramdisk has no module for it"} {
		if !strings.Contains(lastError, want) {
			t.Errorf("last_error lacks %q", want)
		}
	}
	waitFor(t, c, "lsi", time.Minute, func(n map[string]any) bool { return n["power_state"] == "power off" })
	assertUntouched(t, e.disks)
	step("the disk image still holds the pattern")

	// The operator declares the node diskless: cleaning succeeds and says
	// so in the node's disk check and history.
	c.mustCall(t, "PATCH", "/v1/nodes/lsi", []map[string]any{{"op": "add", "path": "/properties/diskless", "value": true}})
	c.mustCall(t, "DELETE", "/v1/nodes/lsi/maintenance", nil)
	e.verb(t, "lsi", "manage")
	c.waitState(t, "lsi", "manageable", time.Minute)
	e.verb(t, "lsi", "provide")
	n = waitFor(t, c, "lsi", 4*time.Minute, func(n map[string]any) bool {
		failIfFailed(t, n)
		return n["provision_state"] == "available"
	})
	step("available: cleaned as a diskless node")
	dii, _ := n["driver_internal_info"].(map[string]any)
	check, _ := dii["disk_check"].(map[string]any)
	if check["ok"] != true || check["diskless_allowed_by"] != "properties.diskless" {
		t.Errorf("driver_internal_info.disk_check: want ok, allowed by properties.diskless: %s", toJSON(check))
	}
	_, h := c.call(t, "GET", "/v1/nodes/lsi/history", nil)
	hist := historyLines(h)
	if !strings.Contains(hist, "clean step deploy.erase_devices finished: no disks present, allowed by properties.diskless") {
		t.Errorf("the erase step's result does not say the node was allowed to have no disks:\n%s", hist)
	}
	t.Logf("history:\n%s", hist)
}

// failIfFailed stops a wait that can no longer succeed.
func failIfFailed(t *testing.T, n map[string]any) {
	t.Helper()
	if strings.HasSuffix(fmt.Sprint(n["provision_state"]), "failed") {
		t.Fatalf("provision_state %v: %v", n["provision_state"], n["last_error"])
	}
}

// assertUntouched reads the disk images from the host: each must still be
// byte for byte what writePattern made.
func assertUntouched(t *testing.T, disks []vbmc.QEMUDisk) {
	t.Helper()
	for _, d := range disks {
		want := filepath.Join(t.TempDir(), "pattern.raw")
		writePattern(t, want, d.SizeMiB<<20)
		a, err := os.ReadFile(d.Path)
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(want)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(a, b) {
			t.Errorf("%s: the disk image changed, but cleaning failed before erasing anything", d.Serial)
		}
	}
}
