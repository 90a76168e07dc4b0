package main

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/controller/simagent"
	"github.com/anvil-metal/anvil/controller/store/postgres/pgserver"
)

// TestKilledControllerResumesAtPersistedStep kills the controller with
// SIGKILL while one node is in the middle of cleaning and another in the
// middle of deploying, each with a step running on its agent, and starts
// it again on the same database: each node is shown at its step, and
// continues from there when its agent finishes, no step running twice.
func TestKilledControllerResumesAtPersistedStep(t *testing.T) {
	t.Run("SQLite", func(t *testing.T) {
		testResume(t, "sqlite://"+filepath.Join(t.TempDir(), "anvil.db"))
	})
	t.Run("PostgreSQL", func(t *testing.T) {
		if testing.Short() {
			t.Skip("starts PostgreSQL")
		}
		testResume(t, pgserver.ForTest(t).NewDatabase(t))
	})
}

func testResume(t *testing.T, db string) {
	// A short lease period: the restarted controller is a new lease
	// holder and takes the killed one's nodes over after it.
	args := []string{"--database", db, "--heartbeat-interval", "50ms", "--lease-ttl", "2s", "--timeout-check-interval", "100ms"}
	p := startController(t, args...)
	held := make(chan struct{}) // the running steps finish when it closes
	ac := resumeNode(t, p.URL, "c", "52:54:00:7e:00:01")
	ac.Outcomes["deploy.erase_devices"] = simagent.Outcome{Release: held}
	ad := resumeNode(t, p.URL, "d", "52:54:00:7e:00:02")

	require.Equal(t, 202, send(t, "PUT", p.URL+"/v1/nodes/c/states/provision", `{"target":"provide"}`))
	driveAgent(t, p.URL, ac, "c", agentRuns("deploy.erase_devices"))
	require.Equal(t, 202, send(t, "PUT", p.URL+"/v1/nodes/d/states/provision", `{"target":"provide"}`))
	driveAgent(t, p.URL, ad, "d", resting("available"))
	ad.Outcomes["deploy.write_image"] = simagent.Outcome{Release: held}
	require.Equal(t, 202, send(t, "PUT", p.URL+"/v1/nodes/d/states/provision", `{"target":"active"}`))
	driveAgent(t, p.URL, ad, "d", agentRuns("deploy.write_image"))

	require.NoError(t, p.cmd.Process.Signal(syscall.SIGKILL))
	<-p.done
	p = startController(t, args...)
	ac.API, ad.API = p.URL, p.URL
	_, c := getJSON(t, p.URL, "/v1/nodes/c")
	assert.Equal(t, "clean wait", c["provision_state"])
	assert.Equal(t, "erase_devices", c["clean_step"].(map[string]any)["step"])
	assert.EqualValues(t, 1, c["driver_internal_info"].(map[string]any)["clean_step_index"])
	_, d := getJSON(t, p.URL, "/v1/nodes/d")
	assert.Equal(t, "wait call-back", d["provision_state"])
	assert.Equal(t, "write_image", d["deploy_step"].(map[string]any)["step"])

	close(held)
	driveAgent(t, p.URL, ac, "c", resting("available"))
	driveAgent(t, p.URL, ad, "d", resting("active"))
	assert.Equal(t, []string{"deploy.erase_devices_metadata", "deploy.erase_devices"}, ac.Steps(), "cleaning went on at its step")
	assert.Equal(t, []string{"deploy.erase_devices_metadata", "deploy.erase_devices", "deploy.write_image"}, ad.Steps(),
		"deployment went on at its step")
	for node, step := range map[string]string{"c": "clean step deploy.erase_devices", "d": "deploy step deploy.write_image"} {
		history := historyOf(t, p.URL, node)
		assert.Equal(t, 1, strings.Count(history, step+" started"), "node %s:\n%s", node, history)
		assert.Equal(t, 1, strings.Count(history, step+" finished"), "node %s:\n%s", node, history)
	}
}

// resumeNode creates a manageable fake-hardware node deploying through
// the agent, with a port for mac and an image, and its simulated agent.
func resumeNode(t *testing.T, base, name, mac string) *simagent.Agent {
	t.Helper()
	require.Equal(t, 201, send(t, "POST", base+"/v1/nodes", fmt.Sprintf(`{"driver":"fake-hardware","name":%q,"deploy_interface":"direct",
		"instance_info":{"image_source":"http://127.0.0.1:1/img.raw","image_checksum":"sha256:00"}}`, name)))
	_, n := getJSON(t, base, "/v1/nodes/"+name)
	require.Equal(t, 201, send(t, "POST", base+"/v1/ports", fmt.Sprintf(`{"address":%q,"node_uuid":%q}`, mac, n["uuid"])))
	require.Equal(t, 202, send(t, "PUT", base+"/v1/nodes/"+name+"/states/provision", `{"target":"manage"}`))
	driveAgent(t, base, nil, name, resting("manageable"))
	return simagent.New(base, mac)
}

func resting(state string) func(n map[string]any) bool {
	return func(n map[string]any) bool { return n["provision_state"] == state && n["reservation"] == nil }
}

// agentRuns holds once the agent reports the step running.
func agentRuns(step string) func(n map[string]any) bool {
	return func(n map[string]any) bool {
		dii, _ := n["driver_internal_info"].(map[string]any)
		st, _ := dii["agent_command_status"].(map[string]any)
		cmd, _ := dii["agent_command"].(map[string]any)
		s, _ := cmd["step"].(map[string]any)
		return st["state"] == "RUNNING" && fmt.Sprintf("%v.%v", s["interface"], s["step"]) == step
	}
}

// driveAgent lets the simulated agent (nil: none) look up and heartbeat,
// and boot again when the controller reboots its node, until done holds.
func driveAgent(t *testing.T, base string, a *simagent.Agent, node string, done func(n map[string]any) bool) {
	t.Helper()
	ctx := context.Background()
	var n map[string]any
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		_, n = getJSON(t, base, "/v1/nodes/"+node)
		require.NotContains(t, n["provision_state"], "failed", "last_error: %v", n["last_error"])
		if done(n) {
			return
		}
		if a != nil {
			dii, _ := n["driver_internal_info"].(map[string]any)
			if aw, ok := dii["agent_await"].(map[string]any); ok && aw["old_boot_id"] != "" && aw["old_boot_id"] == dii["agent_boot_id"] && a.Token() != "" {
				a.Boot() // rebooted by the controller: a new boot
			}
			if a.Token() == "" {
				_ = a.Lookup(ctx)
			} else if _, err := a.Heartbeat(ctx); errors.Is(err, simagent.ErrUnauthorized) {
				a.Boot()
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("node %s: condition never held; last: state %v, last_error %v", node, n["provision_state"], n["last_error"])
}

func historyOf(t *testing.T, base, node string) string {
	_, h := getJSON(t, base, "/v1/nodes/"+node+"/history")
	var events []string
	for _, e := range h["history"].([]any) {
		events = append(events, e.(map[string]any)["event"].(string))
	}
	return strings.Join(events, "\n")
}
