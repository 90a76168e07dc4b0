package main

import (
	"bytes"
	"context"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/internal/cli"
)

func TestSettingsPrecedence(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "anvil.conf")
	require.NoError(t, os.WriteFile(cfg, []byte("# site config\nlisten: 127.0.0.1:7000\nworkers: 4\nauth: http_basic\n"), 0o600))
	env := map[string]string{"ANVIL_WORKERS": "8", "ANVIL_CONFIG": cfg}

	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:6385", "")
	workers := fs.Int("workers", 16, "")
	auth := fs.String("auth", "noauth", "")
	config := fs.String("config", "", "")
	db := fs.String("database", "sqlite://./anvil.db", "")
	require.NoError(t, fs.Parse([]string{"--auth", "noauth"}))
	require.NoError(t, applyDefaults(fs, *config, func(k string) string { return env[k] }))

	assert.Equal(t, "127.0.0.1:7000", *listen, "from the config file")
	assert.Equal(t, 8, *workers, "environment beats the file")
	assert.Equal(t, "noauth", *auth, "a flag beats both")
	assert.Equal(t, "sqlite://./anvil.db", *db, "default when nothing sets it")
}

func TestConfigErrors(t *testing.T) {
	dir := t.TempDir()
	tests := map[string]struct {
		file string
		env  map[string]string
		want string
	}{
		"unknown key":  {"colour: blue\n", nil, `unknown setting "colour"`},
		"no colon":     {"listen 127.0.0.1:1\n", nil, "expected 'key: value'"},
		"bad value":    {"workers: many\n", nil, "workers"},
		"bad env":      {"", map[string]string{"ANVIL_WORKERS": "lots"}, "ANVIL_WORKERS"},
		"missing file": {"", map[string]string{"ANVIL_CONFIG": filepath.Join(dir, "nope")}, "open config"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			path := ""
			if tc.file != "" {
				path = filepath.Join(dir, name)
				require.NoError(t, os.WriteFile(path, []byte(tc.file), 0o600))
			}
			fs := flag.NewFlagSet("t", flag.ContinueOnError)
			fs.String("listen", "", "")
			fs.Int("workers", 1, "")
			fs.String("config", "", "")
			err := applyDefaults(fs, path, func(k string) string { return tc.env[k] })
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

func TestRefusesNoauthOffLoopback(t *testing.T) {
	err := run(t.Context(), []string{"--listen", "0.0.0.0:0", "--database", "sqlite://:memory:"}, func(string) string { return "" })
	require.Error(t, err)
	assert.Contains(t, err.Error(), "refusing noauth on non-loopback address")
}

func TestParsePriorities(t *testing.T) {
	got, err := parsePriorities("deploy.erase_devices:0, deploy.erase_devices_metadata:123")
	require.NoError(t, err)
	assert.Equal(t, map[string]int{"deploy.erase_devices": 0, "deploy.erase_devices_metadata": 123}, got)
	for _, bad := range []string{"erase_devices:1", "deploy.x", "deploy.x:-1", "deploy.x:high", ".x:1"} {
		_, err := parsePriorities(bad)
		assert.Error(t, err, bad)
	}
}

// TestHelpAndUsageErrors: the daemon and its subcommands answer -h, --help
// and help on stdout; an unknown flag or a stray word is a usage error and
// starts no controller (the short context would stop one that did).
func TestHelpAndUsageErrors(t *testing.T) {
	tests := []struct {
		args   []string
		code   int
		stdout string
		stderr string
	}{
		{args: []string{"--help"}, stdout: "usage: anvil-controller [flags]"},
		{args: []string{"-h"}, stdout: "  -listen string"},
		{args: []string{"-help"}, stdout: "Precedence: flag, environment, file, default."},
		{args: []string{"help"}, stdout: "usage: anvil-controller [flags]"},
		{args: []string{"--listen", "127.0.0.1:0", "--help"}, stdout: "usage: anvil-controller [flags]"},
		{args: []string{"export", "--help"}, stdout: "usage: anvil-controller export [--database URL] [-o FILE] [--force]"},
		{args: []string{"export", "-h"}, stdout: "  -force"},
		{args: []string{"export", "help"}, stdout: "usage: anvil-controller export"},
		{args: []string{"import", "--help"}, stdout: "usage: anvil-controller import [--database URL] FILE|-"},
		{args: []string{"import", "help"}, stdout: "usage: anvil-controller import"},

		{args: []string{"--bogus"}, code: 2, stderr: "anvil-controller: flag provided but not defined: -bogus\n\nusage: anvil-controller [flags]"},
		{args: []string{"exprot"}, code: 2, stderr: `anvil-controller: unexpected argument "exprot"`},
		{args: []string{"--listen", "127.0.0.1:0", "--database", "sqlite://:memory:", "extra"}, code: 2, stderr: `unexpected argument "extra"`},
		{args: []string{"--workers", "many"}, code: 2, stderr: `invalid value "many" for flag -workers`},
		{args: []string{"export", "--bogus"}, code: 2, stderr: "flag provided but not defined: -bogus\n\nusage: anvil-controller export"},
		{args: []string{"export", "out.json"}, code: 2, stderr: `export: unexpected argument "out.json" (the output file is -o FILE)`},
		{args: []string{"import", "--database", "sqlite://:memory:"}, code: 2, stderr: "anvil-controller: missing FILE|-"},
		{args: []string{"import", "--database", "sqlite://:memory:", "--", "-x"}, code: 2, stderr: `"-x" cannot be FILE|-: it starts with "-"`},
		{args: []string{"import", "--database", "sqlite://:memory:", "a.json", "b.json"}, code: 2, stderr: `unexpected argument "b.json"`},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
			defer cancel()
			var stdout, stderr bytes.Buffer
			err := runTo(ctx, tt.args, func(string) string { return "" }, &stdout)
			code := cli.Exit(&stdout, &stderr, "anvil-controller", err)
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

// A built-in rules file that does not load stops the controller before it
// starts, with the flag's name.
func TestInspectionRulesFileErrors(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	require.NoError(t, os.WriteFile(bad, []byte("- actions: [{op: nope, args: {}}]\n"), 0o600))
	for path, want := range map[string]string{
		filepath.Join(dir, "missing.yaml"): "no such file",
		bad:                                "'nope' is not one of",
	} {
		err := run(t.Context(), []string{"--listen", "127.0.0.1:0", "--database", "sqlite://:memory:", "--inspection-rules-file", path},
			func(string) string { return "" })
		require.Error(t, err)
		assert.Contains(t, err.Error(), "--inspection-rules-file")
		assert.Contains(t, err.Error(), want)
	}
}
