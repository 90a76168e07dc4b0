package vbmc_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/bmc/vbmc"
)

type env struct {
	srv  *vbmc.Server
	ts   *httptest.Server
	mem  *vbmc.Memory
	node *vbmc.Node
}

func newEnv(t *testing.T) *env {
	t.Helper()
	mem := vbmc.NewMemory()
	node := vbmc.NewNode("node-1", mem)
	srv := vbmc.NewServer(nil, "admin", "password", node, vbmc.NewNode("node-2", vbmc.NewMemory()))
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(ts.Close)
	return &env{srv: srv, ts: ts, mem: mem, node: node}
}

type reqOpt func(*http.Request)

func basic(u, p string) reqOpt { return func(r *http.Request) { r.SetBasicAuth(u, p) } }
func token(tok string) reqOpt  { return func(r *http.Request) { r.Header.Set("X-Auth-Token", tok) } }

func (e *env) do(t *testing.T, method, path, body string, opts ...reqOpt) (*http.Response, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(method, e.ts.URL+path, strings.NewReader(body))
	require.NoError(t, err)
	for _, o := range opts {
		o(req)
	}
	resp, err := e.ts.Client().Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	var m map[string]any
	if len(raw) > 0 && strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		require.NoError(t, json.Unmarshal(raw, &m), string(raw))
	}
	return resp, m
}

func TestServiceRootIsPublic(t *testing.T) {
	e := newEnv(t)
	resp, root := e.do(t, "GET", "/redfish/v1/", "")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, "/redfish/v1/Systems", root["Systems"].(map[string]any)["@odata.id"])
	assert.Equal(t, "/redfish/v1/SessionService/Sessions", root["Links"].(map[string]any)["Sessions"].(map[string]any)["@odata.id"])
}

func TestSessionLifecycle(t *testing.T) {
	e := newEnv(t)
	resp, _ := e.do(t, "POST", "/redfish/v1/SessionService/Sessions", `{"UserName":"admin","Password":"password"}`)
	require.Equal(t, http.StatusCreated, resp.StatusCode)
	tok, loc := resp.Header.Get("X-Auth-Token"), resp.Header.Get("Location")
	require.NotEmpty(t, tok)
	require.True(t, strings.HasPrefix(loc, "/redfish/v1/SessionService/Sessions/"))

	resp, coll := e.do(t, "GET", "/redfish/v1/Systems", "", token(tok))
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.EqualValues(t, 2, coll["Members@odata.count"])

	resp, _ = e.do(t, "GET", loc, "", token(tok))
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	resp, _ = e.do(t, "DELETE", loc, "", token(tok))
	assert.Equal(t, http.StatusNoContent, resp.StatusCode)
	resp, body := e.do(t, "GET", "/redfish/v1/Systems", "", token(tok))
	assert.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	assert.Contains(t, body, "error")
}

func TestAuthFailures(t *testing.T) {
	e := newEnv(t)
	tests := map[string]struct {
		method, path, body string
		opts               []reqOpt
	}{
		"login wrong password": {"POST", "/redfish/v1/SessionService/Sessions", `{"UserName":"admin","Password":"nope"}`, nil},
		"basic wrong password": {"GET", "/redfish/v1/Systems", "", []reqOpt{basic("admin", "nope")}},
		"no credentials":       {"GET", "/redfish/v1/Systems/node-1", "", nil},
		"bogus token":          {"GET", "/redfish/v1/Systems", "", []reqOpt{token("deadbeef")}},
		"control endpoint":     {"POST", "/control/node-1/power", "1", nil},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			resp, body := e.do(t, tc.method, tc.path, tc.body, tc.opts...)
			require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
			errObj, ok := body["error"].(map[string]any)
			require.True(t, ok, "Redfish error body")
			assert.NotEmpty(t, errObj["@Message.ExtendedInfo"])
		})
	}
	on, _ := e.mem.On(context.Background())
	assert.False(t, on)

	e.srv.SetFaults(vbmc.Faults{RejectAuth: true})
	resp, _ := e.do(t, "GET", "/redfish/v1/Systems", "", basic("admin", "password"))
	assert.Equal(t, http.StatusUnauthorized, resp.StatusCode, "RejectAuth fault")
}

func TestSystemResource(t *testing.T) {
	e := newEnv(t)
	auth := basic("admin", "password")

	resp, body := e.do(t, "GET", "/redfish/v1/Systems/nope", "", auth)
	assert.Equal(t, http.StatusNotFound, resp.StatusCode)
	assert.Contains(t, body, "error")

	resp, sys := e.do(t, "GET", "/redfish/v1/Systems/node-1", "", auth)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, "Off", sys["PowerState"])
	reset := sys["Actions"].(map[string]any)["#ComputerSystem.Reset"].(map[string]any)
	assert.Equal(t, "/redfish/v1/Systems/node-1/Actions/ComputerSystem.Reset", reset["target"])
	assert.Len(t, reset["ResetType@Redfish.AllowableValues"], len(vbmc.ResetTypes()))
	assert.Contains(t, sys["Boot"], "BootSourceOverrideTarget@Redfish.AllowableValues")

	tests := []struct {
		name   string
		method string
		path   string
		body   string
		status int
	}{
		{"patch bad target", "PATCH", "/redfish/v1/Systems/node-1", `{"Boot":{"BootSourceOverrideTarget":"Floppy"}}`, 400},
		{"patch bad mode", "PATCH", "/redfish/v1/Systems/node-1", `{"Boot":{"BootSourceOverrideMode":"Weird"}}`, 400},
		{"patch without Boot", "PATCH", "/redfish/v1/Systems/node-1", `{"AssetTag":"x"}`, 400},
		{"patch malformed", "PATCH", "/redfish/v1/Systems/node-1", `{`, 400},
		{"patch too large", "PATCH", "/redfish/v1/Systems/node-1", `{"Boot":{"BootSourceOverrideTarget":"` + strings.Repeat("x", 70<<10) + `"}}`, 400},
		{"patch full gofish style", "PATCH", "/redfish/v1/Systems/node-1", `{"Boot":{"BootSourceOverrideEnabled":"Once","BootSourceOverrideMode":"UEFI","BootSourceOverrideTarget":"Pxe","BootOrder":["a"]}}`, 204},
		{"reset unknown type", "POST", "/redfish/v1/Systems/node-1/Actions/ComputerSystem.Reset", `{"ResetType":"Explode"}`, 400},
		{"reset on", "POST", "/redfish/v1/Systems/node-1/Actions/ComputerSystem.Reset", `{"ResetType":"On"}`, 204},
		{"reset unknown system", "POST", "/redfish/v1/Systems/nope/Actions/ComputerSystem.Reset", `{"ResetType":"On"}`, 404},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp, _ := e.do(t, tc.method, tc.path, tc.body, auth)
			assert.Equal(t, tc.status, resp.StatusCode)
		})
	}
	// The Once PXE override was consumed by the "On" reset.
	n, dev := e.mem.Boots()
	assert.Equal(t, 1, n)
	assert.Equal(t, vbmc.BootPXE, dev)
	assert.Equal(t, vbmc.BootOverride{Target: "None", Enabled: "Disabled", Mode: "UEFI"}, e.node.Boot())
	_, sys = e.do(t, "GET", "/redfish/v1/Systems/node-1", "", auth)
	assert.Equal(t, "On", sys["PowerState"])
}

func TestResetSemantics(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		reset     string
		startOn   bool
		wantOn    bool
		wantBoots int
	}{
		{vbmc.ResetOn, false, true, 1},
		{vbmc.ResetOn, true, true, 1},
		{vbmc.ResetForceOff, true, false, 1},
		{vbmc.ResetGracefulShutdown, true, false, 1},
		{vbmc.ResetForceRestart, true, true, 2},
		{vbmc.ResetForceRestart, false, true, 1},
		{vbmc.ResetPowerCycle, true, true, 2},
		{vbmc.ResetPowerCycle, false, true, 1},
		{vbmc.ResetNmi, true, true, 1},
	}
	for _, tc := range tests {
		t.Run(tc.reset, func(t *testing.T) {
			mem := vbmc.NewMemory()
			n := vbmc.NewNode("n", mem)
			if tc.startOn {
				require.NoError(t, mem.PowerOn(ctx, vbmc.BootDisk))
			}
			require.NoError(t, n.Reset(ctx, tc.reset))
			on, _ := mem.On(ctx)
			assert.Equal(t, tc.wantOn, on)
			boots, _ := mem.Boots()
			assert.Equal(t, tc.wantBoots, boots)
		})
	}
}

func TestContinuousOverrideSurvivesBoots(t *testing.T) {
	ctx := context.Background()
	mem := vbmc.NewMemory()
	n := vbmc.NewNode("n", mem)
	require.NoError(t, n.SetBoot(vbmc.BootOverride{Target: "Pxe", Enabled: "Continuous"}))
	require.NoError(t, n.Reset(ctx, vbmc.ResetOn))
	require.NoError(t, n.Reset(ctx, vbmc.ResetForceRestart))
	_, dev := mem.Boots()
	assert.Equal(t, vbmc.BootPXE, dev)
	assert.Equal(t, "Pxe", n.Boot().Target)
}

func TestBusyAfterPowerOffFault(t *testing.T) {
	e := newEnv(t)
	e.srv.SetFaults(vbmc.Faults{BusyAfterPowerOff: 1 << 40})
	auth := basic("admin", "password")
	const path = "/redfish/v1/Systems/node-1/Actions/ComputerSystem.Reset"
	resp, _ := e.do(t, "POST", path, `{"ResetType":"On"}`, auth)
	require.Equal(t, 204, resp.StatusCode)
	resp, _ = e.do(t, "POST", path, `{"ResetType":"ForceOff"}`, auth)
	require.Equal(t, 204, resp.StatusCode)
	resp, body := e.do(t, "POST", path, `{"ResetType":"On"}`, auth)
	assert.Equal(t, http.StatusConflict, resp.StatusCode)
	assert.Contains(t, body, "error")
}

func TestControlEndpointAndChassisControl(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	hc := e.ts.Client()
	url := e.ts.URL + "/control/node-1"
	run := func(args ...string) (string, error) {
		var out bytes.Buffer
		err := vbmc.ChassisControl(ctx, hc, url, "admin", "password", append([]string{"0x20"}, args...), &out)
		return out.String(), err
	}

	out, err := run("get", "power")
	require.NoError(t, err)
	assert.Equal(t, "power:0\n", out)
	out, err = run("get", "boot")
	require.NoError(t, err)
	assert.Equal(t, "boot:default\n", out)

	_, err = run("set", "boot", "pxe")
	require.NoError(t, err)
	out, _ = run("get", "boot")
	assert.Equal(t, "boot:pxe\n", out)
	_, err = run("set", "power", "1")
	require.NoError(t, err)
	_, err = run("set", "power", "1") // retransmit: idempotent
	require.NoError(t, err)
	out, _ = run("get", "power")
	assert.Equal(t, "power:1\n", out)
	n, dev := e.mem.Boots()
	assert.Equal(t, 1, n)
	assert.Equal(t, vbmc.BootPXE, dev)

	// ipmi_sim re-runs the program on ipmitool retransmits: two resets in
	// a row are one reset.
	_, err = run("set", "reset", "1")
	require.NoError(t, err)
	_, err = run("set", "reset", "1")
	require.NoError(t, err)
	n, _ = e.mem.Boots()
	assert.Equal(t, 2, n)

	_, err = run("set", "identify", "5", "0")
	require.NoError(t, err)
	_, err = run("set", "shutdown", "1")
	require.NoError(t, err)
	out, _ = run("get", "power")
	assert.Equal(t, "power:0\n", out)

	_, err = run("set", "boot", "floppy")
	require.ErrorIs(t, err, vbmc.ErrControl)
	_, err = run("get", "nonsense")
	require.ErrorIs(t, err, vbmc.ErrControl)
	_, err = run("get")
	require.ErrorIs(t, err, vbmc.ErrControl)
	err = vbmc.ChassisControl(ctx, hc, "http://192.0.2.1:8000/control/node-1", "", "", []string{"0x20", "get", "power"}, io.Discard)
	require.ErrorIs(t, err, vbmc.ErrControl)
	assert.Contains(t, err.Error(), "loopback")
	err = vbmc.ChassisControl(ctx, hc, url, "admin", "wrong", []string{"0x20", "get", "power"}, io.Discard)
	require.ErrorIs(t, err, vbmc.ErrControl)
}

func TestLoadConfig(t *testing.T) {
	dir := t.TempDir()
	write := func(s string) string {
		p := filepath.Join(dir, "c.json")
		require.NoError(t, os.WriteFile(p, []byte(s), 0o600))
		return p
	}
	c, err := vbmc.LoadConfig(write(`{"listen":"127.0.0.1:8001","nodes":[{"name":"a"},{"name":"b","backend":"qemu","qemu":{"state_dir":"b","memory_mib":256,
		"disks":[{"path":"sata0.raw","serial":"SN-1","bus":"ahci"},{"path":"nvme0.raw"}]}}]}`))
	require.NoError(t, err)
	assert.Equal(t, filepath.Join(dir, "b"), c.Nodes[1].QEMU.StateDir)
	assert.Equal(t, vbmc.BusAHCI, c.Nodes[1].QEMU.Disks[0].Bus)

	for name, bad := range map[string]string{
		"unknown field":    `{"nodes":[{"name":"a","colour":"red"}]}`,
		"duplicate":        `{"nodes":[{"name":"a"},{"name":"a"}]}`,
		"bad name":         `{"nodes":[{"name":"a/b"}]}`,
		"unknown backend":  `{"nodes":[{"name":"a","backend":"vmware"}]}`,
		"qemu no dir":      `{"nodes":[{"name":"a","backend":"qemu"}]}`,
		"bad listen":       `{"listen":"nope","nodes":[{"name":"a"}]}`,
		"unknown disk bus": `{"nodes":[{"name":"a","backend":"qemu","qemu":{"state_dir":"a","disks":[{"path":"x.raw","bus":"floppy"}]}}]}`,
	} {
		_, err := vbmc.LoadConfig(write(bad))
		assert.Error(t, err, name)
	}
}

func TestETagIfMatch(t *testing.T) {
	e := newEnv(t)
	auth := basic("admin", "password")
	resp, sys := e.do(t, "GET", "/redfish/v1/Systems/node-1", "", auth)
	etag := resp.Header.Get("ETag")
	require.NotEmpty(t, etag)
	assert.Equal(t, etag, sys["@odata.etag"])
	ifMatch := func(tag string) reqOpt { return func(r *http.Request) { r.Header.Set("If-Match", tag) } }

	const reset = "/redfish/v1/Systems/node-1/Actions/ComputerSystem.Reset"
	resp, _ = e.do(t, "POST", reset, `{"ResetType":"On"}`, auth, ifMatch(etag))
	require.Equal(t, http.StatusNoContent, resp.StatusCode)
	// The power state changed, so the old ETag is stale now.
	resp, body := e.do(t, "PATCH", "/redfish/v1/Systems/node-1", `{"Boot":{"BootSourceOverrideTarget":"Pxe"}}`, auth, ifMatch(etag))
	assert.Equal(t, http.StatusPreconditionFailed, resp.StatusCode)
	assert.Contains(t, body, "error")
	resp, _ = e.do(t, "PATCH", "/redfish/v1/Systems/node-1", `{"Boot":{"BootSourceOverrideTarget":"Pxe"}}`, auth, ifMatch("*"))
	assert.Equal(t, http.StatusNoContent, resp.StatusCode)
}
