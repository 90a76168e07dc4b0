package main

import (
	"fmt"
	"path/filepath"
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
