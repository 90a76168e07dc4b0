package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestDemoSimulated runs the demo against the real controller binary in its
// simulated-agent mode and checks every phase and the summary.
func TestDemoSimulated(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "anvil-controller")
	build := exec.Command("go", "build", "-o", bin, "../anvil-controller")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build controller: %v\n%s", err, out)
	}
	var out bytes.Buffer
	if err := run([]string{"-controller", bin, "-dir", t.TempDir(), "-timeout", "2m"}, &out); err != nil {
		t.Fatalf("demo failed: %v\n%s", err, out.String())
	}
	got := out.String()
	for _, want := range []string{"provide    clean wait  step deploy.erase_devices_metadata", "deleted    available",
		"Summary (its agent is simulated by the controller", "deploy.deploy, deploy.write_image"} {
		if !strings.Contains(got, want) {
			t.Errorf("demo output lacks %q:\n%s", want, got)
		}
	}
}
