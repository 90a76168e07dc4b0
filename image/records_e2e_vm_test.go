//go:build vm

package image

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestVME2EEraseRecordsAndAbort (#21) on one virtual node with two NVMe
// disks: a manual erase_devices leaves one signed sanitization record per
// disk, with the VM's serials and sizes, which the CLI verifies offline and
// which fails verification after one byte changes; then a long overwrite
// is aborted in clean wait: the agent stops, the node reaches clean failed
// within seconds with a partial result naming the bytes written, the VM
// was not powered off, and the agent goes on heartbeating.
func TestVME2EEraseRecordsAndAbort(t *testing.T) {
	e := newE2E(t)
	c := e.c
	cli := filepath.Join(t.TempDir(), "anvil")
	build := exec.Command("go", "build", "-o", cli, "./cmd/anvil")
	build.Dir = ".."
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build CLI: %v\n%s", err, out)
	}
	anvil := func(args ...string) (string, error) {
		out, err := exec.Command(cli, append([]string{"--url", c.url}, args...)...).CombinedOutput()
		return string(out), err
	}
	start := time.Now()
	step := func(what string) { t.Logf("[%6.1fs] %s", time.Since(start).Seconds(), what) }
	e.enroll(t, "rec", "password")
	e.verb(t, "rec", "manage")
	c.waitState(t, "rec", "manageable", time.Minute)

	clean := func(args map[string]any) {
		c.mustCall(t, "PUT", "/v1/nodes/rec/states/provision", map[string]any{"target": "clean",
			"clean_steps": []map[string]any{{"interface": "deploy", "step": "erase_devices", "args": args}}})
		c.waitState(t, "rec", "clean wait", time.Minute)
	}
	clean(map[string]any{})
	c.waitState(t, "rec", "manageable", 5*time.Minute)
	step("manual erase_devices done")
	assertErased(t, e.disks)

	// Records: signed, one per disk, with the VM's serials and sizes.
	out, err := anvil("erase-records", "rec")
	if err != nil {
		t.Fatalf("anvil erase-records: %v\n%s", err, out)
	}
	file := filepath.Join(t.TempDir(), "records.json")
	if err := os.WriteFile(file, []byte(out), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, d := range e.disks {
		want := `"serial":"` + d.Serial + `"`
		if !strings.Contains(out, want) {
			t.Errorf("no record names %s:\n%s", want, out)
		}
	}
	if n := strings.Count(out, `"size_bytes":67108864`); n != 2 {
		t.Errorf("%d records with the disks' size (64 MiB), want 2:\n%s", n, out)
	}
	if !strings.Contains(out, `"method":"nvme_format_`) && !strings.Contains(out, `"method":"overwrite"`) {
		t.Errorf("records name no erase method the agent uses on NVMe:\n%s", out)
	}
	key, err := anvil("erase-records", "public-key")
	if err != nil {
		t.Fatalf("public key: %v\n%s", err, key)
	}
	pub := strings.SplitN(key, "\n", 2)[0]
	if v, err := anvil("erase-records", "verify", file, "--key", pub); err != nil || strings.Count(v, "OK ") != 2 {
		t.Errorf("verify: %v\n%s", err, v)
	}
	tampered := strings.Replace(out, e.disks[0].Serial, e.disks[0].Serial[:len(e.disks[0].Serial)-1]+"9", 1)
	if err := os.WriteFile(file, []byte(tampered), 0o600); err != nil {
		t.Fatal(err)
	}
	if v, err := anvil("erase-records", "verify", file, "--key", pub); err == nil || !strings.Contains(v, "FAILED") {
		t.Errorf("a changed byte verified: %v\n%s", err, v)
	}
	step("records verified offline; a changed byte fails")

	// Abort a long overwrite (no NVMe format; 40 random passes).
	clean(map[string]any{"enable_nvme_secure_erase": false, "iterations": 40})
	waitFor(t, c, "rec", 3*time.Minute, func(n map[string]any) bool {
		dii, _ := n["driver_internal_info"].(map[string]any)
		st, _ := dii["agent_command_status"].(map[string]any)
		p, _ := st["progress"].(map[string]any)
		done, _ := p["bytes_done"].(float64)
		return st["state"] == "RUNNING" && done > 0
	})
	step("overwrite running; aborting")
	abortAt := time.Now()
	c.mustCall(t, "PUT", "/v1/nodes/rec/states/provision", map[string]any{"target": "abort"})
	got := c.waitState(t, "rec", "clean failed", time.Minute)
	took := time.Since(abortAt)
	step("clean failed " + took.Round(100*time.Millisecond).String() + " after the abort")
	if took > 30*time.Second {
		t.Errorf("clean failed %v after the abort, want within seconds", took)
	}
	lastErr, _ := got["last_error"].(string)
	if !strings.Contains(lastErr, "aborted by operator: the agent stopped it") || !strings.Contains(lastErr, "after writing") {
		t.Errorf("last_error %q does not say the operator aborted and what was written", lastErr)
	}
	if on, _ := e.node.On(t.Context()); !on {
		t.Errorf("the controller powered the VM off")
	}
	_, res := c.call(t, "GET", "/v1/nodes/rec/steps/results?limit=1", nil)
	results, _ := res["results"].([]any)
	if len(results) != 1 {
		t.Fatalf("step results: %v", res)
	}
	r := results[0].(map[string]any)
	if r["outcome"] != "aborted" || !bytes.Contains([]byte(toJSON(r["result"])), []byte(`"bytes":`)) {
		t.Errorf("the aborted run's result does not name the bytes written: %s", toJSON(r))
	}
	hb := func() string {
		_, n := c.call(t, "GET", "/v1/nodes/rec", nil)
		s, _ := n["driver_internal_info"].(map[string]any)["agent_last_heartbeat"].(string)
		return s
	}
	before := hb()
	waitFor(t, c, "rec", time.Minute, func(map[string]any) bool { return hb() != before })
	step("the agent answered its next heartbeat")
}
