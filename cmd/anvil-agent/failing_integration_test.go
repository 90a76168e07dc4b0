package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/controller/client"
)

// TestRealAgentFailingStep: a read-only loop device on the allow-list makes
// the real agent's erase refuse it (skip_read_only is off by default, as in
// IPA), and the controller must end in clean failed naming the step, the
// device and the agent's error type, with maintenance and fault set.
func TestRealAgentFailingStep(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to attach loop devices (CI runs as root)")
	}
	dir := t.TempDir()
	img := filepath.Join(dir, "ro.img")
	require.NoError(t, os.WriteFile(img, nil, 0o600))
	require.NoError(t, os.Truncate(img, 16<<20))
	out, err := exec.Command("losetup", "--find", "--show", "--read-only", img).CombinedOutput()
	if err != nil {
		t.Skipf("cannot attach a loop device here: %v: %s", err, out)
	}
	dev := strings.TrimSpace(string(out))
	t.Cleanup(func() { _ = exec.Command("losetup", "-d", dev).Run() })

	bins := t.TempDir()
	for _, pkg := range []string{"../anvil-controller", "."} {
		cmd := exec.Command("go", "build", "-o", bins+"/", pkg)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		b, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s", b)
	}
	ctl := startProc(t, "controller", regexp.MustCompile(`anvil-controller listening"? addr=(\S+)`),
		bins+"/anvil-controller", "--listen", "127.0.0.1:0", "--database", "sqlite://"+dir+"/anvil.db", "--heartbeat-interval", "200ms")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := client.New("http://"+ctl, nil)
	node, err := c.CreateNode(ctx, map[string]any{"driver": "fake-hardware", "name": "ro-node", "deploy_interface": "direct"})
	require.NoError(t, err)
	require.NoError(t, c.CreatePort(ctx, node.UUID, "52:54:00:aa:bb:02"))
	require.NoError(t, c.Provision(ctx, "ro-node", "manage", nil))
	_, err = c.WaitForState(ctx, "ro-node", "manageable", 50*time.Millisecond, nil)
	require.NoError(t, err)
	startProc(t, "agent", nil, bins+"/anvil-agent", "--api", "http://"+ctl, "--macs", "52:54:00:aa:bb:02",
		"--devices", dev, "--root", "/", "--cmdline", "/dev/null", "--log-file", dir+"/agent.log")

	require.NoError(t, c.Provision(ctx, "ro-node", "provide", nil))
	n, err := c.WaitForState(ctx, "ro-node", "available", 100*time.Millisecond, nil)
	require.Error(t, err, "cleaning a read-only device must fail")
	require.NotNil(t, n)
	assert.Equal(t, "clean failed", n.ProvisionState)
	require.NotNil(t, n.LastError)
	// as in IPA, the metadata wipe skips read-only devices; the full erase refuses them
	assert.Contains(t, *n.LastError, "Clean step deploy.erase_devices failed")
	assert.Contains(t, *n.LastError, "BlockDeviceEraseError")
	assert.Contains(t, *n.LastError, dev)
	assert.Contains(t, *n.LastError, "read-only")
	assert.True(t, n.Maintenance)
	assert.Equal(t, "erase_devices", n.CleanStep["step"], "the failed step stays visible")
	t.Logf("last_error: %s", *n.LastError)
}
