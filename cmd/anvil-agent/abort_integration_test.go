package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRealAgentAbortsImageWrite: abort in wait call-back (an anvil
// extension) with the real controller and agent binaries. The image server
// sends half an image and then nothing; the operator aborts while the agent
// writes it to a loop device. The agent stops, zeroes the disk's first MiB
// and reports its partial result; the node lands in deploy failed, not
// powered off, and the agent goes on heartbeating.
func TestRealAgentAbortsImageWrite(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to attach loop devices (CI runs as root)")
	}
	if _, err := exec.LookPath("losetup"); err != nil {
		t.Skip("losetup (util-linux) is not installed")
	}
	dir := t.TempDir()
	const size = 32 << 20
	file := filepath.Join(dir, "disk.img")
	require.NoError(t, os.WriteFile(file, nil, 0o600))
	require.NoError(t, os.Truncate(file, size))
	writePattern(t, file, size)
	out, err := exec.Command("losetup", "--find", "--show", "--direct-io=on", file).CombinedOutput()
	if err != nil {
		t.Skipf("cannot attach a loop device here: %v: %s", err, out)
	}
	dev := strings.TrimSpace(string(out))
	t.Cleanup(func() { _ = exec.Command("losetup", "-d", dev).Run() })

	img := make([]byte, 16<<20)
	_, _ = rand.Read(img)
	sum := sha256.Sum256(img)
	const sent = 8 << 20
	flushed := make(chan struct{}, 1)
	imgSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(len(img)))
		_, _ = w.Write(img[:sent])
		w.(http.Flusher).Flush()
		select {
		case flushed <- struct{}{}:
		default:
		}
		<-r.Context().Done() // the rest never comes: only the abort ends the write
	}))
	defer imgSrv.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := realAgentNode(t, ctx, dir, "abort-node", "52:54:00:aa:bb:03", []string{dev})
	patch := []map[string]any{
		{"op": "replace", "path": "/automated_clean", "value": false},
		{"op": "add", "path": "/instance_info/image_source", "value": imgSrv.URL + "/disk.raw"},
		{"op": "add", "path": "/instance_info/image_checksum", "value": "sha256:" + hex.EncodeToString(sum[:])},
		{"op": "add", "path": "/properties/root_device", "value": map[string]any{"name": dev}},
	}
	require.NoError(t, c.Do(ctx, "PATCH", "/v1/nodes/abort-node", patch, nil))
	require.NoError(t, c.Provision(ctx, "abort-node", "provide", nil))
	_, err = c.WaitForState(ctx, "abort-node", "available", 100*time.Millisecond, nil)
	require.NoError(t, err)
	require.NoError(t, c.Provision(ctx, "abort-node", "active", nil))
	select {
	case <-flushed:
	case <-ctx.Done():
		t.Fatalf("the agent never fetched the image; agent log:\n%s", tail(dir+"/agent.log"))
	}
	time.Sleep(500 * time.Millisecond) // the first chunks reach the disk
	n, err := c.GetNode(ctx, "abort-node")
	require.NoError(t, err)
	require.Equal(t, "wait call-back", n.ProvisionState)
	require.Equal(t, "write_image", n.DeployStep["step"])
	require.NoError(t, c.Provision(ctx, "abort-node", "abort", nil))
	start := time.Now()
	n, err = c.WaitForState(ctx, "abort-node", "deploy failed", 50*time.Millisecond, nil)
	require.NoError(t, err, "agent log:\n%s", tail(dir+"/agent.log"))
	t.Logf("abort to deploy failed: %s; last_error: %s", time.Since(start).Round(time.Millisecond), *n.LastError)
	assert.Less(t, time.Since(start), 20*time.Second)
	assert.Contains(t, *n.LastError, "Deploy step deploy.write_image aborted by operator: the agent stopped it; partial result: raw image "+imgSrv.URL+"/disk.raw not written to "+dev)
	assert.Equal(t, "power on", *n.PowerState, "the controller did not power the node off")

	var page struct {
		Results []struct {
			Step    string `json:"step"`
			Outcome string `json:"outcome"`
			Error   string `json:"error"`
			Result  struct {
				Image struct {
					BytesWritten int64 `json:"bytes_written"`
				} `json:"image"`
			} `json:"result"`
		} `json:"results"`
	}
	require.NoError(t, c.Do(ctx, "GET", "/v1/nodes/abort-node/steps/results", nil, &page))
	require.NotEmpty(t, page.Results)
	r := page.Results[0]
	assert.Equal(t, "deploy.write_image", r.Step)
	assert.Equal(t, "aborted", r.Outcome)
	assert.Positive(t, r.Result.Image.BytesWritten, "the partial result names the bytes written")
	assert.Contains(t, r.Error, "aborted after writing "+strconv.FormatInt(r.Result.Image.BytesWritten, 10)+" of "+strconv.Itoa(len(img))+" bytes")

	data, err := os.ReadFile(file)
	require.NoError(t, err)
	assert.Equal(t, make([]byte, 1<<20), data[:1<<20], "the first MiB was zeroed: the partial image cannot boot")
	assert.True(t, bytes.Equal(img[1<<20:2<<20], data[1<<20:2<<20]), "the write had reached the disk before the abort")

	// The agent answers the next heartbeats: its token was not revoked.
	last := func() string {
		n, err := c.GetNode(ctx, "abort-node")
		require.NoError(t, err)
		s, _ := n.DriverInternalInfo["agent_last_heartbeat"].(string)
		return s
	}
	before := last()
	assert.Eventually(t, func() bool { return last() != before }, 10*time.Second, 100*time.Millisecond, "the agent heartbeats after the abort")
}
