package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/image"
	"github.com/anvil-metal/anvil/internal/cli"
)

func TestParseSelection(t *testing.T) {
	all := image.ClassNames(image.DefaultClasses())
	tests := []struct {
		name, classes, modules string
		want                   []string
		add, remove            []string
		err                    string
	}{
		{name: "default: every class", want: all},
		{name: "remove one", classes: "-usb", want: []string{"ethernet", "storage", "virtio", "md", "ipmi"}},
		{name: "only some", classes: "storage,+virtio", want: []string{"storage", "virtio"}},
		{name: "modules", modules: "+ixgbevf, -mlx4_core,+zfs", want: all, add: []string{"ixgbevf", "zfs"}, remove: []string{"mlx4_core"}},
		{name: "unknown class", classes: "-sound", err: `no class "sound"`},
		{name: "module without sign", modules: "e1000e", err: "write +e1000e"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sel, err := parseSelection(tt.classes, tt.modules)
			if tt.err != "" {
				require.ErrorContains(t, err, tt.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, image.ClassNames(sel.Classes))
			assert.Equal(t, tt.add, sel.Add)
			assert.Equal(t, tt.remove, sel.Remove)
		})
	}
}

// TestHelpAndUsageErrors: -h, --help and help print the usage on stdout;
// an unknown flag or a stray word is a usage error. -no-iso and a missing
// -firmware make a case that parsed by mistake fail before building.
func TestHelpAndUsageErrors(t *testing.T) {
	safe := []string{"-no-iso", "-firmware", "/nonexistent/firmware"}
	tests := []struct {
		args   []string
		code   int
		stdout string
		stderr string
	}{
		{args: []string{"--help"}, stdout: "usage: anvil-image [flags]"},
		{args: []string{"-h"}, stdout: "  -kernel-package string"},
		{args: []string{"help"}, stdout: "Builds the agent ramdisk"},
		{args: append(safe, "-help"), stdout: "usage: anvil-image [flags]"},
		{args: append(safe, "--bogus"), code: 2, stderr: "anvil-image: flag provided but not defined: -bogus\n\nusage: anvil-image [flags]"},
		{args: append(safe, "out/image"), code: 2, stderr: `anvil-image: unexpected argument "out/image"`},
		{args: append(safe, "--", "-v"), code: 2, stderr: `"-v" cannot be an argument: it starts with "-"`},
		{args: safe, code: 1, stderr: "anvil-image: -firmware /nonexistent/firmware"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := cli.Exit(&stdout, &stderr, "anvil-image", run(t.Context(), tt.args, &stdout, &stderr))
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
