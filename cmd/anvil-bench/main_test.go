package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/anvil-metal/anvil/internal/cli"
)

// TestHelpAndUsageErrors: the benchmark and its subcommands answer -h,
// --help and help on stdout without starting a run; an unknown flag or a
// stray word is a usage error. -controller names no binary, so a case
// that started a run by mistake fails at once instead of benchmarking.
func TestHelpAndUsageErrors(t *testing.T) {
	const nobin = "-controller=/nonexistent/anvil-controller"
	tests := []struct {
		args   []string
		code   int
		stdout string
		stderr string
	}{
		{args: []string{"--help"}, stdout: "usage: anvil-bench [flags]"},
		{args: []string{"-h"}, stdout: "  -concurrency int"},
		{args: []string{"help"}, stdout: "anvil-bench load [flags]"},
		{args: []string{nobin, "help"}, stdout: "usage: anvil-bench [flags]"},
		{args: []string{"load", "--help"}, stdout: "usage: anvil-bench load [flags]"},
		{args: []string{"load", "-h"}, stdout: "  -cleaning int"},
		{args: []string{"load", "help"}, stdout: "usage: anvil-bench load [flags]"},
		{args: []string{"ironic", "--help"}, stdout: "usage: anvil-bench ironic [flags]"},
		{args: []string{"ironic", "help"}, stdout: "  -only string"},

		{args: []string{nobin, "--bogus"}, code: 2, stderr: "anvil-bench: flag provided but not defined: -bogus\n\nusage: anvil-bench [flags]"},
		{args: []string{nobin, "laod"}, code: 2, stderr: `anvil-bench: unexpected argument "laod"`},
		{args: []string{"load", nobin, "--bogus"}, code: 2, stderr: "flag provided but not defined: -bogus\n\nusage: anvil-bench load"},
		{args: []string{"load", nobin, "extra"}, code: 2, stderr: `unexpected argument "extra"`},
		{args: []string{"ironic", nobin, "--", "-x"}, code: 2, stderr: `"-x" cannot be an argument: it starts with "-"`},
		{args: []string{"ironic", nobin, "sqlite"}, code: 2, stderr: `unexpected argument "sqlite"`},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			err := run(tt.args, &stdout)
			code := cli.Exit(&stdout, &stderr, "anvil-bench", err)
			assert.Equal(t, tt.code, code, "stderr: %s", stderr.String())
			if tt.code == 0 {
				assert.Contains(t, stdout.String(), tt.stdout)
				assert.Empty(t, stderr.String())
				return
			}
			assert.Empty(t, stdout.String())
			assert.Contains(t, stderr.String(), tt.stderr)
		})
	}
}
