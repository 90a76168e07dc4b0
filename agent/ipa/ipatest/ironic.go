// Package ipatest runs a real OpenStack Ironic (internal/ironicserver:
// Debian's python3-ironic 21.4, standalone, noauth, SQLite, fake-hardware,
// loopback only) for tests of the IPA adapter, and drives it with Ironic's
// own CLI.
package ipatest

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/anvil-metal/anvil/internal/ironicserver"
)

// Python is the interpreter Debian's Ironic is installed for.
const Python = ironicserver.Python

// Available says why Ironic cannot run here, or "" when it can.
func Available() string {
	if err := ironicserver.Installed(); err != nil {
		return err.Error()
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
	srv *ironicserver.Server
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

// FreePort returns a loopback port nobody listens on right now.
func FreePort(t testing.TB) int {
	port, err := ironicserver.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return port
}

// Start runs Ironic until the test ends.
func Start(t testing.TB, opts Options) *Ironic {
	t.Helper()
	sopts := ironicserver.Options{AgentURL: opts.AgentURL, HeartbeatTimeout: opts.HeartbeatTimeout, Extra: opts.Extra}
	if opts.Netns != nil {
		sopts.Command, sopts.Dial = opts.Netns.Command, opts.Netns.DialContext
	}
	srv, err := ironicserver.Start(t.TempDir(), sopts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	return &Ironic{URL: srv.URL, Dir: srv.Dir, srv: srv, t: t, ns: opts.Netns}
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
func (ir *Ironic) LogTail(n int) string { return ir.srv.LogTail(n) }

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
