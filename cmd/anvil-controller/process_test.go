package main

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestKillAndRestartKeepsEveryNode proves durability with the real binary:
// every change acknowledged before a SIGKILL is there after a restart.
func TestKillAndRestartKeepsEveryNode(t *testing.T) {
	db := "sqlite://" + filepath.Join(t.TempDir(), "anvil.db")
	p := startController(t, "--database", db)
	for i := 0; i < 20; i++ {
		require.Equal(t, 201, send(t, "POST", p.URL+"/v1/nodes", fmt.Sprintf(`{"driver":"fake-hardware","name":"n%d"}`, i)))
	}
	require.Equal(t, 202, send(t, "PUT", p.URL+"/v1/nodes/n7/states/provision", `{"target":"manage"}`))
	require.Eventually(t, func() bool {
		_, n := getJSON(t, p.URL, "/v1/nodes/n7")
		return n["provision_state"] == "manageable"
	}, 10*time.Second, 10*time.Millisecond)
	require.Equal(t, 200, send(t, "PATCH", p.URL+"/v1/nodes/n3", `[{"op":"add","path":"/properties/cpus","value":4}]`))
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGKILL))
	<-p.done

	p = startController(t, "--database", db)
	_, list := getJSON(t, p.URL, "/v1/nodes?limit=1000")
	assert.Len(t, list["nodes"], 20)
	_, n7 := getJSON(t, p.URL, "/v1/nodes/n7")
	assert.Equal(t, "manageable", n7["provision_state"])
	_, n3 := getJSON(t, p.URL, "/v1/nodes/n3")
	assert.Equal(t, map[string]any{"cpus": float64(4)}, n3["properties"])
}

func TestGracefulShutdownOnSIGTERM(t *testing.T) {
	p := startController(t, "--database", "sqlite://:memory:")
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		t.Fatal("controller did not stop on SIGTERM")
	}
	assert.Equal(t, 0, p.cmd.ProcessState.ExitCode(), p.log())
	assert.Contains(t, p.log(), "shutting down")
}

// TestSimulatedAgents runs the real binary in its development mode: a
// fake-hardware node with the direct deploy interface is cleaned and
// deployed by a simulated agent speaking the real protocol over HTTP.
func TestSimulatedAgents(t *testing.T) {
	p := startController(t, "--database", "sqlite://:memory:", "--simulate-agents", "--heartbeat-interval", "100ms")
	require.Equal(t, 201, send(t, "POST", p.URL+"/v1/nodes", `{"driver":"fake-hardware","name":"sim","deploy_interface":"direct",
		"instance_info":{"image_source":"http://127.0.0.1:1/img.raw","image_checksum":"sha256:00"}}`))
	_, n := getJSON(t, p.URL, "/v1/nodes/sim")
	require.Equal(t, 201, send(t, "POST", p.URL+"/v1/ports", fmt.Sprintf(`{"address":"52:54:00:51:00:01","node_uuid":"%s"}`, n["uuid"])))
	walk := func(verb, want string) {
		t.Helper()
		require.Equal(t, 202, send(t, "PUT", p.URL+"/v1/nodes/sim/states/provision", `{"target":"`+verb+`"}`))
		require.Eventually(t, func() bool {
			_, n := getJSON(t, p.URL, "/v1/nodes/sim")
			require.NotContains(t, n["provision_state"], "failed", "last_error: %v\n%s", n["last_error"], p.log())
			return n["provision_state"] == want && n["reservation"] == nil
		}, 60*time.Second, 50*time.Millisecond, "%s never reached %s", verb, want)
	}
	walk("manage", "manageable")
	walk("provide", "available")
	walk("active", "active")
	_, h := getJSON(t, p.URL, "/v1/nodes/sim/history")
	var events []string
	for _, e := range h["history"].([]any) {
		events = append(events, e.(map[string]any)["event"].(string))
	}
	all := strings.Join(events, "\n")
	assert.Contains(t, all, "clean step deploy.erase_devices_metadata finished")
	assert.Contains(t, all, "clean step deploy.erase_devices finished")
	assert.Contains(t, all, "deploy step deploy.write_image finished")

	// The deployed node rebooted from its disk, as a real one boots its
	// instance: no simulated agent is left looking itself up.
	time.Sleep(time.Second)
	assert.NotContains(t, p.log(), "lookup refused", "an agent kept running after the deploy")
	assert.Contains(t, p.log(), "simulated node booted its instance from disk")
}

// TestSecondControllerOnOneSQLiteFileIsRefused: two controllers on one
// SQLite file would both work the same nodes; the second refuses to start
// and says why.
func TestSecondControllerOnOneSQLiteFileIsRefused(t *testing.T) {
	db := "sqlite://" + filepath.Join(t.TempDir(), "anvil.db")
	startController(t, "--database", db)
	bin, err := buildOnce()
	require.NoError(t, err)
	out, err := exec.Command(bin, "--listen", "127.0.0.1:0", "--database", db).CombinedOutput()
	require.Error(t, err, "the second controller must not start")
	assert.Contains(t, string(out), "in use by another anvil-controller")
}
