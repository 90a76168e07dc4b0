package main

import (
	"bytes"
	"context"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/controller/api"
	"github.com/anvil-metal/anvil/controller/client"
	"github.com/anvil-metal/anvil/controller/conductor"
	"github.com/anvil-metal/anvil/controller/store/sqlite"
	"github.com/anvil-metal/anvil/internal/cli"
)

// TestCLIAgainstRealAPI drives the CLI against a real API server and store.
func TestCLIAgainstRealAPI(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st, err := sqlite.Open(ctx, ":memory:")
	require.NoError(t, err)
	defer st.Close()
	cond := conductor.New(st, conductor.Config{Host: "cli", AutomatedClean: true, CheckInterval: time.Hour}, conductor.FakeDriver{})
	go func() { _ = cond.Run(ctx) }()
	srv := httptest.NewServer(api.New(api.Config{Store: st, Conductor: cond}))
	defer srv.Close()
	env := func(k string) string {
		if k == "ANVIL_URL" {
			return srv.URL
		}
		return ""
	}
	cli := func(stdin string, args ...string) (string, error) {
		var out bytes.Buffer
		err := run(ctx, args, strings.NewReader(stdin), &out, env)
		return out.String(), err
	}
	var created map[string]any
	c := newClient(srv.URL)
	require.NoError(t, c.Do(ctx, "POST", "/v1/nodes", map[string]any{"driver": "fake-hardware", "name": "cli-node"}, &created))

	out, err := cli("", "node", "manage", "cli-node", "--wait", "--timeout", "10s")
	require.NoError(t, err)
	assert.Contains(t, out, "cli-node: manageable after")
	out, err = cli(`[{"interface":"bios","step":"factory_reset"}]`, "node", "clean", "cli-node", "--steps", "-", "--wait")
	require.NoError(t, err, out)
	assert.Contains(t, out, "manageable after")
	out, err = cli("", "node", "list")
	require.NoError(t, err)
	assert.Regexp(t, `cli-node\s+\S+\s+manageable\s`, out)
	out, err = cli("", "node", "events", "cli-node")
	require.NoError(t, err)
	assert.Contains(t, out, "clean step bios.factory_reset finished")
	out, err = cli("", "node", "step-results", "cli-node")
	require.NoError(t, err)
	assert.Regexp(t, `\+00:00\s+clean\s+bios.factory_reset\s+succeeded\s+\d`, out)
	out, err = cli("", "node", "step-results", "cli-node", "--json")
	require.NoError(t, err)
	assert.Contains(t, out, `"outcome": "succeeded"`)
	out, err = cli("", "node", "steps", "cli-node")
	require.NoError(t, err)
	assert.Contains(t, out, "bios.apply_configuration")

	_, err = cli(`[{"interface":"bios","step":"nope"}]`, "node", "clean", "cli-node", "--steps", "-")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "does not support clean step bios.nope")
	_, err = cli("", "node", "frobnicate", "x")
	assert.ErrorContains(t, err, "unknown command")
	_, err = cli("", "node", "show", "missing")
	assert.ErrorContains(t, err, "Node missing could not be found.")

	out, err = cli("", "node", "show", "cli-node")
	require.NoError(t, err)
	assert.Contains(t, out, "HEALTH: unknown (the BMC reports none)\n")
	assert.NotContains(t, out, "DISABLE POWER OFF")
	require.NoError(t, c.DoVersion(ctx, "1.95", "PATCH", "/v1/nodes/cli-node", []map[string]any{{"op": "replace", "path": "/disable_power_off", "value": true}}, nil))
	out, err = cli("", "node", "show", "cli-node")
	require.NoError(t, err)
	assert.Contains(t, out, "DISABLE POWER OFF: the node is never powered off; reboots replace power-offs\n")
}

// TestHelpAndUsageErrors: every level answers -h, --help and help on
// stdout; unknown flags, words and flag-like names are usage errors. The
// CA file does not exist, so any command that got as far as connecting
// would fail with "CA file" instead.
func TestHelpAndUsageErrors(t *testing.T) {
	env := func(k string) string {
		return map[string]string{"ANVIL_URL": "http://127.0.0.1:1", "ANVIL_CA_FILE": "/nonexistent/ca.pem"}[k]
	}
	tests := []struct {
		args   []string
		code   int
		stdout string
		stderr string
	}{
		{args: []string{"--help"}, stdout: "usage: anvil [--url URL]"},
		{args: []string{"-h"}, stdout: "  -fingerprint string"},
		{args: []string{"help"}, stdout: "erase-records ..."},
		{args: []string{"--url", "http://x", "help"}, stdout: "usage: anvil [--url URL]"},
		{args: []string{"node", "--help"}, stdout: "usage: anvil node COMMAND"},
		{args: []string{"rule", "--help"}, stdout: "usage: anvil rule COMMAND"},
		{args: []string{"rule", "help"}, stdout: "export "},
		{args: []string{"rule", "show", "--help"}, stdout: "usage: anvil rule COMMAND"},
		{args: []string{"rule", "list", "help"}, stdout: "-json"},
		{args: []string{"rule"}, code: 2, stderr: "missing command"},
		{args: []string{"rule", "show"}, code: 2, stderr: "missing RULE"},
		{args: []string{"rule", "delete"}, code: 2, stderr: "missing RULE"},
		{args: []string{"rule", "create", "a.json", "b.json"}, code: 2, stderr: "unexpected argument"},
		{args: []string{"rule", "laod"}, code: 2, stderr: `unknown command "laod"`},
		{args: []string{"node", "help"}, stdout: "step-results NODE"},
		{args: []string{"node", "-h"}, stdout: "usage: anvil node COMMAND"},
		{args: []string{"node", "list", "--help"}, stdout: "usage: anvil node list [--state S]"},
		{args: []string{"node", "list", "help"}, stdout: "-state string"},
		{args: []string{"node", "show", "--help"}, stdout: "usage: anvil node show NODE"},
		{args: []string{"node", "show", "n1", "-h"}, stdout: "usage: anvil node show NODE"},
		{args: []string{"node", "show", "help"}, stdout: "usage: anvil node show NODE"},
		{args: []string{"node", "manage", "help", "--wait"}, stdout: "usage: anvil node manage NODE"},
		{args: []string{"erase-records", "verify", "help"}, stdout: "usage: anvil erase-records verify FILE"},
		{args: []string{"node", "steps", "-help"}, stdout: "usage: anvil node steps NODE"},
		{args: []string{"node", "events", "--help"}, stdout: "usage: anvil node events NODE"},
		{args: []string{"node", "step-results", "--help"}, stdout: "usage: anvil node step-results NODE [--limit N] [--json]"},
		{args: []string{"node", "bios", "--help"}, stdout: "usage: anvil node bios NODE [--json]"},
		{args: []string{"node", "firmware", "-h"}, stdout: "usage: anvil node firmware NODE [--json]"},
		{args: []string{"node", "timeline", "--help"}, stdout: "usage: anvil node timeline NODE [--all] [--json]"},
		{args: []string{"node", "help"}, stdout: "timeline NODE [--all] [--json]"},
		{args: []string{"node", "sel", "--help"}, stdout: "usage: anvil node sel NODE [--json]"},
		{args: []string{"node", "nmi", "-h"}, stdout: "usage: anvil node nmi NODE"},
		{args: []string{"node", "help"}, stdout: "nmi NODE"},
		{args: []string{"node", "help"}, stdout: "bios NODE [--json]"},
		{args: []string{"node", "manage", "--help"}, stdout: "rests in manageable"},
		{args: []string{"node", "clean", "-h"}, stdout: "  -steps string"},
		{args: []string{"node", "service", "--help"}, stdout: "usage: anvil node service NODE --steps FILE|-|JSON [--disable-ramdisk]"},
		{args: []string{"node", "unhold", "-h"}, stdout: "usage: anvil node unhold NODE [--wait]"},
		{args: []string{"node", "help"}, stdout: "service NODE --steps FILE|-|JSON"},
		{args: []string{"node", "abort", "--help"}, stdout: "usage: anvil node abort NODE [--wait]"},
		{args: []string{"erase-records", "--help"}, stdout: "anvil erase-records verify FILE"},
		{args: []string{"erase-records", "help"}, stdout: "  -format string"},
		{args: []string{"erase-records", "verify", "--help"}, stdout: "  -key string"},
		{args: []string{"erase-records", "public-key", "-h"}, stdout: "usage: anvil erase-records public-key"},

		{args: nil, code: 2, stderr: "anvil: missing command\n\nusage: anvil [--url URL]"},
		{args: []string{"--bogus"}, code: 2, stderr: "anvil: flag provided but not defined: -bogus\n\nusage: anvil [--url URL]"},
		{args: []string{"frobnicate"}, code: 2, stderr: `anvil: unknown command "frobnicate"`},
		{args: []string{"node"}, code: 2, stderr: "anvil: missing command\n\nusage: anvil node COMMAND"},
		{args: []string{"node", "frobnicate", "n1"}, code: 2, stderr: `anvil: unknown command "frobnicate"`},
		{args: []string{"node", "show"}, code: 2, stderr: "anvil: missing NODE\n\nusage: anvil node show NODE"},
		{args: []string{"node", "show", "--wait"}, code: 2, stderr: "flag provided but not defined: -wait"},
		{args: []string{"node", "show", "n1", "n2"}, code: 2, stderr: `unexpected argument "n2"`},
		{args: []string{"node", "show", "--", "-n1"}, code: 2, stderr: `"-n1" cannot be NODE: it starts with "-"`},
		{args: []string{"node", "list", "extra"}, code: 2, stderr: `unexpected argument "extra"`},
		{args: []string{"node", "manage", "--wiat", "n1"}, code: 2, stderr: "flag provided but not defined: -wiat"},
		{args: []string{"node", "manage", "--steps", "f", "n1"}, code: 2, stderr: "flag provided but not defined: -steps"},
		{args: []string{"node", "clean", "n1"}, code: 2, stderr: "anvil: clean needs --steps FILE|-"},
		{args: []string{"node", "step-results", "--json"}, code: 2, stderr: "anvil: missing NODE"},
		{args: []string{"node", "bios"}, code: 2, stderr: "anvil: missing NODE\n\nusage: anvil node bios NODE"},
		{args: []string{"node", "timeline"}, code: 2, stderr: "anvil: missing NODE\n\nusage: anvil node timeline NODE"},
		{args: []string{"node", "nmi"}, code: 2, stderr: "anvil: missing NODE\n\nusage: anvil node nmi NODE"},
		{args: []string{"node", "sel", "n1", "n2"}, code: 2, stderr: `unexpected argument "n2"`},
		{args: []string{"node", "bios", "n1", "n2"}, code: 2, stderr: `unexpected argument "n2"`},
		{args: []string{"node", "firmware", "n1", "--wait"}, code: 2, stderr: "flag provided but not defined: -wait"},
		{args: []string{"node", "firmware", "--json"}, code: 2, stderr: "anvil: missing NODE\n\nusage: anvil node firmware NODE"},
		{args: []string{"erase-records"}, code: 2, stderr: "anvil: missing NODE\n\nusage: anvil erase-records NODE"},
		{args: []string{"erase-records", "--bogus"}, code: 2, stderr: "flag provided but not defined: -bogus"},
		{args: []string{"erase-records", "n1", "--format", "docx"}, code: 2, stderr: `--format "docx": want json, text or pdf`},
		{args: []string{"erase-records", "verify"}, code: 2, stderr: "anvil: missing FILE"},
		{args: []string{"erase-records", "verify", "-"}, code: 2, stderr: `"-" cannot be FILE`},
		{args: []string{"erase-records", "public-key", "extra"}, code: 2, stderr: `unexpected argument "extra"`},

		// Parsed well, the commands connect: here to the missing CA file.
		{args: []string{"node", "show", "n1"}, code: 1, stderr: "anvil: CA file: open /nonexistent/ca.pem"},
		{args: []string{"node", "bios", "n1"}, code: 1, stderr: "anvil: CA file"},
		{args: []string{"node", "firmware", "n1", "--json"}, code: 1, stderr: "anvil: CA file"},
		{args: []string{"erase-records", "n1", "--format", "text"}, code: 1, stderr: "anvil: CA file"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			err := run(t.Context(), tt.args, strings.NewReader(""), &stdout, env)
			code := cli.Exit(&stdout, &stderr, "anvil", err)
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

func newClient(url string) *client.Client { return client.New(url, nil) }

func TestDiskCheckWarnings(t *testing.T) {
	node := map[string]any{"driver_internal_info": map[string]any{"disk_check": map[string]any{
		"step": "deploy.erase_devices", "ok": false, "no_disks": true,
		"missing": []any{map[string]any{"serial": "QM00001", "model": "QEMU HARDDISK", "size": float64(67108864), "from": []any{"inspection"}}}}}}
	assert.Equal(t, []string{
		"disk check before deploy.erase_devices: disk missing: serial QM00001, model QEMU HARDDISK, size 67108864 bytes, from [inspection]",
		"disk check before deploy.erase_devices: no disks found",
	}, diskCheckWarnings(node))
	ok := map[string]any{"driver_internal_info": map[string]any{"disk_check": map[string]any{"ok": true}}}
	assert.Empty(t, diskCheckWarnings(ok))
	assert.Empty(t, diskCheckWarnings(map[string]any{}))
}

func TestShowWarnsOfSecondClaimants(t *testing.T) {
	var out bytes.Buffer
	node := map[string]any{"driver_internal_info": map[string]any{"agent_claims": []any{map[string]any{
		"at": "2026-01-01T00:00:00Z", "via": "lookup", "address": "10.0.0.66", "boot_id": "evil",
		"holder_address": "10.0.0.5", "holder_boot_id": "b1"}}}}
	require.NoError(t, claimWarnings(node, &out))
	assert.Equal(t, "SECURITY: second agent claimant at 2026-01-01T00:00:00Z: lookup from 10.0.0.66 (boot evil) after the boot's secret went to 10.0.0.5 (boot b1); the operation was stopped\n", out.String())
	out.Reset()
	require.NoError(t, claimWarnings(map[string]any{}, &out))
	assert.Empty(t, out.String())
}

// TestCLIService: "anvil node service" runs service steps on an active
// node (the JSON given inline, or with --disable-ramdisk at 1.108) and
// waits for active; a hold step rests the node in service hold, and
// "anvil node unhold" lets it go on.
func TestCLIService(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st, err := sqlite.Open(ctx, ":memory:")
	require.NoError(t, err)
	defer st.Close()
	cond := conductor.New(st, conductor.Config{Host: "cli", CheckInterval: time.Hour}, conductor.FakeDriver{})
	go func() { _ = cond.Run(ctx) }()
	srv := httptest.NewServer(api.New(api.Config{Store: st, Conductor: cond}))
	defer srv.Close()
	env := func(k string) string {
		if k == "ANVIL_URL" {
			return srv.URL
		}
		return ""
	}
	cli := func(stdin string, args ...string) (string, error) {
		var out bytes.Buffer
		err := run(ctx, args, strings.NewReader(stdin), &out, env)
		return out.String(), err
	}
	c := newClient(srv.URL)
	require.NoError(t, c.Do(ctx, "POST", "/v1/nodes", map[string]any{"driver": "fake-hardware", "name": "svc-node",
		"instance_info": map[string]any{"image_source": "http://images.test/os.raw"}}, nil))
	for _, v := range []string{"manage", "provide", "deploy"} {
		out, err := cli("", "node", v, "svc-node", "--wait", "--timeout", "10s")
		require.NoError(t, err, out)
	}
	out, err := cli("", "node", "service", "svc-node", "--steps", `[{"interface":"bios","step":"factory_reset"}]`, "--wait", "--timeout", "10s")
	require.NoError(t, err, out)
	assert.Contains(t, out, "svc-node: service accepted")
	assert.Contains(t, out, "svc-node: active after")
	out, err = cli(`[{"interface":"bios","step":"factory_reset"}]`, "node", "service", "svc-node", "--steps", "-", "--disable-ramdisk", "--wait", "--timeout", "10s")
	require.NoError(t, err, out)
	assert.Contains(t, out, "svc-node: active after")

	out, err = cli(`[{"interface":"bios","step":"hold"},{"interface":"bios","step":"factory_reset"}]`, "node", "service", "svc-node", "--steps", "-")
	require.NoError(t, err, out)
	_, err = c.WaitForState(ctx, "svc-node", "service hold", 5*time.Millisecond, nil)
	require.NoError(t, err)
	n, err := c.GetNode(ctx, "svc-node")
	require.NoError(t, err)
	assert.Equal(t, "bios.hold", client.CurrentStep(n), "the node is read at 1.87: its service_step")
	out, err = cli("", "node", "unhold", "svc-node")
	require.NoError(t, err, out)
	_, err = c.WaitForState(ctx, "svc-node", "active", 5*time.Millisecond, nil)
	require.NoError(t, err)
	out, err = cli("", "node", "events", "svc-node")
	require.NoError(t, err)
	assert.Contains(t, out, "service hold -> servicing (unhold requested)")

	_, err = cli("", "node", "service", "svc-node", "--steps", `[{"interface":"deploy","step":"erase_devices"}]`)
	assert.ErrorContains(t, err, "would write the disks of the instance")
	_, err = cli("", "node", "service", "svc-node")
	assert.ErrorContains(t, err, "service needs --steps FILE|-")
}
