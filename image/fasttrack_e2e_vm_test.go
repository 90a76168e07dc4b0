//go:build vm

package image

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/anvil-metal/anvil/bmc/vbmc"
)

// TestVME2EFastTrack (#40) on one QEMU node behind anvil-vbmc, with
// --fast-track: provide ends in available with the node on and its agent
// heartbeating; active then starts on that agent: between provide's end
// and the image written, the BMC sees no power action, no boot override
// and no new start of the VM (its kernel and ramdisk are not loaded
// again), and no agent looks up again; the only BMC actions of the deploy
// are the instance's boot (boot device disk, off, on). Then, after
// undeploy (whose cleaning leaves its agent running too), the VM is
// restarted outside the controller into the ramdisk: its agent, a new
// boot, looks up, which ends fast track (the node is powered off), and
// the next active takes the full path. Both deploys' times, from the
// history's "active … after it was requested: boot … steps …", are logged.
func TestVME2EFastTrack(t *testing.T) {
	e := newE2E(t, "--fast-track", "--clean-step-priority", "deploy.erase_devices:0", "--timeout-check-interval", "1s")
	c := e.c
	start := time.Now()
	step := func(what string) { t.Logf("[%6.1fs] %s", time.Since(start).Seconds(), what) }
	e.enroll(t, "ft", "password")
	e.verb(t, "ft", "manage")
	c.waitState(t, "ft", "manageable", time.Minute)

	e.verb(t, "ft", "provide")
	n := waitFor(t, c, "ft", 4*time.Minute, func(n map[string]any) bool {
		failIfFailed(t, n)
		return n["provision_state"] == "available" && n["reservation"] == nil
	})
	if n["power_state"] != "power on" {
		t.Fatalf("power_state %v after cleaning with fast track, want power on", n["power_state"])
	}
	dii, _ := n["driver_internal_info"].(map[string]any)
	ft, _ := dii["agent_fast_track"].(map[string]any)
	if ft == nil {
		t.Fatalf("no agent_fast_track after provide: %s", toJSON(dii))
	}
	provideDone := len(e.bmcLog.String())
	beat := dii["agent_last_heartbeat"]
	waitFor(t, c, "ft", 30*time.Second, func(n map[string]any) bool {
		d, _ := n["driver_internal_info"].(map[string]any)
		return d["agent_last_heartbeat"] != beat
	})
	if on, _ := e.node.On(t.Context()); !on {
		t.Fatalf("the VM is off in available with fast track")
	}
	step(fmt.Sprintf("available, the node on and its agent (boot %v) heartbeating", ft["boot_id"]))

	deployImage(t, c, "ft", e.imageURL, e.image, e.disks[0].Serial)
	waitFor(t, c, "ft", 4*time.Minute, func(n map[string]any) bool {
		failIfFailed(t, n)
		return n["provision_state"] == "active"
	})
	window := e.bmcLog.String()[provideDone:]
	assertImageOnDisk(t, e.disks[0].Path, e.image)
	h := history(t, c, "ft")
	fast := deployTime(t, h, "fast track")
	step("active on fast track: " + fast)
	if n := strings.Count(h, "looked up; token issued"); n != 1 {
		t.Errorf("%d agent lookups, want 1: the deploy must use the agent of the cleaning", n)
	}
	if !strings.Contains(h, "deploy: fast track, no power action and no network boot") {
		t.Errorf("the history does not say the deploy took the fast track:\n%s", h)
	}
	// The BMC's actions from provide's end to active: only the instance's boot.
	actions := bmcActions(window)
	if want := []string{"boot override Hdd", "reset ForceOff", "reset On"}; strings.Join(actions, ", ") != strings.Join(want, ", ") {
		t.Errorf("BMC actions between provide and active: %q, want only the instance's boot %q", actions, want)
	}
	if n := strings.Count(window, "qemu: started"); n != 1 {
		t.Errorf("the VM started %d times between provide and active, want 1 (the instance; the ramdisk was not loaded again)", n)
	}
	t.Logf("BMC log between provide's end and active:\n%s", window)

	// Undeploy: its cleaning boots the ramdisk (the instance ran) and
	// leaves that agent running.
	e.verb(t, "ft", "deleted")
	waitFor(t, c, "ft", 4*time.Minute, func(n map[string]any) bool {
		failIfFailed(t, n)
		d, _ := n["driver_internal_info"].(map[string]any)
		return n["provision_state"] == "available" && n["reservation"] == nil && d["agent_fast_track"] != nil
	})
	step("undeployed and cleaned; the cleaning's agent kept running")

	// The VM restarts into the ramdisk outside the controller: a new boot.
	if err := e.node.SetBoot(vbmc.BootOverride{Target: "Pxe", Enabled: "Once"}); err != nil {
		t.Fatal(err)
	}
	if err := e.node.Reset(t.Context(), vbmc.ResetForceRestart); err != nil {
		t.Fatal(err)
	}
	waitFor(t, c, "ft", 3*time.Minute, func(n map[string]any) bool {
		d, _ := n["driver_internal_info"].(map[string]any)
		return d["agent_fast_track"] == nil && n["power_state"] == "power off" && n["reservation"] == nil
	})
	h = history(t, c, "ft")
	if !regexp.MustCompile(`fast track ends: a lookup from \S+ \(boot \S+\) while the agent of boot \S+ was kept running`).MatchString(h) {
		t.Errorf("the history does not say the new boot's lookup ended fast track:\n%s", h)
	}
	step("the restarted agent (a new boot) looked up: fast track ended, the node powered off")

	deployImage(t, c, "ft", e.imageURL, e.image, e.disks[0].Serial) // undeploy cleared instance_info
	waitFor(t, c, "ft", 4*time.Minute, func(n map[string]any) bool {
		failIfFailed(t, n)
		return n["provision_state"] == "active"
	})
	h = history(t, c, "ft")
	full := deployTime(t, h, "full boot")
	step("active on the full path: " + full)
	if !strings.Contains(h, "deploy: full boot, not fast track: no agent was left running") {
		t.Errorf("the history does not say why the deploy booted the ramdisk:\n%s", h)
	}
	t.Logf("deploy times: fast track %s; full boot %s", fast, full)
}

// history is the node's history, one event per line.
func history(t *testing.T, c *controller, node string) string {
	_, h := c.call(t, "GET", "/v1/nodes/"+node+"/history", nil)
	return historyLines(h)
}

var deployTimeRE = regexp.MustCompile(`active (\S+) after it was requested: boot (\S+) \(([a-z ]+)\), steps (\S+)`)

// deployTime is the last deploy's timing line of the history, which must
// have taken path.
func deployTime(t *testing.T, h, path string) string {
	t.Helper()
	all := deployTimeRE.FindAllStringSubmatch(h, -1)
	if len(all) == 0 {
		t.Fatalf("no deploy timing in the history:\n%s", h)
	}
	m := all[len(all)-1]
	if m[3] != path {
		t.Errorf("the deploy took the %s path, want %s", m[3], path)
	}
	return fmt.Sprintf("total %s = boot %s + steps %s", m[1], m[2], m[4])
}

var bmcActionRE = regexp.MustCompile(`msg="vbmc: (reset|boot override)".*?(?:reset_type=(\S+)|boot="\{Target:(\S+))`)

// bmcActions lists the power actions and boot overrides in a vbmc log.
func bmcActions(log string) []string {
	var out []string
	for _, m := range bmcActionRE.FindAllStringSubmatch(log, -1) {
		out = append(out, m[1]+" "+m[2]+m[3])
	}
	return out
}
