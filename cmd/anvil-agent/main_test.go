package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/anvil-metal/anvil/hardware/generic"
	"github.com/anvil-metal/anvil/protocol"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const nodeUUID = "fe5d8075-6b0d-4b5e-9d1c-4b7c1b2d9e01"

// controller is a minimal fake of the controller's agent endpoints.
type controller struct {
	srv *httptest.Server

	mu         sync.Mutex
	lookups    []string // raw queries
	heartbeats []*protocol.Heartbeat
	queue      []*protocol.Command // each sent once, in order
	invalid    []string
}

func newController(t *testing.T) *controller {
	c := &controller{}
	c.srv = httptest.NewServer(http.HandlerFunc(c.serve))
	t.Cleanup(c.srv.Close)
	return c
}

func (c *controller) serve(w http.ResponseWriter, r *http.Request) {
	c.mu.Lock()
	defer c.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	switch {
	case r.URL.Path == protocol.LookupPath:
		c.lookups = append(c.lookups, r.URL.RawQuery)
		_ = json.NewEncoder(w).Encode(protocol.LookupResponse{
			Node:   protocol.LookupNode{UUID: nodeUUID, Properties: map[string]any{}, InstanceInfo: map[string]any{}},
			Config: protocol.AgentConfig{HeartbeatTimeout: 300, HeartbeatInterval: 0.05, AgentToken: "t0123456789abcdefghijklmnopqrstuvwxyzABCDEF", AgentTokenRequired: true},
		})
	case r.URL.Path == protocol.HeartbeatPath+nodeUUID:
		hb, err := protocol.DecodeHeartbeat(r.Body)
		if err != nil {
			c.invalid = append(c.invalid, err.Error())
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		c.heartbeats = append(c.heartbeats, hb)
		resp := protocol.HeartbeatResponse{HeartbeatInterval: 0.05}
		if hb.Command != nil && hb.Command.State != protocol.CommandRunning {
			resp.Ack = hb.Command.ID
		}
		if (hb.Command == nil || hb.Command.State != protocol.CommandRunning) && len(c.queue) > 0 {
			resp.Command, c.queue = c.queue[0], c.queue[1:]
		}
		_ = json.NewEncoder(w).Encode(resp)
	default:
		http.NotFound(w, r)
	}
}

func (c *controller) send(cmd *protocol.Command) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.queue = append(c.queue, cmd)
}

func (c *controller) hbs() []*protocol.Heartbeat {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*protocol.Heartbeat(nil), c.heartbeats...)
}

func (c *controller) final(id string) *protocol.CommandStatus {
	for _, hb := range c.hbs() {
		if hb.Command != nil && hb.Command.ID == id && hb.Command.State != protocol.CommandRunning {
			return hb.Command
		}
	}
	return nil
}

// syncBuffer is the process's stderr.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

type process struct {
	cmd    *exec.Cmd
	stderr *syncBuffer
	done   chan struct{}
}

func buildAgent(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "anvil-agent")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	require.NoError(t, err, string(out))
	return bin
}

func abs(t *testing.T, rel string) string {
	t.Helper()
	p, err := filepath.Abs(rel)
	require.NoError(t, err)
	return p
}

// startAgent runs the real binary as a workstation would: outside the
// ramdisk (the procfs fixture of an installed system), MACs given, the
// hardware of a snapshot.
func startAgent(t *testing.T, bin string, args ...string) *process {
	t.Helper()
	p := &process{stderr: &syncBuffer{}, done: make(chan struct{})}
	base := []string{
		"--root", abs(t, "../../testdata/hardware/nvme-sata"),
		"--proc", abs(t, "../../testdata/hardware/procfs/installed-ext4"),
		"--cmdline", abs(t, "../../testdata/cmdline/none.txt"),
		"--macs", "52:54:00:12:34:56",
		"--log-file", filepath.Join(t.TempDir(), "agent.log"),
	}
	p.cmd = exec.Command(bin, append(base, args...)...)
	p.cmd.Stderr = p.stderr
	require.NoError(t, p.cmd.Start())
	go func() { _ = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.done
		if t.Failed() {
			t.Logf("agent stderr:\n%s", p.stderr.String())
		}
	})
	return p
}

func (p *process) stop(t *testing.T) {
	t.Helper()
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		t.Fatal("agent did not stop on SIGTERM")
	}
	assert.Equal(t, 0, p.cmd.ProcessState.ExitCode())
	assert.Contains(t, p.stderr.String(), "shutting down")
}

func TestBinaryLooksUpHeartbeatsAndReportsInventory(t *testing.T) {
	bin := buildAgent(t)
	ctrl := newController(t)
	p := startAgent(t, bin, "--api", ctrl.srv.URL)

	require.Eventually(t, func() bool { return len(ctrl.hbs()) >= 2 }, 20*time.Second, 10*time.Millisecond)
	ctrl.mu.Lock()
	assert.Contains(t, ctrl.lookups[0], "addresses=52%3A54%3A00%3A12%3A34%3A56")
	assert.Contains(t, ctrl.lookups[0], "boot_id=")
	ctrl.mu.Unlock()
	first := ctrl.hbs()[0]
	require.NotNil(t, first.Steps)
	assert.Equal(t, []protocol.ManagerVersion{{Name: generic.Name, Version: generic.Version}}, first.Steps.Managers)
	var clean []string
	for _, s := range first.Steps.Clean {
		clean = append(clean, s.Step)
	}
	assert.Equal(t, []string{"erase_devices_metadata", "erase_devices", "erase_devices_express", "create_configuration", "delete_configuration"}, clean)
	assert.NotEmpty(t, first.BootTimings)

	ctrl.send(&protocol.Command{ID: "inv-1", Name: protocol.CmdInventory})
	require.Eventually(t, func() bool { return ctrl.final("inv-1") != nil }, 20*time.Second, 10*time.Millisecond)
	final := ctrl.final("inv-1")
	require.Equal(t, protocol.CommandSucceeded, final.State, "%+v", final.Error)
	var inv protocol.Inventory
	require.NoError(t, json.Unmarshal(final.Result, &inv))
	var disks []string
	for _, d := range inv.Disks {
		disks = append(disks, d.Name)
	}
	assert.Contains(t, disks, "/dev/nvme0n1", "the NVMe disk of the snapshot")
	assert.Contains(t, disks, "/dev/sda", "the SATA disk of the snapshot")
	assert.Equal(t, "3c:ec:ef:12:34:56", inv.Interfaces[0].MACAddress)

	// collect_logs returns the agent's own log file (and the kernel log,
	// or a note why it could not be read).
	ctrl.send(&protocol.Command{ID: "logs-1", Name: protocol.CmdCollectLogs})
	require.Eventually(t, func() bool { return ctrl.final("logs-1") != nil }, 20*time.Second, 10*time.Millisecond)
	logs := ctrl.final("logs-1")
	require.Equal(t, protocol.CommandSucceeded, logs.State, "%+v", logs.Error)
	var res map[string]string
	require.NoError(t, json.Unmarshal(logs.Result, &res))
	files := untar(t, res["system_logs"])
	assert.Contains(t, files["anvil-agent.log"], `msg="command started" `)
	assert.True(t, files["dmesg.txt"] != "" || files["errors.txt"] != "", "kernel log or why not")

	ctrl.mu.Lock()
	assert.Empty(t, ctrl.invalid, "every heartbeat decodes and validates")
	ctrl.mu.Unlock()
	p.stop(t)
}

// untar decodes a base64 gzip tar into name → content.
func untar(t *testing.T, b64 string) map[string]string {
	t.Helper()
	raw, err := base64.StdEncoding.DecodeString(b64)
	require.NoError(t, err)
	zr, err := gzip.NewReader(bytes.NewReader(raw))
	require.NoError(t, err)
	tr := tar.NewReader(zr)
	out := map[string]string{}
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return out
		}
		require.NoError(t, err)
		b, err := io.ReadAll(tr)
		require.NoError(t, err)
		out[hdr.Name] = string(b)
	}
}

// TestBinaryRefusesEraseOutsideRamdisk: started on a workstation without
// --devices, the agent must refuse to erase anything.
func TestBinaryRefusesEraseOutsideRamdisk(t *testing.T) {
	bin := buildAgent(t)
	ctrl := newController(t)
	p := startAgent(t, bin, "--api", ctrl.srv.URL)
	require.Eventually(t, func() bool { return len(ctrl.hbs()) >= 1 }, 20*time.Second, 10*time.Millisecond)
	fp := ctrl.hbs()[0].Fingerprint
	ctrl.send(&protocol.Command{ID: "e-1", Name: protocol.CmdExecuteCleanStep, Fingerprint: fp,
		Step: &protocol.Step{Interface: protocol.InterfaceDeploy, Step: "erase_devices_metadata", Priority: 99}})
	ctrl.send(&protocol.Command{ID: "p-1", Name: protocol.CmdPowerOff})
	require.Eventually(t, func() bool { return ctrl.final("p-1") != nil }, 20*time.Second, 10*time.Millisecond)

	erase := ctrl.final("e-1")
	require.NotNil(t, erase)
	assert.Equal(t, protocol.CommandFailed, erase.State)
	require.NotNil(t, erase.Error)
	assert.Equal(t, protocol.ErrTypeProtectedDevice, erase.Error.Type)
	assert.Contains(t, erase.Error.Message, "not running in the agent ramdisk")

	// Nor may it switch the workstation off.
	power := ctrl.final("p-1")
	assert.Equal(t, protocol.CommandFailed, power.State)
	assert.Equal(t, protocol.ErrTypeNotSupported, power.Error.Type)
	p.stop(t)
}

func TestBinaryWithoutAPIOutsideRamdiskExits(t *testing.T) {
	bin := buildAgent(t)
	cmd := exec.Command(bin, "--proc", abs(t, "../../testdata/hardware/procfs/installed-ext4"),
		"--cmdline", abs(t, "../../testdata/cmdline/none.txt"), "--macs", "52:54:00:12:34:56")
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee, string(out))
	assert.Equal(t, 2, ee.ExitCode())
	assert.Contains(t, string(out), "set --api or anvil.api=")
}

func TestParseFlags(t *testing.T) {
	dir := t.TempDir()
	cmdline := filepath.Join(dir, "cmdline")
	require.NoError(t, os.WriteFile(cmdline, []byte("quiet anvil.api=http://10.0.0.1:6385 anvil.node=n1 anvil.token=tok anvil.devices=/dev/loop3 anvil.debug anvil.interface=eno1\n"), 0o644))
	tests := []struct {
		name string
		args []string
		want options
	}{
		{"kernel command line only", []string{"--cmdline", cmdline},
			options{api: "http://10.0.0.1:6385", node: "n1", token: "tok", devices: []string{"/dev/loop3"}, debug: true, ifaces: []string{"eno1"}}},
		{"flags override", []string{"--cmdline", cmdline, "--api", "http://x:1", "--node", "n2", "--devices", "/dev/loop4,/dev/loop5", "--debug=false", "--macs", "52:54:00:AA:BB:CC"},
			options{api: "http://x:1", node: "n2", token: "tok", devices: []string{"/dev/loop4", "/dev/loop5"}, macs: []string{"52:54:00:aa:bb:cc"}, ifaces: []string{"eno1"}}},
		{"empty --devices overrides the command line", []string{"--cmdline", cmdline, "--devices", ""},
			options{api: "http://10.0.0.1:6385", node: "n1", token: "tok", debug: true, ifaces: []string{"eno1"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseFlags(tt.args, &bytes.Buffer{})
			require.NoError(t, err)
			tt.want.root, tt.want.cmdline, tt.want.proc = "/", cmdline, "/proc"
			assert.Equal(t, tt.want, got)
		})
	}
	_, err := parseFlags([]string{"--cmdline", filepath.Join(dir, "missing")}, &bytes.Buffer{})
	assert.Error(t, err, "an explicit --cmdline must exist")
	_, err = parseFlags([]string{"stray"}, &bytes.Buffer{})
	assert.Error(t, err)
}

func TestErasePolicy(t *testing.T) {
	assert.Nil(t, erasePolicy(nil))
	p := erasePolicy(&protocol.ErasePolicy{Concurrency: 2, Iterations: 3, Zeroize: false, SkipReadOnly: true,
		AllowDiscard: true, EnableNVMeFormat: false, EnableATAErase: true, ContinueOnSecureErr: true})
	require.NotNil(t, p)
	assert.Equal(t, 2, p.Concurrency)
	assert.Equal(t, 3, p.Iterations)
	assert.False(t, p.Zeroize)
	assert.True(t, p.SkipReadOnly)
	assert.True(t, p.AllowDiscard)
	assert.False(t, p.EnableNVMeSecureErase)
	assert.True(t, p.EnableATASecureErase)
	assert.True(t, p.ContinueIfSecureEraseFailed)
	assert.Equal(t, 4, erasePolicy(&protocol.ErasePolicy{}).Concurrency, "0 keeps the default")
}

// TestBinaryWithoutAPIInRamdiskStaysUp: in the ramdisk a configuration
// error is logged and the agent waits for a signal instead of exiting.
func TestBinaryWithoutAPIInRamdiskStaysUp(t *testing.T) {
	bin := buildAgent(t)
	p := startAgent(t, bin, "--proc", abs(t, "../../testdata/hardware/procfs/uroot-initramfs"))
	require.Eventually(t, func() bool {
		return strings.Contains(p.stderr.String(), "no usable controller URL")
	}, 20*time.Second, 10*time.Millisecond)
	select {
	case <-p.done:
		t.Fatalf("agent exited: %s", p.stderr.String())
	default:
	}
	assert.Contains(t, p.stderr.String(), "in_ramdisk=true")
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		t.Fatal("agent did not stop on SIGTERM")
	}
	assert.Equal(t, 0, p.cmd.ProcessState.ExitCode())
}
