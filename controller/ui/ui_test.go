package ui

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/controller/api"
	"github.com/anvil-metal/anvil/controller/conductor"
	"github.com/anvil-metal/anvil/controller/store"
	"github.com/anvil-metal/anvil/controller/store/sqlite"
	"github.com/anvil-metal/anvil/protocol"
)

// env is the dashboard in front of a real API over an SQLite store,
// assembled as the controller does.
type env struct {
	st  store.Store
	srv *httptest.Server
	ui  *Handler
}

func newEnv(t testing.TB, path string, auth Authenticator) *env {
	t.Helper()
	st, err := sqlite.Open(context.Background(), path)
	require.NoError(t, err)
	t.Cleanup(func() { st.Close() })
	cond := conductor.New(st, conductor.Config{Host: "ui-test"}, conductor.FakeDriver{})
	var apiAuth api.Authenticator
	if auth != nil {
		apiAuth = auth
	}
	srv := api.New(api.Config{Store: st, Conductor: cond, Auth: apiAuth})
	h := New(Config{API: srv, Counts: st, BIOS: st, Auth: auth})
	root := http.NewServeMux()
	root.Handle("/ui", h)
	root.Handle("/ui/", h)
	root.Handle("/", Protect(srv))
	hs := httptest.NewServer(root)
	hs.Config.RegisterOnShutdown(h.Close)
	t.Cleanup(hs.Close)
	return &env{st: st, srv: hs, ui: h}
}

// addNode stores a node directly (no conductor work needed to read it).
func (e *env) addNode(t testing.TB, name, state string, mutate func(n *store.Node)) *store.Node {
	t.Helper()
	n := &store.Node{UUID: uuid.NewString(), Name: &name, Driver: "fake-hardware", ProvisionState: state, CreatedAt: time.Now().UTC()}
	if mutate != nil {
		mutate(n)
	}
	require.NoError(t, e.st.CreateNode(context.Background(), n))
	return n
}

func (e *env) get(t testing.TB, path string, hdr ...string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequest("GET", e.srv.URL+path, nil)
	require.NoError(t, err)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	res, err := e.srv.Client().Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	var m map[string]any
	body, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	if len(body) > 0 && body[0] == '{' {
		require.NoError(t, json.Unmarshal(body, &m), string(body))
	}
	return res.StatusCode, m
}

func faultstring(t testing.TB, m map[string]any) string {
	t.Helper()
	var inner map[string]any
	require.NoError(t, json.Unmarshal([]byte(m["error_message"].(string)), &inner))
	return inner["faultstring"].(string)
}

func names(rows []any) []string {
	var out []string
	for _, r := range rows {
		out = append(out, r.(map[string]any)["name"].(string))
	}
	return out
}

func TestCounts(t *testing.T) {
	e := newEnv(t, ":memory:", nil)
	for i := range 5 {
		e.addNode(t, fmt.Sprintf("a%d", i), "available", nil)
	}
	e.addNode(t, "m", "manageable", nil)
	code, m := e.get(t, "/ui/api/counts")
	require.Equal(t, 200, code)
	assert.Equal(t, 6.0, m["total"])
	assert.Equal(t, map[string]any{"available": 5.0, "manageable": 1.0}, m["states"])
}

func TestFleetPagesSortsAndFiltersThroughTheAPI(t *testing.T) {
	e := newEnv(t, ":memory:", nil)
	for i := range 120 {
		state := "available"
		if i%10 == 0 {
			state = "clean failed"
		}
		e.addNode(t, fmt.Sprintf("n%03d", i), state, func(n *store.Node) {
			n.Maintenance = i%7 == 0
			n.DriverInfo = map[string]any{"ipmi_password": "secret"}
		})
	}
	var all []string
	marker := ""
	for pages := 0; ; pages++ {
		require.Less(t, pages, 4)
		code, m := e.get(t, "/ui/api/fleet?limit=50&sort_key=name&marker="+marker)
		require.Equal(t, 200, code, m)
		all = append(all, names(m["nodes"].([]any))...)
		marker = m["next_marker"].(string)
		if marker == "" {
			break
		}
	}
	require.Len(t, all, 120, "three pages cover the fleet once")
	assert.Equal(t, "n000", all[0])
	assert.Equal(t, "n119", all[119])

	code, m := e.get(t, "/ui/api/fleet?limit=3&sort_key=name&sort_dir=desc")
	require.Equal(t, 200, code)
	assert.Equal(t, []string{"n119", "n118", "n117"}, names(m["nodes"].([]any)))

	code, m = e.get(t, "/ui/api/fleet?provision_state=clean+failed&maintenance=true")
	require.Equal(t, 200, code)
	assert.Equal(t, []string{"n000", "n070"}, names(m["nodes"].([]any)))
	row := m["nodes"].([]any)[0].(map[string]any)
	assert.NotContains(t, row, "driver_info", "a row carries only what the table shows")

	for q, want := range map[string]string{
		"bogus=1":                    "Unknown argument(s): bogus",
		"provision_state=sleeping":   `Invalid provision_state "sleeping"`,
		"marker=" + uuid.NewString(): "could not be found",
		"sort_key=driver_info":       "invalid field for sorting",
	} {
		code, m := e.get(t, "/ui/api/fleet?"+q)
		assert.Equal(t, 400, code, q)
		assert.Contains(t, faultstring(t, m), want, q)
	}
}

func TestRunningStepIsWorkedOutOnce(t *testing.T) {
	e := newEnv(t, ":memory:", nil)
	n := e.addNode(t, "busy", "clean wait", func(n *store.Node) {
		n.CleanStep = map[string]any{"interface": "deploy", "step": "erase_devices", "priority": 10}
		n.DriverInternalInfo = map[string]any{
			"clean_steps":      []any{map[string]any{"step": "erase_devices_metadata"}, map[string]any{"step": "erase_devices"}},
			"clean_step_index": 1,
			"agent_command_status": map[string]any{"state": "RUNNING", "started_at": "2026-11-25T06:00:00Z",
				"progress": map[string]any{"percent": 40, "bytes_done": 400, "bytes_total": 1000, "device": "/dev/sda", "message": "overwriting"}},
			"agent_step_cache": map[string]any{"clean": []any{map[string]any{"step": "erase_devices"}}},
		}
	})
	e.addNode(t, "idle", "available", nil)
	want := map[string]any{"name": "deploy.erase_devices", "index": 2.0, "total": 2.0, "percent": 40.0, "bytes_done": 400.0,
		"bytes_total": 1000.0, "device": "/dev/sda", "message": "overwriting", "started_at": "2026-11-25T06:00:00Z"}

	code, m := e.get(t, "/ui/api/fleet?sort_key=name")
	require.Equal(t, 200, code)
	rows := m["nodes"].([]any)
	assert.Equal(t, want, rows[0].(map[string]any)["step"], "the fleet row")
	assert.Nil(t, rows[1].(map[string]any)["step"])

	code, m = e.get(t, "/ui/api/nodes/"+n.UUID)
	require.Equal(t, 200, code)
	assert.Equal(t, want, m["step"], "the node page")
	assert.Equal(t, "busy", m["node"].(map[string]any)["name"], "with the API's own document")

	code, m = e.get(t, "/ui/api/nodes/nope")
	assert.Equal(t, 404, code)
	assert.Contains(t, faultstring(t, m), "nope")
}

// readEvent reads one SSE data line.
func readEvent(t *testing.T, r *bufio.Reader) map[string]any {
	t.Helper()
	for {
		line, err := r.ReadString('\n')
		require.NoError(t, err)
		if data, ok := strings.CutPrefix(line, "data: "); ok {
			var m map[string]any
			require.NoError(t, json.Unmarshal([]byte(data), &m))
			return m
		}
	}
}

func TestWatchSendsChangesOnOneStream(t *testing.T) {
	e := newEnv(t, ":memory:", nil)
	n := e.addNode(t, "w1", "available", nil)
	q := url.Values{"path": {"/ui/api/counts", "/v1/nodes/" + n.UUID + "?fields=name,maintenance"}, "interval_ms": {"200"}}
	res, err := e.srv.Client().Get(e.srv.URL + "/ui/api/watch?" + q.Encode())
	require.NoError(t, err)
	defer res.Body.Close()
	require.Equal(t, 200, res.StatusCode)
	assert.Equal(t, "text/event-stream", res.Header.Get("Content-Type"))
	r := bufio.NewReader(res.Body)
	first := map[float64]map[string]any{}
	for range 2 {
		ev := readEvent(t, r)
		first[ev["i"].(float64)] = ev
	}
	assert.Equal(t, 1.0, first[0]["body"].(map[string]any)["total"])
	assert.Equal(t, false, first[1]["body"].(map[string]any)["maintenance"])

	// a change to the node is sent; the unchanged counts are not
	_, err = store.MutateNode(context.Background(), e.st, n.UUID, func(n *store.Node) error { n.Maintenance = true; return nil })
	require.NoError(t, err)
	ev := readEvent(t, r)
	assert.Equal(t, 1.0, ev["i"])
	assert.Equal(t, true, ev["body"].(map[string]any)["maintenance"])
	e.addNode(t, "w2", "enroll", nil)
	ev = readEvent(t, r)
	assert.Equal(t, 0.0, ev["i"])
	assert.Equal(t, 2.0, ev["body"].(map[string]any)["total"])

	// shutting down ends the stream at once
	e.ui.Close()
	_, err = io.Copy(io.Discard, r)
	assert.NoError(t, err)
}

func TestWatchRefuses(t *testing.T) {
	e := newEnv(t, ":memory:", nil)
	for _, q := range []string{
		"",
		"path=/v1/ports",
		"path=/ui/api/watch%3Fpath%3D/ui/api/counts",
		"path=/v1/nodes/../ports",
		"path=//evil.example/v1/nodes",
		"path=/ui/api/counts&interval_ms=soon",
		"path=/v1/nodes/n1/validate",
		"path=/v1/nodes/n1/states",
		"path=/v1/nodes//history",
		"path=/ui/api/nodes/n1/x",
		"path=/ui/api/counts&path=/ui/api/counts&path=/ui/api/counts&path=/ui/api/counts&path=/ui/api/counts",
	} {
		code, m := e.get(t, "/ui/api/watch?"+q)
		assert.Equal(t, 400, code, q)
		assert.NotEmpty(t, faultstring(t, m), q)
	}
}

func TestIndexHeadersAndStaticFiles(t *testing.T) {
	e := newEnv(t, ":memory:", nil)
	res, err := e.srv.Client().Get(e.srv.URL + "/ui/")
	require.NoError(t, err)
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	require.Equal(t, 200, res.StatusCode)
	assert.Contains(t, string(body), `<script type="module" src="/ui/static/js/app.js">`)
	assert.Contains(t, res.Header.Get("Content-Security-Policy"), "default-src 'none'")
	assert.Contains(t, res.Header.Get("Content-Security-Policy"), "frame-ancestors 'none'")
	var token *http.Cookie
	for _, c := range res.Cookies() {
		if c.Name == CSRFCookie {
			token = c
		}
	}
	require.NotNil(t, token, "the page gets its CSRF token")
	assert.Equal(t, http.SameSiteStrictMode, token.SameSite)
	assert.True(t, validToken(token.Value))

	for path, ctype := range map[string]string{"/ui/static/app.css": "text/css", "/ui/static/js/app.js": "javascript",
		"/ui/static/js/node.js": "javascript", "/ui/static/js/fleet.js": "javascript", "/ui/static/js/lib.js": "javascript", "/ui/static/js/bios.js": "javascript",
		"/ui/static/js/evidence.js": "javascript"} {
		res, err := e.srv.Client().Get(e.srv.URL + path)
		require.NoError(t, err)
		res.Body.Close()
		assert.Equal(t, 200, res.StatusCode, path)
		assert.Contains(t, res.Header.Get("Content-Type"), ctype, path)
	}
	code, _ := e.get(t, "/ui/static/nope.js")
	assert.Equal(t, 404, code)
	code, m := e.get(t, "/ui/nope")
	assert.Equal(t, 404, code)
	assert.NotEmpty(t, faultstring(t, m))
}

// staticAuth is a fake Authenticator: one user and password.
type staticAuth struct{ user, pass string }

func (a staticAuth) Authenticate(r *http.Request) bool {
	u, p, ok := r.BasicAuth()
	return ok && u == a.user && p == a.pass
}

func TestDashboardNeedsTheAPIsCredentials(t *testing.T) {
	e := newEnv(t, ":memory:", staticAuth{"op", "pw"})
	n := e.addNode(t, "secret-bios", "manageable", nil)
	for _, path := range []string{"/ui/", "/ui/static/js/app.js", "/ui/api/counts", "/ui/api/fleet", "/ui/api/watch?path=/ui/api/counts",
		"/ui/api/nodes/" + n.UUID + "/bios", "/ui/api/nodes/" + n.UUID + "/firmware"} {
		res, err := e.srv.Client().Get(e.srv.URL + path)
		require.NoError(t, err)
		res.Body.Close()
		assert.Equal(t, 401, res.StatusCode, path)
		assert.Equal(t, `Basic realm="anvil"`, res.Header.Get("WWW-Authenticate"), path)
	}
	req, _ := http.NewRequest("GET", e.srv.URL+"/ui/api/fleet", nil)
	req.SetBasicAuth("op", "pw")
	res, err := e.srv.Client().Do(req)
	require.NoError(t, err)
	res.Body.Close()
	assert.Equal(t, 200, res.StatusCode, "and reads the API as the same user")
}

func TestWatchable(t *testing.T) {
	for path, want := range map[string]bool{
		"/v1/nodes": true, "/v1/nodes?limit=5": true, "/v1/nodes/detail": true, "/v1/nodes/n1": true,
		"/v1/nodes/n1/history": true, "/v1/nodes/n1/inventory": true, "/v1/nodes/n1/cleaning/steps": true, "/v1/nodes/n1/boot-timeline?limit=1": true,
		"/ui/api/counts": true, "/ui/api/fleet?limit=50": true, "/ui/api/nodes/n1": true,
		"/v1/nodes/n1/validate": false, "/v1/nodes/n1/states": false, "/v1/ports": false, "/ui/api/watch": false,
		"/v1/nodes/../ports": false, "/v1/nodes/./n1": false, "//v1/nodes": false, "v1/nodes": false, "/": false, "": false,
	} {
		assert.Equal(t, want, watchable(path), path)
	}
}

// TestRunningServiceStep: a node in service wait shows its service step
// (1.87) with its place in the service plan, like a clean step.
func TestRunningServiceStep(t *testing.T) {
	e := newEnv(t, ":memory:", nil)
	n := e.addNode(t, "svc", "service wait", func(n *store.Node) {
		n.ServiceStep = map[string]any{"interface": "firmware", "step": "update"}
		n.Operation.Service = &store.StepPlan{Steps: []protocol.Step{{Interface: "bios", Step: "apply_configuration"},
			{Interface: "firmware", Step: "update"}}, Index: 1}
	})
	code, m := e.get(t, "/ui/api/fleet?provision_state=service+wait")
	require.Equal(t, 200, code)
	rows := m["nodes"].([]any)
	require.Len(t, rows, 1)
	assert.Equal(t, map[string]any{"name": "firmware.update", "index": 2.0, "total": 2.0, "percent": 0.0}, rows[0].(map[string]any)["step"])
	code, m = e.get(t, "/ui/api/nodes/"+n.UUID)
	require.Equal(t, 200, code)
	assert.Equal(t, "firmware.update", m["step"].(map[string]any)["name"])
}
