// Package ipatest runs a real OpenStack Ironic (Debian's python3-ironic,
// 21.4 in bookworm) for tests of the IPA adapter: one standalone process
// (API and conductor, no message bus), noauth, SQLite, fake-hardware, on
// loopback. Nothing it runs contacts anything off the machine.
package ipatest

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Python is the interpreter Debian's Ironic is installed for (a pyenv
// python3 earlier in PATH would not find it).
const Python = "/usr/bin/python3"

// Available says why Ironic cannot run here, or "" when it can.
func Available() string {
	if err := exec.Command(Python, "-c", "import ironic.cmd.singleprocess").Run(); err != nil {
		return "Debian's python3-ironic is not installed (apt-get install python3-ironic)"
	}
	if _, err := exec.LookPath("baremetal"); err != nil {
		return "the baremetal CLI is not installed (apt-get install python3-ironicclient)"
	}
	return ""
}

// Ironic is a running Ironic.
type Ironic struct {
	URL string // where the test and the baremetal CLI reach it
	Dir string
	t   testing.TB
	ns  *Netns
}

// Options tune the Ironic started.
type Options struct {
	// AgentURL is Ironic's URL as the agent sees it (it goes into
	// [service_catalog]endpoint_override, which Ironic checks when it
	// prepares the ramdisk); default the loopback URL.
	AgentURL string
	// HeartbeatTimeout is [api]ramdisk_heartbeat_timeout: the agent
	// heartbeats every 30-60 % of it. Default 10 s.
	HeartbeatTimeout int
	// Extra is appended to ironic.conf (oslo.config merges a section
	// that appears twice), e.g. step priority overrides.
	Extra string
	// Netns runs Ironic and the baremetal CLI inside that namespace
	// (URL is then its loopback); nil: the host's loopback.
	Netns *Netns
}

// command is name args... inside the namespace if there is one.
func (ir *Ironic) command(ctx context.Context, name string, args ...string) *exec.Cmd {
	if ir.ns != nil {
		return ir.ns.Command(ctx, name, args...)
	}
	return exec.CommandContext(ctx, name, args...)
}

func freePort(t testing.TB) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("free port: %v", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// FreePort returns a loopback port nobody listens on right now.
func FreePort(t testing.TB) int { return freePort(t) }

const config = `[DEFAULT]
auth_strategy = noauth
debug = true
host = anvil-test-conductor
state_path = {{dir}}
rpc_transport = none
enabled_hardware_types = fake-hardware
enabled_boot_interfaces = fake
enabled_deploy_interfaces = direct,fake
enabled_power_interfaces = fake
# fake management cannot set the boot device to disk, which a local-boot
# deploy does (prepare_instance_boot); noop accepts it.
enabled_management_interfaces = fake,noop
enabled_inspect_interfaces = no-inspect
enabled_network_interfaces = noop
enabled_raid_interfaces = agent,no-raid
enabled_vendor_interfaces = no-vendor
enabled_console_interfaces = no-console
enabled_bios_interfaces = no-bios
enabled_rescue_interfaces = no-rescue
default_deploy_interface = direct
default_network_interface = noop
[api]
host_ip = 127.0.0.1
port = {{port}}
ramdisk_heartbeat_timeout = {{hbtimeout}}
[database]
connection = sqlite:///{{dir}}/ironic.sqlite
[conductor]
automated_clean = true
sync_power_state_interval = -1
check_provision_state_interval = 5
[agent]
image_download_source = http
post_deploy_get_power_state_retries = 1
post_deploy_get_power_state_retry_interval = 1
deploy_logs_collect = never
command_timeout = 60
[deploy]
http_url = http://127.0.0.1:9
http_root = {{dir}}/http
fast_track = false
[nova]
send_power_notifications = false
[service_catalog]
endpoint_override = {{agenturl}}
[oslo_concurrency]
lock_path = {{dir}}/locks
`

// Start runs Ironic until the test ends.
func Start(t testing.TB, opts Options) *Ironic {
	t.Helper()
	dir := t.TempDir()
	port := freePort(t)
	url := fmt.Sprintf("http://127.0.0.1:%d", port)
	if opts.AgentURL == "" {
		opts.AgentURL = url
	}
	if opts.HeartbeatTimeout == 0 {
		opts.HeartbeatTimeout = 10
	}
	conf := strings.NewReplacer("{{dir}}", dir, "{{port}}", fmt.Sprint(port), "{{agenturl}}", opts.AgentURL,
		"{{hbtimeout}}", fmt.Sprint(opts.HeartbeatTimeout)).Replace(config) + opts.Extra
	confPath := filepath.Join(dir, "ironic.conf")
	if err := os.WriteFile(confPath, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	ir := &Ironic{URL: url, Dir: dir, t: t, ns: opts.Netns}
	py := func(module string, args ...string) *exec.Cmd {
		script := fmt.Sprintf("import sys; sys.argv=['ironic']+sys.argv[1:]; from %s import main; sys.exit(main())", module)
		return ir.command(context.Background(), Python, append([]string{"-c", script, "--config-file", confPath}, args...)...)
	}
	if out, err := py("ironic.cmd.dbsync", "create_schema").CombinedOutput(); err != nil {
		t.Fatalf("ironic-dbsync: %v\n%s", err, out)
	}
	logf, err := os.Create(filepath.Join(dir, "ironic.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := py("ironic.cmd.singleprocess")
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); logf.Close(); close(done) }()
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-done
		}
	})
	hc := http.DefaultClient
	if opts.Netns != nil {
		hc = &http.Client{Transport: &http.Transport{DialContext: opts.Netns.DialContext}}
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		resp, err := hc.Get(url + "/v1/drivers")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return ir
			}
		}
		select {
		case <-done:
			t.Fatalf("ironic exited at start:\n%s", ir.LogTail(4000))
		case <-time.After(250 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("ironic did not start within 2 minutes:\n%s", ir.LogTail(4000))
		}
	}
}

// Baremetal runs Ironic's own CLI against it and returns its output.
func (ir *Ironic) Baremetal(ctx context.Context, args ...string) (string, error) {
	cmd := ir.command(ctx, "baremetal", args...)
	cmd.Env = append(os.Environ(), "OS_ENDPOINT="+ir.URL, "OS_AUTH_TYPE=none", "OS_BAREMETAL_API_VERSION=1.81")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("baremetal %s: %w: %s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out)), nil
}

// MustBaremetal is Baremetal failing the test on error.
func (ir *Ironic) MustBaremetal(ctx context.Context, args ...string) string {
	ir.t.Helper()
	out, err := ir.Baremetal(ctx, args...)
	if err != nil {
		ir.t.Fatalf("%v\nironic log:\n%s", err, ir.LogTail(3000))
	}
	return out
}

// Field is one field of a node (baremetal node show -f value -c field).
func (ir *Ironic) Field(ctx context.Context, node, field string) string {
	ir.t.Helper()
	return ir.MustBaremetal(ctx, "node", "show", node, "-f", "value", "-c", field)
}

// Fields are some fields of a node in one CLI run (the CLI's start is
// most of its time); null is "", other non-strings their JSON.
func (ir *Ironic) Fields(ctx context.Context, node string, fields ...string) map[string]string {
	ir.t.Helper()
	args := []string{"node", "show", node, "-f", "json"}
	for _, f := range fields {
		args = append(args, "-c", f)
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal([]byte(ir.MustBaremetal(ctx, args...)), &raw); err != nil {
		ir.t.Fatalf("baremetal node show: %v", err)
	}
	out := map[string]string{}
	for k, v := range raw {
		var s string
		switch {
		case string(v) == "null":
		case json.Unmarshal(v, &s) == nil:
			out[k] = s
		default:
			out[k] = string(v)
		}
	}
	return out
}

// LogTail is the end of Ironic's log.
func (ir *Ironic) LogTail(n int) string {
	b, _ := os.ReadFile(filepath.Join(ir.Dir, "ironic.log"))
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

var agentCommandRE = regexp.MustCompile(`Executing agent command (\S+) for node`)

// AgentCommands counts the commands Ironic sent to the agent, by name,
// from Ironic's own log.
func (ir *Ironic) AgentCommands() map[string]int {
	b, _ := os.ReadFile(filepath.Join(ir.Dir, "ironic.log"))
	out := map[string]int{}
	for _, m := range agentCommandRE.FindAllSubmatch(b, -1) {
		out[string(m[1])]++
	}
	return out
}

// FormatCounts prints a count map sorted by name.
func FormatCounts(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "%s ×%d; ", k, m[k])
	}
	return strings.TrimSuffix(b.String(), "; ")
}
