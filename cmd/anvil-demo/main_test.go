package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/anvil-metal/anvil/internal/cli"
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

// TestHelpAndUsageErrors: -h, --help and help print the usage on stdout;
// an unknown flag or a stray word is a usage error, and -dir survives
// both. A case that started the demo by mistake finds no controller.
func TestHelpAndUsageErrors(t *testing.T) {
	dir := t.TempDir()
	keep := filepath.Join(dir, "keep")
	if err := os.WriteFile(keep, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	safe := []string{"-controller", "/nonexistent/anvil-controller", "-dir", dir}
	tests := []struct {
		args   []string
		code   int
		stdout string
		stderr string
	}{
		{args: []string{"--help"}, stdout: "usage: anvil-demo [flags]"},
		{args: []string{"-h"}, stdout: "  -vm"},
		{args: []string{"help"}, stdout: "walks one node"},
		{args: append(safe, "-help"), stdout: "usage: anvil-demo [flags]"},
		{args: append(safe, "--bogus"), code: 2, stderr: "anvil-demo: flag provided but not defined: -bogus\n\nusage: anvil-demo [flags]"},
		{args: append(safe, "vm"), code: 2, stderr: `anvil-demo: unexpected argument "vm"`},
		{args: append(safe, "--", "-vm"), code: 2, stderr: `"-vm" cannot be an argument: it starts with "-"`},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := cli.Exit(&stdout, &stderr, "anvil-demo", run(tt.args, &stdout))
			if code != tt.code {
				t.Fatalf("exit %d, want %d; stderr: %s", code, tt.code, stderr.String())
			}
			got, other := stdout.String(), stderr.String()
			if code != 0 {
				got, other = other, got
			}
			if want := tt.stdout + tt.stderr; !strings.Contains(got, want) || other != "" {
				t.Errorf("output lacks %q or the other stream has %q:\n%s", want, other, got)
			}
			if _, err := os.Stat(keep); err != nil {
				t.Fatalf("-dir was removed: %v", err)
			}
		})
	}
}
