package main

import (
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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
