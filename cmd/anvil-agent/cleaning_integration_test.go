package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/controller/client"
)

// TestAgentCleansLoopDevicesThroughTheController runs the real controller
// and the real agent binary (no VM) and lets automated cleaning erase two
// loop devices that the test filled with a pattern and a GPT header. The
// agent runs outside the ramdisk with an allow-list of just those devices,
// so no other disk of the host can be touched. Afterwards the host reads the
// backing files: nothing the test wrote may remain.
func TestAgentCleansLoopDevicesThroughTheController(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to attach loop devices (CI runs as root)")
	}
	if _, err := exec.LookPath("losetup"); err != nil {
		t.Skip("losetup (util-linux) is not installed")
	}
	dir := t.TempDir()
	const size = 32 << 20
	var devs, files []string
	for i := 0; i < 2; i++ {
		f := filepath.Join(dir, fmt.Sprintf("disk%d.img", i))
		require.NoError(t, os.WriteFile(f, nil, 0o600))
		require.NoError(t, os.Truncate(f, size))
		writePattern(t, f, size)
		out, err := exec.Command("losetup", "--find", "--show", "--direct-io=on", f).CombinedOutput()
		if err != nil {
			t.Skipf("cannot attach a loop device here: %v: %s", err, out)
		}
		dev := strings.TrimSpace(string(out))
		t.Cleanup(func() { _ = exec.Command("losetup", "-d", dev).Run() })
		devs, files = append(devs, dev), append(files, f)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := realAgentNode(t, ctx, dir, "loop-node", "52:54:00:aa:bb:01", devs)
	require.NoError(t, c.Provision(ctx, "loop-node", "provide", nil))
	start := time.Now()
	n, err := c.WaitForState(ctx, "loop-node", "available", 100*time.Millisecond, nil)
	require.NoError(t, err, "cleaning failed; agent log:\n%s", tail(dir+"/agent.log"))
	t.Logf("automated cleaning of 2 x %d MiB loop devices took %s", size>>20, time.Since(start).Round(time.Millisecond))
	assert.Equal(t, "power off", *n.PowerState)

	for _, f := range files {
		data, err := os.ReadFile(f)
		require.NoError(t, err)
		assert.False(t, bytes.Contains(data, []byte("EFI PART")), "%s: a GPT header survived", f)
		assert.Equal(t, -1, bytes.IndexByte(data, 0x5a), "%s: the test pattern survived", f)
	}
	hist, err := c.History(ctx, "loop-node")
	require.NoError(t, err)
	var events []string
	for _, e := range hist {
		events = append(events, e.Event)
	}
	all := strings.Join(events, "\n")
	assert.Contains(t, all, "clean step deploy.erase_devices_metadata finished")
	assert.Contains(t, all, "clean step deploy.erase_devices finished")
	// What was done to each disk is in the history, in the agent's words.
	for _, dev := range devs {
		assert.Regexp(t, `clean step deploy.erase_devices_metadata finished: .*`+dev+` metadata wiped \(removed gpt, gpt-backup`, all)
		assert.Regexp(t, `clean step deploy.erase_devices finished: .*`+dev+` erased by \w+, verified`, all)
	}

	// Deploy: the agent streams an image over HTTP, checks its sha256 and
	// writes it to the loop device named by the root device hint.
	img := make([]byte, 4<<20)
	_, _ = rand.Read(img)
	sum := sha256.Sum256(img)
	imgSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write(img) }))
	defer imgSrv.Close()
	patch := []map[string]any{
		{"op": "add", "path": "/instance_info/image_source", "value": imgSrv.URL + "/disk.raw"},
		{"op": "add", "path": "/instance_info/image_checksum", "value": "sha256:" + hex.EncodeToString(sum[:])},
		{"op": "add", "path": "/properties/root_device", "value": map[string]any{"name": devs[1]}},
	}
	require.NoError(t, c.Do(ctx, "PATCH", "/v1/nodes/loop-node", patch, nil))
	require.NoError(t, c.Provision(ctx, "loop-node", "active", nil))
	start = time.Now()
	_, err = c.WaitForState(ctx, "loop-node", "active", 100*time.Millisecond, nil)
	require.NoError(t, err, "deploy failed; agent log:\n%s", tail(dir+"/agent.log"))
	t.Logf("deploy of a 4 MiB image to a loop device took %s", time.Since(start).Round(time.Millisecond))
	got, err := os.ReadFile(files[1])
	require.NoError(t, err)
	assert.True(t, bytes.Equal(img, got[:len(img)]), "the loop device holds the image")
	first, err := os.ReadFile(files[0])
	require.NoError(t, err)
	assert.False(t, bytes.Equal(img[:4096], first[:4096]), "the other device was not written")
	hist, err = c.History(ctx, "loop-node")
	require.NoError(t, err)
	var deployed bool
	for _, e := range hist {
		deployed = deployed || strings.HasPrefix(e.Event, "deploy step deploy.write_image finished: raw image "+imgSrv.URL+"/disk.raw (4.2 MB downloaded, sha256 verified) written to "+devs[1])
	}
	assert.True(t, deployed, "the history says which image went where")
}

// writePattern fills the start, the middle and the end of a disk image with
// 0x5a and puts GPT headers at both ends.
func writePattern(t *testing.T, path string, size int64) {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	require.NoError(t, err)
	defer f.Close()
	block := bytes.Repeat([]byte{0x5a}, 1<<20)
	for _, off := range []int64{0, size / 2, size - 1<<20} {
		_, err := f.WriteAt(block, off)
		require.NoError(t, err)
	}
	_, err = f.WriteAt([]byte("EFI PART"), 512)
	require.NoError(t, err)
	_, err = f.WriteAt([]byte("EFI PART"), size-512)
	require.NoError(t, err)
}

// realAgentNode builds both binaries, starts the controller with its
// database in dir, enrols a manageable fake-hardware node with the direct
// deploy interface and a port for mac, and starts the real agent outside
// the ramdisk with only devs on its allow-list.
func realAgentNode(t *testing.T, ctx context.Context, dir, name, mac string, devs []string) *client.Client {
	t.Helper()
	bins := t.TempDir()
	for _, pkg := range []string{"../anvil-controller", "."} {
		cmd := exec.Command("go", "build", "-o", bins+"/", pkg)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s", out)
	}
	ctl := startProc(t, "controller", regexp.MustCompile(`anvil-controller listening"? addr=(\S+)`),
		bins+"/anvil-controller", "--listen", "127.0.0.1:0", "--database", "sqlite://"+dir+"/anvil.db",
		"--heartbeat-interval", "200ms")
	c := client.New("http://"+ctl, nil)
	node, err := c.CreateNode(ctx, map[string]any{"driver": "fake-hardware", "name": name, "deploy_interface": "direct"})
	require.NoError(t, err)
	require.NoError(t, c.CreatePort(ctx, node.UUID, mac))
	require.NoError(t, c.Provision(ctx, name, "manage", nil))
	_, err = c.WaitForState(ctx, name, "manageable", 50*time.Millisecond, nil)
	require.NoError(t, err)
	startProc(t, "agent", nil, bins+"/anvil-agent", "--api", "http://"+ctl, "--macs", mac,
		"--devices", strings.Join(devs, ","), "--root", "/", "--cmdline", "/dev/null", "--log-file", dir+"/agent.log")
	return c
}

// startProc starts a binary as a child of the test and stops it at the
// end; with addrRE it returns the address the process logs.
func startProc(t *testing.T, name string, addrRE *regexp.Regexp, bin string, args ...string) string {
	t.Helper()
	cmd := exec.Command(bin, args...)
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if addrRE != nil {
				if m := addrRE.FindStringSubmatch(sc.Text()); m != nil {
					select {
					case addr <- m[1]:
					default:
					}
				}
			}
		}
	}()
	if addrRE == nil {
		return ""
	}
	select {
	case a := <-addr:
		return a
	case <-done:
		t.Fatalf("%s exited at start", name)
	case <-time.After(30 * time.Second):
		t.Fatalf("%s did not start", name)
	}
	return ""
}

func tail(path string) string {
	b, _ := os.ReadFile(path)
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}
