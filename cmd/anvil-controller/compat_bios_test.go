//go:build compat

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/bmc/vbmc"
	"github.com/anvil-metal/anvil/internal/ironicserver"
)

// biosNetnsChild marks the re-executed test process that runs inside a
// network namespace of its own.
const biosNetnsChild = "ANVIL_COMPAT_BIOS_NETNS_CHILD"

// ironicRedfishConf turns on Ironic's redfish hardware type with its
// redfish bios interface next to the fake one ironicserver configures
// (oslo.config takes the last value of an option given twice). The boot
// interface is virtual media because ipxe and pxe need TFTP; nothing here
// boots.
const ironicRedfishConf = `
[DEFAULT]
enabled_hardware_types = fake-hardware,redfish
enabled_power_interfaces = fake,redfish
enabled_management_interfaces = fake,noop,redfish
enabled_bios_interfaces = no-bios,redfish
enabled_boot_interfaces = fake,redfish-virtual-media
enabled_raid_interfaces = agent,no-raid
`

// TestCompatBIOSAgainstIronic enrols one anvil-vbmc node (memory backend,
// no QEMU) in anvil and in Debian's stock Ironic 21.4, both with the
// redfish driver and bios interface, manages it in both (both cache the
// BIOS settings then) and compares what the operators' tools print: the
// baremetal CLI's bios setting list (plain and --long, 1.74's registry
// fields) and show, python-ironicclient's node.list_bios_settings /
// get_bios_setting, and the raw API at 1.40 and 1.74 with ?detail and
// ?fields. Only what is legitimately each server's own is normalised:
// times, link hosts, node UUIDs.
//
// Debian's openstacksdk (0.101) has no BIOS or firmware call at all, so
// the Python side is python-ironicclient's. Ironic 21.4 tops out at API
// 1.82 and has no firmware interface (1.86); what is comparable is that
// both answer 404 to /firmware at 1.82.
//
// Everything runs in a network namespace the test creates (root): the
// servers under test reach only its loopback.
func TestCompatBIOSAgainstIronic(t *testing.T) {
	if os.Getenv(biosNetnsChild) != "1" {
		if _, err := exec.LookPath("baremetal"); err != nil {
			t.Fatalf("the baremetal CLI is required (apt-get install python3-ironicclient python3-openstackclient): %v", err)
		}
		if err := ironicserver.Installed(); err != nil {
			t.Fatal(err)
		}
		bin, err := buildOnce()
		require.NoError(t, err)
		runInOwnNetns(t, "TestCompatBIOSAgainstIronic", "ANVIL_CONTROLLER_BIN="+bin)
		return
	}
	out, err := exec.Command("ip", "link", "set", "lo", "up").CombinedOutput()
	require.NoError(t, err, "%s", out)

	bmcSrv := vbmc.NewServer(nil, "admin", "password", vbmc.NewNode("node-1", vbmc.NewMemory()))
	hs := httptest.NewServer(bmcSrv.Handler())
	defer hs.Close()

	p := startController(t, "--database", "sqlite://"+filepath.Join(t.TempDir(), "anvil.db"))
	pythonPath := sushyWithRegistries(t)
	ir, err := ironicserver.Start(t.TempDir(), ironicserver.Options{Extra: ironicRedfishConf,
		Command: func(ctx context.Context, name string, args ...string) *exec.Cmd {
			cmd := exec.CommandContext(ctx, name, args...)
			cmd.Env = append(os.Environ(), "PYTHONPATH="+pythonPath)
			return cmd
		}})
	require.NoError(t, err)
	t.Cleanup(ir.Stop)
	t.Cleanup(func() {
		if t.Failed() { // what Ironic said about the BIOS, for the differences
			for _, l := range strings.Split(ir.LogTail(1<<24), "\n") {
				if strings.Contains(strings.ToLower(l), "bios") || strings.Contains(l, "ERROR") || strings.Contains(l, "WARNING") {
					t.Log("ironic: " + l)
				}
			}
		}
	})

	sides := []*biosSide{{name: "anvil", url: p.URL, home: t.TempDir(), log: p.log},
		{name: "ironic 21.4", url: ir.URL, home: t.TempDir(), log: func() string { return ir.LogTail(8000) }}}
	for _, s := range sides {
		s.ok(t, "node", "create", "--driver", "redfish", "--name", "bios-1", "--bios-interface", "redfish",
			"--driver-info", "redfish_address="+hs.URL, "--driver-info", "redfish_system_id=/redfish/v1/Systems/node-1",
			"--driver-info", "redfish_username=admin", "--driver-info", "redfish_password=password")
		s.ok(t, "node", "manage", "bios-1", "--wait", "120")
		s.uuid = strings.TrimSpace(s.ok(t, "node", "show", "bios-1", "-f", "value", "-c", "uuid"))
		require.Equal(t, "manageable", strings.TrimSpace(s.ok(t, "node", "show", "bios-1", "-f", "value", "-c", "provision_state")),
			"%s: %s", s.name, s.ok(t, "node", "show", "bios-1", "-f", "value", "-c", "last_error"))
	}
	a, i := sides[0], sides[1]

	known := map[string]int{}
	defer func() {
		for what, n := range known {
			t.Logf("%s: %d known difference(s) (unique: Ironic null, anvil false)", what, n)
		}
	}()
	compare := func(what string, get func(s *biosSide) any) {
		t.Helper()
		var diffs, real []string
		jsonDiff("", get(i), get(a), &diffs)
		for _, d := range diffs {
			if knownBIOSDiff.MatchString(d) {
				known[what]++
			} else {
				real = append(real, d)
			}
		}
		assert.Empty(t, real, "%s: where anvil differs from Ironic 21.4", what)
	}
	cliJSON := func(args ...string) func(s *biosSide) any {
		return func(s *biosSide) any {
			var v any
			out := s.ok(t, append([]string{"node", "bios", "setting"}, args...)...)
			require.NoError(t, json.Unmarshal([]byte(out), &v), "%s: %s", s.name, out)
			return s.normalise(v)
		}
	}
	// Not an empty comparison: the registry's fields reached both caches.
	detail, _ := a.raw(t, "1.74", "/v1/nodes/bios-1/bios?detail=True").(map[string]any)["body"].(map[string]any)
	settings, _ := detail["bios"].([]any)
	require.GreaterOrEqual(t, len(settings), 40, "%v", detail)
	compare("bios setting list -f json", cliJSON("list", "bios-1", "-f", "json"))
	compare("bios setting list --long -f json", cliJSON("list", "bios-1", "--long", "-f", "json"))
	compare("bios setting list --fields name read_only -f json", cliJSON("list", "bios-1", "--fields", "name", "read_only", "-f", "json"))
	for _, name := range []string{"BootMode", "ProcCStates", "SystemServiceTag", "PowerCycleDelaySecs", "AssetTag", "WakeOnLan", "SetupPassword"} {
		compare("bios setting show "+name, cliJSON("show", "bios-1", name, "-f", "json"))
	}
	compare("bios setting show of a name the node lacks", func(s *biosSide) any {
		out, err := s.cli("node", "bios", "setting", "show", "bios-1", "NoSuchSetting")
		require.Error(t, err, s.name)
		// Ironic 21.4 sends only openstack-request-id; anvil also sends
		// x-openstack-request-id as Ironic has since 34.0 (API 1.107, at
		// every version), which the client prints as "(Request-ID: ...)".
		out = regexp.MustCompile(` \(Request-ID: req-[0-9a-f-]+\)`).ReplaceAllString(out, "")
		return s.normalise(regexp.MustCompile(`\(HTTP 404\).*`).FindString(out))
	})
	compare("python-ironicclient", func(s *biosSide) any { return s.normalise(s.python(t)) })

	// Firmware: Ironic 21.4 (API 1.82) has no /firmware and answers 400
	// to a node subresource it does not know; anvil answers 404 below
	// 1.86, as Ironic releases with the firmware interface do.
	for _, node := range []string{"bios-1", a.uuid} {
		assert.Equal(t, map[string]any{"status": http.StatusNotFound, "body": nil}, a.raw(t, "1.82", "/v1/nodes/"+node+"/firmware"))
	}
	assert.Equal(t, map[string]any{"status": http.StatusBadRequest, "body": nil}, i.raw(t, "1.82", "/v1/nodes/bios-1/firmware"))
	for _, q := range []struct{ version, path string }{
		{"1.40", "/bios"}, {"1.73", "/bios?detail=True"}, {"1.74", "/bios"}, {"1.74", "/bios?detail=True"},
		{"1.74", "/bios?fields=name,upper_bound"}, {"1.74", "/bios/PowerCycleDelaySecs"}, {"1.40", "/bios/BootMode"},
		{"1.74", "/bios?detail=True&fields=name"},
	} {
		for _, ident := range []string{"bios-1", "uuid"} {
			compare(fmt.Sprintf("GET %s %s at %s", ident, q.path, q.version), func(s *biosSide) any {
				node := ident
				if ident == "uuid" {
					node = s.uuid
				}
				return s.normalise(s.raw(t, q.version, "/v1/nodes/"+node+q.path))
			})
		}
	}
}

// sushyWithRegistries copies Debian's sushy package into a directory for
// PYTHONPATH, adding the standard_registries directory python3-sushy
// 4.3.3 lacks: without it sushy fails every registry read ("No such file
// or directory: .../sushy/standard_registries/"), so a stock Debian Ironic
// caches BIOS values with every registry field null. The directory holds
// the DMTF message registries upstream; sushy only lists it, and Ironic's
// BIOS registry comes from the BMC, so an empty one gives Ironic as
// upstream ships it. Nothing on the host is changed.
func sushyWithRegistries(t *testing.T) string {
	t.Helper()
	out, err := exec.Command(ironicserver.Python, "-c", "import os, sushy; print(os.path.dirname(sushy.__file__))").Output()
	require.NoError(t, err, "python3-sushy is required (Ironic's redfish driver)")
	src := strings.TrimSpace(string(out))
	dir := t.TempDir()
	require.NoError(t, os.CopyFS(filepath.Join(dir, "sushy"), os.DirFS(src)))
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "sushy", "standard_registries"), 0o755))
	return dir
}

// knownBIOSDiff is the one difference left, reported rather than hidden:
// a registry that leaves out IsSystemUniqueProperty (anvil-vbmc's does)
// gives "unique": null in Ironic (sushy keeps the absence) and false in
// anvil, whose bmc.Attribute has plain booleans. Fixing it means
// pointer booleans in the bmc package's registry parser.
var knownBIOSDiff = regexp.MustCompile(`\.(Unique|unique): ironic null, anvil false$`)

// biosSide is one server under comparison.
type biosSide struct {
	name, url, home, uuid string
	log                   func() string
}

func (s *biosSide) cli(args ...string) (string, error) {
	cmd := exec.Command("baremetal", args...)
	cmd.Env = append(os.Environ(), "OS_AUTH_TYPE=none", "OS_ENDPOINT="+s.url, "HOME="+s.home)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func (s *biosSide) ok(t *testing.T, args ...string) string {
	t.Helper()
	out, err := s.cli(args...)
	require.NoError(t, err, "%s: baremetal %s:\n%s\nserver log:\n%s", s.name, strings.Join(args, " "), out, s.log())
	return out
}

// biosPython drives python-ironicclient's library as a script would.
const biosPython = `
import json, sys
from ironicclient import client
c = client.get_client(1, endpoint=sys.argv[1], auth_type='none', os_ironic_api_version='1.78')
out = {
  'list': c.node.list_bios_settings('bios-1'),
  'detail': c.node.list_bios_settings('bios-1', detail=True),
  'fields': c.node.list_bios_settings('bios-1', fields=['name', 'allowable_values']),
  'get': c.node.get_bios_setting('bios-1', 'ProcCStates'),
  'get_int': c.node.get_bios_setting('bios-1', 'PowerCycleDelaySecs'),
  'old': c.node.list_bios_settings('bios-1', os_ironic_api_version='1.40'),
}
json.dump(out, sys.stdout)
`

func (s *biosSide) python(t *testing.T) any {
	t.Helper()
	cmd := exec.Command(ironicserver.Python, "-c", biosPython, s.url)
	cmd.Env = append(os.Environ(), "HOME="+s.home)
	out, err := cmd.Output()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		out = append(out, ee.Stderr...)
	}
	require.NoError(t, err, "%s: python-ironicclient:\n%s", s.name, out)
	var v any
	require.NoError(t, json.Unmarshal(out, &v), "%s: %s", s.name, out)
	return v
}

// raw is the status and JSON body of a GET at a microversion.
func (s *biosSide) raw(t *testing.T, version, path string) any {
	t.Helper()
	req, err := http.NewRequest("GET", s.url+path, nil)
	require.NoError(t, err)
	req.Header.Set("X-OpenStack-Ironic-API-Version", version)
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	var body any
	_ = json.NewDecoder(res.Body).Decode(&body)
	if res.StatusCode >= 400 {
		// the two servers word their errors their own way; the status is what matters
		body = nil
	}
	return map[string]any{"status": res.StatusCode, "body": body}
}

var isoTime = regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d`)

// normalise replaces what is each server's own: its URL's host, the
// node's UUID, and times (kept only as set or not), and sorts lists of
// settings by name.
func (s *biosSide) normalise(v any) any {
	switch x := v.(type) {
	case string:
		x = strings.ReplaceAll(x, s.url, "http://SERVER")
		if s.uuid != "" {
			x = strings.ReplaceAll(x, s.uuid, "NODE-UUID")
		}
		if isoTime.MatchString(x) {
			return "TIME"
		}
		return x
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = s.normalise(e)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = s.normalise(e)
		}
		sort.SliceStable(out, func(i, j int) bool { return settingName(out[i]) < settingName(out[j]) })
		return out
	}
	return v
}

// jsonDiff lists where got differs from want (decoded JSON), one line per
// differing leaf: its path, Ironic's value and anvil's.
func jsonDiff(path string, want, got any, out *[]string) {
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			break
		}
		keys := map[string]bool{}
		for k := range w {
			keys[k] = true
		}
		for k := range g {
			keys[k] = true
		}
		names := make([]string, 0, len(keys))
		for k := range keys {
			names = append(names, k)
		}
		sort.Strings(names)
		for _, k := range names {
			wv, wok := w[k]
			gv, gok := g[k]
			switch {
			case !wok:
				*out = append(*out, fmt.Sprintf("%s.%s: ironic has none, anvil %s", path, k, js(gv)))
			case !gok:
				*out = append(*out, fmt.Sprintf("%s.%s: ironic %s, anvil has none", path, k, js(wv)))
			default:
				jsonDiff(path+"."+k, wv, gv, out)
			}
		}
		return
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) != len(w) {
			break
		}
		for i := range w {
			p := fmt.Sprintf("%s[%d]", path, i)
			if n := settingName(w[i]); n != "" {
				p = fmt.Sprintf("%s[%s]", path, n)
			}
			jsonDiff(p, w[i], g[i], out)
		}
		return
	default:
		if js(want) == js(got) {
			return
		}
	}
	if js(want) != js(got) {
		*out = append(*out, fmt.Sprintf("%s: ironic %s, anvil %s", path, js(want), js(got)))
	}
}

func js(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func settingName(v any) string {
	m, _ := v.(map[string]any)
	for _, k := range []string{"name", "Name", "BIOS setting name"} {
		if n, ok := m[k].(string); ok {
			return n
		}
	}
	return ""
}

// runInOwnNetns re-executes the test binary for test name alone in a
// new network namespace (biosNetnsChild and env set) and requires that it
// passed. It needs root.
func runInOwnNetns(t *testing.T, name string, env ...string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to create a network namespace")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^"+name+"$", "-test.v", "-test.count=1")
	cmd.Env = append(append(os.Environ(), biosNetnsChild+"=1"), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET}
	out, err := cmd.CombinedOutput()
	if errors.Is(err, syscall.EPERM) {
		t.Skipf("cannot create a network namespace here: %v", err)
	}
	t.Logf("namespace child:\n%s", out)
	require.NoError(t, err)
	assert.Contains(t, string(out), "--- PASS: "+name)
}
