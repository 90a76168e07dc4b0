//go:build legacygen

package api

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/controller/simagent"
)

// TestGenerateLegacyFixture writes testdata/legacy/anvil.db, a database as
// the release before the typed operation record (working state kept in
// driver_internal_info) left it, with nodes resting and in the middle of
// cleaning and deploying, and testdata/legacy/<node>.json, what the API
// answered for each of them. It was run once, at the commit that added it,
// with that release's code:
//
//	go test -tags legacygen -run TestGenerateLegacyFixture ./controller/api/
func TestGenerateLegacyFixture(t *testing.T) {
	dir, err := filepath.Abs("testdata/legacy")
	require.NoError(t, err)
	db := filepath.Join(dir, "anvil.db")
	for _, f := range []string{db, db + "-wal", db + "-shm"} {
		_ = os.Remove(f)
	}
	e := newEnvWith(t, agentConfig(), db)
	ctx := context.Background()
	img := map[string]any{"instance_info": map[string]any{"image_source": "http://127.0.0.1:1/img.raw", "image_checksum": "sha256:00"}}
	held := make(chan struct{}) // never closed: the steps that use it stay running

	// idle: no agent, nothing in flight.
	e.createNode("idle", nil)
	require.Equal(t, 202, e.provision("idle", "manage", nil).status)
	e.waitState("idle", "manageable")

	// cleaned: automated cleaning through the agent finished; the agent's
	// catalogue, version and boot timings stay.
	a := legacyAgent(e, "cleaned", "52:54:00:ee:00:01", nil)
	require.Equal(t, 202, e.provision("cleaned", "provide", nil).status)
	e.drive(a, "cleaned", "available", nil)

	// clean-mid: automated cleaning, the second step running on the agent.
	a = legacyAgent(e, "clean-mid", "52:54:00:ee:00:02", nil)
	a.Outcomes["deploy.erase_devices"] = simagent.Outcome{Release: held}
	require.Equal(t, 202, e.provision("clean-mid", "provide", nil).status)
	driveUntil(e, a, "clean-mid", running("deploy.erase_devices"))

	// manual-mid: manual cleaning with user steps, the second one running.
	a = legacyAgent(e, "manual-mid", "52:54:00:ee:00:03", nil)
	a.Outcomes["deploy.erase_devices"] = simagent.Outcome{Release: held}
	require.Equal(t, 202, e.provision("manual-mid", "clean", map[string]any{"clean_steps": []map[string]any{
		{"interface": "deploy", "step": "erase_devices_metadata", "args": map[string]any{"erase_shared_filesystems": true}},
		{"interface": "deploy", "step": "erase_devices", "args": map[string]any{"iterations": 2}}}}).status)
	driveUntil(e, a, "manual-mid", running("deploy.erase_devices"))

	// deploy-mid: deploying, write_image running on the agent.
	a = legacyAgent(e, "deploy-mid", "52:54:00:ee:00:04", img)
	require.Equal(t, 202, e.provision("deploy-mid", "provide", nil).status)
	e.drive(a, "deploy-mid", "available", nil)
	a.Outcomes["deploy.write_image"] = simagent.Outcome{Release: held}
	require.Equal(t, 202, e.provision("deploy-mid", "active", map[string]any{"deploy_steps": []map[string]any{
		{"interface": "deploy", "step": "erase_devices_metadata", "priority": 90, "args": map[string]any{}}}}).status)
	driveUntil(e, a, "deploy-mid", running("deploy.write_image"))

	// clean-failed: a clean step failed; the node is in maintenance.
	a = legacyAgent(e, "clean-failed", "52:54:00:ee:00:05", nil)
	a.Outcomes["deploy.erase_devices_metadata"] = simagent.Outcome{Fail: "disk on fire", Summary: "sda: failed"}
	require.Equal(t, 202, e.provision("clean-failed", "provide", nil).status)
	e.drive(a, "clean-failed", "clean failed", nil)

	// booting: rebooted into the ramdisk for cleaning, which has not called
	// back; its iPXE script was fetched (a boot nonce is outstanding).
	legacyAgent(e, "booting", "52:54:00:ee:00:06", nil)
	require.Equal(t, 202, e.provision("booting", "provide", nil).status)
	require.Eventually(t, func() bool {
		n := e.do("GET", "/v1/nodes/booting", latest, nil).json(t)
		return n["provision_state"] == "clean wait" && e.cond.Idle()
	}, 10*time.Second, 5*time.Millisecond)
	_, err = e.cond.BootNonce(ctx, "booting")
	require.NoError(t, err)

	for _, name := range legacyNodes {
		body := e.do("GET", "/v1/nodes/"+name, latest, nil).body
		body = []byte(strings.ReplaceAll(string(body), e.srv.URL, "http://anvil.test"))
		require.NoError(t, os.WriteFile(filepath.Join(dir, name+".json"), body, 0o644))
	}
	e.stop()
	// One self-contained file (no WAL beside it), as a backup would be.
	raw, err := sql.Open("sqlite", "file:"+db)
	require.NoError(t, err)
	_, err = raw.Exec("VACUUM INTO ?", db+".tmp")
	require.NoError(t, err)
	require.NoError(t, raw.Close())
	for _, f := range []string{db + "-wal", db + "-shm"} {
		_ = os.Remove(f)
	}
	require.NoError(t, os.Rename(db+".tmp", db))
}

// legacyAgent creates a manageable agent node with a port for mac and its
// simulated agent.
func legacyAgent(e *testEnv, name, mac string, extra map[string]any) *simagent.Agent {
	body := map[string]any{"deploy_interface": "direct", "inspect_interface": "agent"}
	for k, v := range extra {
		body[k] = v
	}
	n := e.createNode(name, body)
	require.Equal(e.t, 201, e.do("POST", "/v1/ports", latest, map[string]any{"address": mac, "node_uuid": n["uuid"]}).status)
	require.Equal(e.t, 202, e.provision(name, "manage", nil).status)
	e.waitState(name, "manageable")
	return simagent.New(e.srv.URL, mac)
}

// running is true once the agent reports the step as running.
func running(step string) func(n map[string]any) bool {
	return func(n map[string]any) bool {
		dii, _ := n["driver_internal_info"].(map[string]any)
		st, _ := dii["agent_command_status"].(map[string]any)
		cmd, _ := dii["agent_command"].(map[string]any)
		s, _ := cmd["step"].(map[string]any)
		return st["state"] == "RUNNING" && fmt.Sprintf("%v.%v", s["interface"], s["step"]) == step
	}
}
