//go:build ironic

// Minutes of a real Ironic: run by make test (and make test-ironic), kept
// out of make test-quick's five-minute budget.

package main

import (
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
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/agent/ipa/ipatest"
)

// TestStockIronicDrivesTheAgent runs Debian's Ironic 21.4 (standalone,
// noauth, SQLite, fake-hardware with the direct deploy interface) and the
// real agent binary booted "with Ironic's kernel arguments" (a --cmdline
// file), outside a VM: its device allow-list holds one loop device the
// test made, so no other disk of the host can be written. Ironic's own
// baremetal CLI drives it through automated cleaning, manual cleaning, a
// whole-disk deploy and a deploy that fails its checksum; the host then
// reads the loop device's backing file. Each phase starts a fresh agent,
// as each operation boots a fresh ramdisk.
func TestStockIronicDrivesTheAgent(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to attach a loop device (CI runs as root)")
	}
	if why := ipatest.Available(); why != "" {
		t.Skip(why)
	}
	dir := t.TempDir()
	const size = 64 << 20
	backing := filepath.Join(dir, "disk.img")
	require.NoError(t, os.WriteFile(backing, nil, 0o600))
	require.NoError(t, os.Truncate(backing, size))
	writePattern(t, backing, size)
	out, err := exec.Command("losetup", "--find", "--show", "--direct-io=on", backing).CombinedOutput()
	if err != nil {
		t.Skipf("cannot attach a loop device here: %v: %s", err, out)
	}
	dev := strings.TrimSpace(string(out))
	t.Cleanup(func() { _ = exec.Command("losetup", "-d", dev).Run() })

	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	ir := ipatest.Start(t, ipatest.Options{HeartbeatTimeout: 6})
	const mac = "52:54:00:1b:0c:01"
	uuid := ir.MustBaremetal(ctx, "node", "create", "--driver", "fake-hardware", "--name", "ipa-node",
		"--deploy-interface", "direct", "--boot-interface", "fake", "--power-interface", "fake",
		"--management-interface", "noop", "--property", fmt.Sprintf(`root_device={"name": "%s"}`, dev),
		"-f", "value", "-c", "uuid")
	ir.MustBaremetal(ctx, "port", "create", mac, "--node", uuid)
	ir.MustBaremetal(ctx, "node", "manage", "ipa-node", "--wait", "60")

	bin := buildAgent(t)
	agentPort := ipatest.FreePort(t)
	cmdline := filepath.Join(dir, "cmdline")
	require.NoError(t, os.WriteFile(cmdline, []byte(fmt.Sprintf(
		"console=ttyS0 ipa-api-url=%s ipa-advertise-host=127.0.0.1 ipa-advertise-port=%d ipa-listen-host=127.0.0.1 ipa-listen-port=%d ipa-global-request-id=req-anvil-test\n",
		ir.URL, agentPort, agentPort)), 0o600))
	var logs []string
	bootAgent := func(phase string) func() {
		log := filepath.Join(dir, "agent-"+phase+".log")
		logs = append(logs, log)
		return startAgentProc(t, bin, "--cmdline", cmdline, "--macs", mac, "--devices", dev, "--log-file", log)
	}
	agentLog := func() string {
		var b strings.Builder
		for _, l := range logs {
			b.WriteString(tail(l))
		}
		return b.String()
	}
	wait := func(what string, args ...string) time.Duration {
		start := time.Now()
		_, err := ir.Baremetal(ctx, args...)
		require.NoError(t, err, "%s; last_error: %s\nagent log:\n%s\nironic log:\n%s", what,
			ir.Field(ctx, "ipa-node", "last_error"), agentLog(), ir.LogTail(3000))
		d := time.Since(start).Round(time.Millisecond)
		t.Logf("%s: %s", what, d)
		return d
	}

	// 1. provide: automated cleaning runs erase_devices_metadata (99)
	// and erase_devices (10) from the agent's step list.
	stop := bootAgent("clean")
	wait("automated cleaning (provide)", "node", "provide", "ipa-node", "--wait", "300")
	stop()
	data, err := os.ReadFile(backing)
	require.NoError(t, err)
	assert.False(t, bytes.Contains(data, []byte("EFI PART")), "a GPT header survived automated cleaning")
	assert.Equal(t, -1, bytes.IndexByte(data, 0x5a), "the test pattern survived erase_devices")
	assert.Equal(t, "available", ir.Field(ctx, "ipa-node", "provision_state"))

	// 2. manual cleaning with erase_devices_metadata only: the GPT
	// headers go, the data in the middle of the disk stays.
	writePattern(t, backing, size)
	ir.MustBaremetal(ctx, "node", "manage", "ipa-node", "--wait", "60")
	stop = bootAgent("manual-clean")
	wait("manual cleaning (erase_devices_metadata)", "node", "clean", "ipa-node", "--wait", "300",
		"--clean-steps", `[{"interface": "deploy", "step": "erase_devices_metadata"}]`)
	stop()
	data, err = os.ReadFile(backing)
	require.NoError(t, err)
	assert.False(t, bytes.Contains(data, []byte("EFI PART")), "erase_devices_metadata left a GPT header")
	assert.Equal(t, byte(0x5a), data[size/2], "erase_devices_metadata is not a full erase")
	assert.Equal(t, "manageable", ir.Field(ctx, "ipa-node", "provision_state"))

	// 3. deploy a whole-disk image over HTTP with a SHA-256 in
	// instance_info.
	ir.MustBaremetal(ctx, "node", "set", "ipa-node", "--no-automated-clean")
	ir.MustBaremetal(ctx, "node", "provide", "ipa-node", "--wait", "60")
	img := make([]byte, 5<<20+512)
	_, _ = rand.Read(img)
	sum := sha256.Sum256(img)
	imgSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", fmt.Sprint(len(img)))
		if r.Method != http.MethodHead {
			_, _ = w.Write(img)
		}
	}))
	defer imgSrv.Close()
	ir.MustBaremetal(ctx, "node", "set", "ipa-node", "--instance-info", "image_source="+imgSrv.URL+"/disk.raw",
		"--instance-info", "image_os_hash_algo=sha256", "--instance-info", "image_os_hash_value="+hex.EncodeToString(sum[:]))
	stop = bootAgent("deploy")
	wait("deploy of a 5 MiB whole-disk image", "node", "deploy", "ipa-node", "--wait", "300")
	stop()
	data, err = os.ReadFile(backing)
	require.NoError(t, err)
	assert.True(t, bytes.Equal(img, data[:len(img)]), "the loop device holds the image")
	assert.Equal(t, "active", ir.Field(ctx, "ipa-node", "provision_state"))

	// 4. a wrong checksum: deploy failed, with the agent's words in
	// last_error.
	ir.MustBaremetal(ctx, "node", "undeploy", "ipa-node", "--wait", "120")
	bad := sha256.Sum256([]byte("not the image"))
	// Tearing down wiped instance_info.
	ir.MustBaremetal(ctx, "node", "set", "ipa-node", "--instance-info", "image_source="+imgSrv.URL+"/disk.raw",
		"--instance-info", "image_os_hash_algo=sha256", "--instance-info", "image_os_hash_value="+hex.EncodeToString(bad[:]))
	stop = bootAgent("bad-checksum")
	start := time.Now()
	_, err = ir.Baremetal(ctx, "node", "deploy", "ipa-node", "--wait", "300")
	stop()
	require.Error(t, err, "a deploy with a wrong checksum must fail")
	t.Logf("failed deploy: %s", time.Since(start).Round(time.Millisecond))
	assert.Equal(t, "deploy failed", ir.Field(ctx, "ipa-node", "provision_state"))
	lastErr := ir.Field(ctx, "ipa-node", "last_error")
	t.Logf("last_error after the bad checksum: %s", lastErr)
	assert.Contains(t, lastErr, "Deploy step deploy.write_image failed")
	assert.Contains(t, lastErr, "checksum mismatch: image is sha256:"+hex.EncodeToString(sum[:])+", expected sha256:"+hex.EncodeToString(bad[:]))

	// What Ironic sent, from its own log, and what we did not know.
	sent := ir.AgentCommands()
	t.Logf("commands Ironic sent: %s", ipatest.FormatCounts(sent))
	for _, c := range []string{"clean.get_clean_steps", "clean.execute_clean_step", "deploy.get_deploy_steps",
		"deploy.execute_deploy_step", "standby.get_partition_uuids", "image.install_bootloader", "standby.power_off"} {
		assert.Positive(t, sent[c], "Ironic never sent %s", c)
	}
	unknown := regexp.MustCompile(`ipa: unknown command.* command=(\S+)`).FindAllStringSubmatch(agentLog(), -1)
	t.Logf("commands answered \"unknown command\": %d %v", len(unknown), unknown)
	assert.Empty(t, unknown)
}

// startAgentProc starts the agent and returns a function that stops it
// (also run at the end of the test).
func startAgentProc(t *testing.T, bin string, args ...string) func() {
	t.Helper()
	cmd := exec.Command(bin, args...)
	require.NoError(t, cmd.Start())
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	stop := func() {
		select {
		case <-done:
			return
		default:
		}
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	}
	t.Cleanup(stop)
	return stop
}
