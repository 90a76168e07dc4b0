package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/anvil-metal/anvil/agent"
	"github.com/anvil-metal/anvil/hardware"
	"github.com/anvil-metal/anvil/hardware/erase"
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
	assert.Equal(t, []string{"erase_devices_metadata", "erase_devices", "burnin_cpu", "burnin_disk", "burnin_memory", "burnin_network", "erase_devices_express", "verify_hardware", "create_configuration", "delete_configuration"}, clean)
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

// TestBinaryRefusesDestructiveSteps: wherever the agent cannot be sure it
// runs in the ramdisk, and wherever the allow-list is explicitly empty, it
// must refuse to erase anything and to switch the machine off. A fixture
// procfs that looks like the ramdisk (uroot-initramfs) proves nothing about
// the machine the binary runs on.
func TestBinaryRefusesDestructiveSteps(t *testing.T) {
	bin := buildAgent(t)
	ramdisk := abs(t, "../../testdata/hardware/procfs/uroot-initramfs")
	emptyDevices := filepath.Join(t.TempDir(), "cmdline")
	require.NoError(t, os.WriteFile(emptyDevices, []byte("console=ttyS0 anvil.devices= quiet\n"), 0o644))
	tests := []struct {
		name string
		args []string
		want []string // in the refusal
		log  []string // in the agent's log
	}{
		{"outside the ramdisk without --devices", nil,
			[]string{"not running in the agent ramdisk", "no device allow-list given"}, []string{"in_ramdisk=false"}},
		{"outside the ramdisk with an empty --devices", []string{"--devices", ""},
			[]string{"the device allow-list is empty"}, []string{"in_ramdisk=false"}},
		{"fake ramdisk procfs without --devices", []string{"--proc", ramdisk},
			[]string{"comes from --proc " + ramdisk, "not trusted", "no device allow-list given"},
			[]string{"in_ramdisk=true", "ramdisk_powers=false", "ramdisk detected but not trusted"}},
		{"fake ramdisk procfs with an empty --devices", []string{"--proc", ramdisk, "--devices", " "},
			[]string{"the device allow-list is empty"}, []string{"in_ramdisk=true", "ramdisk_powers=false"}},
		{"fake ramdisk procfs with an empty anvil.devices=", []string{"--proc", ramdisk, "--cmdline", emptyDevices},
			[]string{"the device allow-list is empty"}, []string{"in_ramdisk=true", "ramdisk_powers=false"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctrl := newController(t)
			p := startAgent(t, bin, append([]string{"--api", ctrl.srv.URL}, tt.args...)...)
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
			for _, w := range tt.want {
				assert.Contains(t, erase.Error.Message, w)
			}

			// Nor may it switch the machine off.
			power := ctrl.final("p-1")
			assert.Equal(t, protocol.CommandFailed, power.State)
			require.NotNil(t, power.Error)
			assert.Equal(t, protocol.ErrTypeNotSupported, power.Error.Type)
			for _, w := range tt.log {
				assert.Contains(t, p.stderr.String(), w)
			}
			assert.NotContains(t, p.stderr.String(), "assembled software RAID arrays", "mdadm writes to disks")
			p.stop(t)
		})
	}
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
	cmdline := func(content string) string {
		f, err := os.CreateTemp(dir, "cmdline")
		require.NoError(t, err)
		_, err = f.WriteString(content)
		require.NoError(t, err)
		require.NoError(t, f.Close())
		return f.Name()
	}
	full := "quiet anvil.api=http://10.0.0.1:6385 anvil.node=n1 anvil.token=tok anvil.devices=/dev/loop3 anvil.debug anvil.interface=eno1\n"
	fromFull := options{api: "http://10.0.0.1:6385", node: "n1", token: "tok", debug: true, ifaces: []string{"eno1"}}
	with := func(o options, edit func(o *options)) options { edit(&o); return o }
	tests := []struct {
		name    string
		cmdline string
		args    []string
		want    options
	}{
		{"kernel command line only", full, nil,
			with(fromFull, func(o *options) { o.devices, o.devicesSet = []string{"/dev/loop3"}, true })},
		{"flags override", full, []string{"--api", "http://x:1", "--node", "n2", "--devices", "/dev/loop4,/dev/loop5", "--debug=false", "--macs", "52:54:00:AA:BB:CC"},
			options{api: "http://x:1", node: "n2", token: "tok", devices: []string{"/dev/loop4", "/dev/loop5"}, devicesSet: true,
				macs: []string{"52:54:00:aa:bb:cc"}, ifaces: []string{"eno1"}}},
		{"empty --devices overrides the command line and denies all", full, []string{"--devices", ""},
			with(fromFull, func(o *options) { o.devicesSet = true })},
		{"blank --devices denies all", full, []string{"--devices", " , "},
			with(fromFull, func(o *options) { o.devicesSet = true })},
		{"no anvil.devices=: no list", "anvil.api=http://a:1\n", nil, options{api: "http://a:1"}},
		{"empty anvil.devices=: deny all", "anvil.api=http://a:1 anvil.devices=\n", nil, options{api: "http://a:1", devicesSet: true}},
		{"quoted empty anvil.devices: deny all", `anvil.api=http://a:1 "anvil.devices=" x`, nil, options{api: "http://a:1", devicesSet: true}},
		{"bare anvil.devices: deny all", "anvil.api=http://a:1 anvil.devices\n", nil, options{api: "http://a:1", devicesSet: true}},
		{"a later empty anvil.devices= wins", "anvil.devices=/dev/loop3 anvil.devices=", nil, options{devicesSet: true}},
		{"another parameter's value is not the key", "anvil.api=http://a:1 x=anvil.devices\n", nil, options{api: "http://a:1"}},
		{"static address, VLAN and BOOTIF for the network setup", "anvil.api=http://a:1 anvil.ip=10.0.0.5/24,10.0.0.1 anvil.vlan=42 BOOTIF=01-52-54-00-aa-bb-cc anvil.vlan=x", nil,
			options{api: "http://a:1", static: &agent.StaticIP{Address: netip.MustParsePrefix("10.0.0.5/24"), Gateway: netip.MustParseAddr("10.0.0.1")},
				vlan: &agent.VLAN{ID: 42}, bootIF: "52:54:00:aa:bb:cc", netProblems: []string{"anvil.vlan=x: VLAN ID must be 1-4094"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := cmdline(tt.cmdline)
			got, err := parseFlags(append([]string{"--cmdline", path}, tt.args...))
			require.NoError(t, err)
			tt.want.root, tt.want.cmdline, tt.want.proc, tt.want.bootConfig = "/", path, "/proc", "/etc/anvil/boot.json"
			assert.Equal(t, tt.want, got)
		})
	}
	t.Run("the ISO's boot config: its arguments and network_data", func(t *testing.T) {
		bc := filepath.Join(dir, "boot.json")
		require.NoError(t, os.WriteFile(bc, []byte(`{"cmdline":"anvil.api=http://10.0.2.100:6385 anvil.node=n3 anvil.token=t0k",
			"network_data":{"links":[{"id":"p","type":"phy","ethernet_mac_address":"52:54:00:aa:bb:cc"}],
			"networks":[{"id":"n","type":"ipv4","link":"p","ip_address":"10.0.2.50/24"}]}}`), 0o600))
		got, err := parseFlags([]string{"--cmdline", cmdline("console=ttyS0 anvil.vmedia anvil.vlan=9"), "--boot-config", bc})
		require.NoError(t, err)
		assert.Equal(t, "http://10.0.2.100:6385", got.api)
		assert.Equal(t, "n3", got.node)
		assert.Equal(t, "t0k", got.token)
		require.NotNil(t, got.static)
		assert.Equal(t, &agent.StaticIP{Address: netip.MustParsePrefix("10.0.2.50/24"), Device: "52:54:00:aa:bb:cc"}, got.static)
		assert.Nil(t, got.vlan, "network_data replaces the command line's network setup")
		_, err = parseFlags([]string{"--boot-config", filepath.Join(dir, "missing.json")})
		assert.Error(t, err, "an explicit --boot-config must exist")
	})
	_, err := parseFlags([]string{"--cmdline", filepath.Join(dir, "missing")})
	assert.Error(t, err, "an explicit --cmdline must exist")
	_, err = parseFlags([]string{"stray"})
	assert.Error(t, err)
}

// TestHelpAndUsageErrors: -h, --help and help print the usage on stdout;
// an unknown flag or a stray word is a usage error (outside the ramdisk;
// in it the agent stays up, TestBinaryWithoutAPIInRamdiskStaysUp).
func TestHelpAndUsageErrors(t *testing.T) {
	tests := []struct {
		args   []string
		code   int
		stdout string
		stderr string
	}{
		{args: []string{"--help"}, stdout: "usage: anvil-agent [flags]"},
		{args: []string{"-h"}, stdout: "  -devices string"},
		{args: []string{"help"}, stdout: "flags override them"},
		{args: []string{"--debug", "-help"}, stdout: "usage: anvil-agent [flags]"},
		{args: []string{"--bogus"}, code: 2, stderr: "anvil-agent: flag provided but not defined: -bogus\n\nusage: anvil-agent [flags]"},
		{args: []string{"stray"}, code: 2, stderr: `anvil-agent: unexpected argument "stray"`},
		{args: []string{"--", "-x"}, code: 2, stderr: `"-x" cannot be an argument: it starts with "-"`},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			// Done already: a case that started the agent by mistake ends.
			ctx, cancel := context.WithCancel(t.Context())
			cancel()
			var stdout, stderr bytes.Buffer
			code := run(ctx, tt.args, &stdout, &stderr)
			assert.Equal(t, tt.code, code, "stderr: %s", stderr.String())
			if tt.code == 0 {
				assert.Contains(t, stdout.String(), tt.stdout)
				assert.Empty(t, stderr.String())
				return
			}
			assert.Empty(t, stdout.String())
			assert.Contains(t, stderr.String(), tt.stderr)
		})
	}
}

// TestDeviceGuard: which devices the guard lets destructive steps write,
// from the detected environment, --proc/--root and the allow-list. The
// paths are never opened.
func TestDeviceGuard(t *testing.T) {
	ramdisk := hardware.Environment{InRamdisk: true, Evidence: "root filesystem is rootfs and anvil.api= on the kernel command line"}
	installed := hardware.Environment{Evidence: "root filesystem is ext4, not a ramdisk"}
	system := options{proc: "/proc", root: "/"}
	with := func(edit func(o *options)) options { o := system; edit(&o); return o }
	const listed, other = "/dev/anvil-test-listed", "/dev/anvil-test-other"
	tests := []struct {
		name      string
		env       hardware.Environment
		o         options
		powers    bool
		writable  []string // of listed, other
		refusal   string   // of Ready, "" when ready
		whyPowers string
	}{
		{"ramdisk, no list: every device", ramdisk, system, true, []string{listed, other}, "", ""},
		{"ramdisk, trailing slashes are the system's", ramdisk, with(func(o *options) { o.proc, o.root = "/proc/", "//" }), true, []string{listed, other}, "", ""},
		{"ramdisk, list: only the list", ramdisk, with(func(o *options) { o.devices, o.devicesSet = []string{listed}, true }), true, []string{listed}, "", ""},
		{"ramdisk, explicitly empty list: nothing", ramdisk, with(func(o *options) { o.devicesSet = true }), true, nil, "allow-list is empty", ""},
		{"fake --proc, no list: nothing", ramdisk, with(func(o *options) { o.proc = "/tmp/fixture/proc" }), false, nil,
			"not trusted", "--proc /tmp/fixture/proc"},
		{"fake --root, no list: nothing", ramdisk, with(func(o *options) { o.root = "/tmp/fixture" }), false, nil,
			"not trusted", "--root /tmp/fixture"},
		{"fake --proc, list: only the list", ramdisk, with(func(o *options) {
			o.proc, o.devices, o.devicesSet = "/tmp/fixture/proc", []string{listed}, true
		}), false, []string{listed}, "", "not trusted"},
		{"fake --proc, explicitly empty list: nothing", ramdisk, with(func(o *options) { o.proc, o.devicesSet = "/tmp/fixture/proc", true }), false, nil,
			"allow-list is empty", "not trusted"},
		{"installed system, no list: nothing", installed, system, false, nil, "not running in the agent ramdisk", "ext4"},
		{"installed system, list: only the list", installed, with(func(o *options) { o.devices, o.devicesSet = []string{listed}, true }), false, []string{listed}, "", "ext4"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			powers, why := ramdiskPowers(tt.o, tt.env)
			assert.Equal(t, tt.powers, powers)
			assert.Contains(t, why, tt.whyPowers)
			g := deviceGuard(tt.o, tt.env, powers, why)
			if tt.refusal == "" {
				assert.NoError(t, g.Ready())
			} else {
				assert.ErrorContains(t, g.Ready(), tt.refusal)
			}
			var writable []string
			for _, dev := range []string{listed, other} {
				if g.Allows(dev) {
					writable = append(writable, dev)
				}
			}
			assert.Equal(t, tt.writable, writable)
		})
	}
}

func TestErasePolicy(t *testing.T) {
	assert.Nil(t, erasePolicy(nil), "no policy: the erase package's defaults")
	def := erase.DefaultPolicy()
	with := func(edit func(p *erase.Policy)) erase.Policy { p := def; edit(&p); return p }
	tests := []struct {
		name string
		doc  string // config.erase as the controller sends it
		want erase.Policy
	}{
		{"empty object keeps every default", `{}`, def},
		{"partial policy keeps the knobs it leaves out", `{"iterations": 2, "skip_read_only": true}`,
			with(func(p *erase.Policy) { p.Iterations, p.SkipReadOnly = 2, true })},
		{"explicit false turns a knob off", `{"enable_nvme_format": false, "enable_ata_erase": false, "zeroize": false}`,
			with(func(p *erase.Policy) {
				p.EnableNVMeSecureErase, p.EnableATASecureErase, p.Zeroize = false, false, false
			})},
		{"null is absent", `{"enable_nvme_format": null, "zeroize": null}`, def},
		{"concurrency 0 and negative iterations keep the defaults", `{"concurrency": 0, "iterations": -1}`, def},
		{"zero iterations is honoured", `{"iterations": 0}`, with(func(p *erase.Policy) { p.Iterations = 0 })},
		{"every field, as a full policy is sent", `{"concurrency": 2, "iterations": 3, "zeroize": false, "skip_read_only": true,
			"allow_discard": true, "enable_nvme_format": false, "enable_ata_erase": true, "continue_if_secure_erase_fails": true}`,
			with(func(p *erase.Policy) {
				p.Concurrency, p.Iterations, p.Zeroize, p.SkipReadOnly = 2, 3, false, true
				p.AllowDiscard, p.EnableNVMeSecureErase, p.EnableATASecureErase, p.ContinueIfSecureEraseFailed = true, false, true, true
			})},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lr, err := protocol.DecodeLookupResponse(strings.NewReader(`{"node": {"uuid": "u"},
				"config": {"agent_token": "tok", "heartbeat_timeout": 300, "erase": ` + tt.doc + `}}`))
			require.NoError(t, err)
			require.NotNil(t, lr.Config.Erase)
			got := erasePolicy(lr.Config.Erase)
			require.NotNil(t, got)
			assert.Equal(t, tt.want, *got)
		})
	}
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
	// The fixture is reported as a ramdisk, but a fixture grants nothing.
	assert.Contains(t, p.stderr.String(), "in_ramdisk=true")
	assert.Contains(t, p.stderr.String(), "ramdisk_powers=false")
	assert.Contains(t, p.stderr.String(), "ramdisk detected but not trusted")
	assert.NotContains(t, p.stderr.String(), "assembled software RAID arrays")
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		t.Fatal("agent did not stop on SIGTERM")
	}
	assert.Equal(t, 0, p.cmd.ProcessState.ExitCode())
}
