package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := realAgentNode(t, ctx, dir, "ro-node", "52:54:00:aa:bb:02", []string{dev})

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
