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
