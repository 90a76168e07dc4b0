// Package ironicserver runs a real OpenStack Ironic (Debian's
// python3-ironic, 21.4 in bookworm) on loopback: one standalone process
// (API and conductor, no message bus), noauth, SQLite, fake-hardware.
// Nothing it runs contacts anything off the machine. The IPA adapter's tests
// (agent/ipa/ipatest) and anvil-bench's side-by-side comparison both run it;
// it lives here because it belongs to neither the agent nor the controller.
package ironicserver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/anvil-metal/anvil/internal/procfs"
)

// Python is the interpreter Debian's Ironic is installed for (a pyenv
// python3 earlier in PATH would not find it).
const Python = "/usr/bin/python3"

// ErrNotInstalled says Debian's python3-ironic is missing.
var ErrNotInstalled = errors.New("python3-ironic (Debian's Ironic) is not installed: apt-get install python3-ironic")

// Installed reports ErrNotInstalled when Ironic cannot run here.
func Installed() error {
	if err := exec.Command(Python, "-c", "import ironic.cmd.singleprocess").Run(); err != nil {
		return ErrNotInstalled
	}
	return nil
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
	// Quiet logs at Ironic's default level instead of debug (a benchmark
	// should not measure the cost of debug logging).
	Quiet bool
	// Extra is appended to ironic.conf (oslo.config merges a section
	// that appears twice), e.g. step priority overrides.
	Extra string
	// Command makes the commands that run Ironic, e.g. inside a network
	// namespace; nil: exec.CommandContext, on this host.
	Command func(ctx context.Context, name string, args ...string) *exec.Cmd
	// Dial reaches Ironic's port for the readiness probe (with a Command
	// that runs it in a namespace); nil: this host's loopback.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
}

// Server is a running Ironic.
type Server struct {
	URL  string // http://127.0.0.1:port
	Dir  string // its configuration, database and log
	Pid  int    // the leader of its process group
	cmd  *exec.Cmd
	done chan struct{}
}

// FreePort returns a loopback port nobody listens on right now.
func FreePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("free port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

const config = `[DEFAULT]
auth_strategy = noauth
debug = {{debug}}
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

// Start runs Ironic with its files in dir (which must exist) until Stop,
// and returns once its API answers.
func Start(dir string, opts Options) (*Server, error) {
	if err := Installed(); err != nil {
		return nil, err
	}
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	url := fmt.Sprintf("http://127.0.0.1:%d", port)
	if opts.AgentURL == "" {
		opts.AgentURL = url
	}
	if opts.HeartbeatTimeout == 0 {
		opts.HeartbeatTimeout = 10
	}
	conf := strings.NewReplacer("{{dir}}", dir, "{{port}}", strconv.Itoa(port), "{{agenturl}}", opts.AgentURL,
		"{{hbtimeout}}", strconv.Itoa(opts.HeartbeatTimeout), "{{debug}}", strconv.FormatBool(!opts.Quiet)).Replace(config) + opts.Extra
	confPath := filepath.Join(dir, "ironic.conf")
	if err := os.WriteFile(confPath, []byte(conf), 0o600); err != nil {
		return nil, err
	}
	command := opts.Command
	if command == nil {
		command = exec.CommandContext
	}
	py := func(module string, args ...string) *exec.Cmd {
		script := fmt.Sprintf("import sys; sys.argv=['ironic']+sys.argv[1:]; from %s import main; sys.exit(main())", module)
		return command(context.Background(), Python, append([]string{"-c", script, "--config-file", confPath}, args...)...)
	}
	if out, err := py("ironic.cmd.dbsync", "create_schema").CombinedOutput(); err != nil {
		return nil, fmt.Errorf("ironic-dbsync: %w\n%s", err, out)
	}
	logf, err := os.Create(filepath.Join(dir, "ironic.log"))
	if err != nil {
		return nil, err
	}
	cmd := py("ironic.cmd.singleprocess")
	cmd.Stdout, cmd.Stderr = logf, logf
	// Its own process group, so Stop reaches every process it starts; and
	// killed with us if we die without stopping it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start ironic: %w", err)
	}
	s := &Server{URL: url, Dir: dir, Pid: cmd.Process.Pid, cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); logf.Close(); close(s.done) }()
	hc := http.DefaultClient
	if opts.Dial != nil {
		hc = &http.Client{Transport: &http.Transport{DialContext: opts.Dial}}
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		resp, err := hc.Get(url + "/v1/drivers")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return s, nil
			}
		}
		select {
		case <-s.done:
			return nil, fmt.Errorf("ironic exited at start:\n%s", s.LogTail(4000))
		case <-time.After(250 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.Stop()
			return nil, fmt.Errorf("ironic did not start within 2 minutes:\n%s", s.LogTail(4000))
		}
	}
}

// Stop ends every process of Ironic: SIGTERM, SIGKILL after 15 s.
func (s *Server) Stop() {
	_ = syscall.Kill(-s.Pid, syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(15 * time.Second):
		_ = syscall.Kill(-s.Pid, syscall.SIGKILL)
		<-s.done
	}
}

// Pids lists Ironic's processes now: its process group.
func (s *Server) Pids() []int { return GroupPids(s.Pid) }

// GroupPids lists the processes of the process group pgid.
func GroupPids(pgid int) []int {
	ps, err := procfs.List("/proc")
	if err != nil {
		return nil
	}
	var out []int
	for _, p := range ps {
		if p.PGrp == pgid {
			out = append(out, p.PID)
		}
	}
	return out
}

// LogTail is the last n bytes of Ironic's log.
func (s *Server) LogTail(n int) string {
	b, _ := os.ReadFile(filepath.Join(s.Dir, "ironic.log"))
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}
