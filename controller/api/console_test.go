package api

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/controller/conductor"
	"github.com/anvil-metal/anvil/controller/console"
)

// newConsoleEnv serves ipmi nodes whose consoles a console.Fake plays.
func newConsoleEnv(t *testing.T, opts ...func(*Config)) (*testEnv, *console.Fake) {
	t.Helper()
	f := console.NewFake()
	m := console.New(console.Config{Opener: f, MinBackoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond})
	t.Cleanup(m.Close)
	st, sqlSt, closeStore := openTestStore(context.Background(), t, onSQLite, ":memory:")
	cond := conductor.New(st, conductor.Config{Host: "test-host", CheckInterval: time.Hour}, conductor.FakeDriver{},
		conductor.NewBMCDriver("ipmi", nil, nil))
	cfg := Config{Store: st, Conductor: cond, Consoles: m}
	for _, o := range opts {
		o(&cfg)
	}
	srv := httptest.NewServer(New(cfg))
	t.Cleanup(func() { srv.Close(); closeStore() })
	return &testEnv{t: t, srv: srv, cond: cond, st: sqlSt, stop: func() {}}, f
}

func ipmiConsoleNode(e *testEnv, name, iface string) map[string]any {
	return e.createNode(name, map[string]any{"driver": "ipmi", "console_interface": iface,
		"driver_info": map[string]any{"ipmi_address": "127.0.0.1", "ipmi_username": "admin", "ipmi_password": "pw"}})
}

// TestConsoleStatesAsIronic: GET/PUT /states/console answer as Ironic's
// (202 with a Location and no body, console_enabled and console_info), and
// a node without a console interface gets Ironic's 400.
func TestConsoleStatesAsIronic(t *testing.T) {
	e, f := newConsoleEnv(t, func(c *Config) { c.ConsoleTCP = "192.0.2.1:6390" })
	drv := e.do("GET", "/v1/drivers/ipmi", latest, nil).json(t)
	assert.Equal(t, []any{"ipmitool-socat", "no-console"}, drv["enabled_console_interfaces"])
	assert.Equal(t, "no-console", drv["default_console_interface"])
	ipmiConsoleNode(e, "sol-1", "ipmitool-socat")
	r := e.do("GET", "/v1/nodes/sol-1/states/console", latest, nil)
	require.Equal(t, http.StatusOK, r.status, string(r.body))
	assert.JSONEq(t, `{"console_enabled": false, "console_info": null}`, string(r.body))

	r = e.do("PUT", "/v1/nodes/sol-1/states/console", latest, map[string]any{"enabled": true})
	require.Equal(t, http.StatusAccepted, r.status, string(r.body))
	assert.Empty(t, r.body)
	assert.True(t, strings.HasSuffix(r.header.Get("Location"), "/v1/nodes/sol-1/states/console"), r.header.Get("Location"))
	select {
	case <-f.Opened():
	case <-time.After(5 * time.Second):
		t.Fatal("enabling did not open a session")
	}
	got := e.do("GET", "/v1/nodes/sol-1/states/console", latest, nil).json(t)
	assert.Equal(t, true, got["console_enabled"])
	info := got["console_info"].(map[string]any)
	assert.Equal(t, "websocket", info["type"])
	assert.Regexp(t, `^ws://127\.0\.0\.1:\d+/v1/nodes/[0-9a-f-]{36}/console/ws$`, info["url"])
	assert.Equal(t, "tcp://192.0.2.1:6390", info["tcp_url"])
	assert.Len(t, info["tcp_token"], 48)
	assert.Equal(t, true, e.do("GET", "/v1/nodes/sol-1", latest, nil).json(t)["console_enabled"])
	assert.Equal(t, true, e.do("GET", "/v1/nodes/sol-1/states", latest, nil).json(t)["console_enabled"])

	r = e.do("PUT", "/v1/nodes/sol-1/states/console", latest, map[string]any{"enabled": "false"})
	require.Equal(t, http.StatusAccepted, r.status, string(r.body))
	assert.JSONEq(t, `{"console_enabled": false, "console_info": null}`, string(e.do("GET", "/v1/nodes/sol-1/states/console", latest, nil).body))
	assert.Equal(t, 1, f.Closes())

	for name, c := range map[string]struct {
		node string
		body any
		want string
	}{
		"missing enabled": {"sol-1", map[string]any{}, "Missing argument"},
		"bad enabled":     {"sol-1", map[string]any{"enabled": "maybe"}, "Invalid enabled: Unrecognized value 'maybe'"},
		"no console":      {"plain", map[string]any{"enabled": true}, "Driver ipmi does not support console (disabled or not implemented)."},
		"no address":      {"noaddr", map[string]any{"enabled": true}, "Missing the following IPMI credentials in node's driver_info: ['ipmi_address']."},
	} {
		t.Run(name, func(t *testing.T) {
			switch c.node {
			case "plain":
				ipmiConsoleNode(e, "plain", "no-console")
			case "noaddr":
				e.createNode("noaddr", map[string]any{"driver": "ipmi", "console_interface": "ipmitool-socat"})
			}
			r := e.do("PUT", "/v1/nodes/"+c.node+"/states/console", latest, c.body)
			assert.Equal(t, http.StatusBadRequest, r.status)
			assert.Contains(t, string(r.body), c.want)
		})
	}
	r = e.do("PUT", "/v1/nodes/nosuch/states/console", latest, map[string]any{"enabled": true})
	assert.Equal(t, http.StatusNotFound, r.status)
}

// TestConsoleWebSocketAndLog: a WebSocket viewer gets the scrollback and
// live output, types into the console, a second one is read-only, the log
// endpoint serves the scrollback as text, and disabling closes the sockets.
func TestConsoleWebSocketAndLog(t *testing.T) {
	e, f := newConsoleEnv(t)
	n := ipmiConsoleNode(e, "sol-ws", "ipmitool-socat")
	r := e.do("GET", "/v1/nodes/sol-ws/console/ws", latest, nil)
	assert.Equal(t, http.StatusBadRequest, r.status, "not enabled yet")
	assert.Contains(t, string(r.body), "is not enabled")
	require.Equal(t, http.StatusAccepted, e.do("PUT", "/v1/nodes/sol-ws/states/console", latest, map[string]any{"enabled": true}).status)
	<-f.Opened()
	f.Print("[    0.000000] Linux version 6.1.0\r\n")

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	url := "ws" + strings.TrimPrefix(e.srv.URL, "http") + "/v1/nodes/" + n["uuid"].(string) + "/console/ws"
	dial := func() (*websocket.Conn, map[string]any) {
		c, _, err := websocket.Dial(ctx, url, nil)
		require.NoError(t, err)
		typ, p, err := c.Read(ctx)
		require.NoError(t, err)
		require.Equal(t, websocket.MessageText, typ)
		var st map[string]any
		require.NoError(t, json.Unmarshal(p, &st))
		return c, st
	}
	readUntil := func(c *websocket.Conn, want string) {
		t.Helper()
		var got strings.Builder
		for !strings.Contains(got.String(), want) {
			_, p, err := c.Read(ctx)
			require.NoError(t, err, "so far %q", got.String())
			got.Write(p)
		}
	}
	first, st := dial()
	assert.Equal(t, true, st["input"])
	second, st := dial()
	assert.Equal(t, false, st["input"], "one writer at a time")
	readUntil(first, "Linux version 6.1.0")
	readUntil(second, "Linux version 6.1.0")
	f.Print("login: ")
	readUntil(first, "login: ")
	require.NoError(t, second.Write(ctx, websocket.MessageText, []byte("ignored")))
	require.NoError(t, first.Write(ctx, websocket.MessageText, []byte("root\r")))
	require.Eventually(t, func() bool { return f.Typed() == "root\r" }, 5*time.Second, 5*time.Millisecond)

	r = e.do("GET", "/v1/nodes/sol-ws/console/log", latest, nil)
	require.Equal(t, http.StatusOK, r.status)
	assert.Equal(t, "text/plain; charset=utf-8", r.header.Get("Content-Type"))
	assert.Contains(t, string(r.body), "Linux version 6.1.0\r\nlogin: ")

	// A page of another site cannot open the socket with the operator's credentials.
	_, resp, err := websocket.Dial(ctx, url, &websocket.DialOptions{HTTPHeader: http.Header{"Origin": {"https://evil.example"}}})
	require.Error(t, err)
	assert.Equal(t, http.StatusForbidden, resp.StatusCode)

	require.Equal(t, http.StatusAccepted, e.do("PUT", "/v1/nodes/sol-ws/states/console", latest, map[string]any{"enabled": false}).status)
	for _, c := range []*websocket.Conn{first, second} {
		for {
			if _, _, err := c.Read(ctx); err != nil {
				assert.Equal(t, websocket.StatusNormalClosure, websocket.CloseStatus(err), err)
				break
			}
		}
	}
	assert.Contains(t, string(e.do("GET", "/v1/nodes/sol-ws/console/log", latest, nil).body), "login: ", "the log outlives the session")
}

// TestConsoleHeldElsewhere: in a group of controllers, one that does not
// hold the node's console says which one does.
func TestConsoleHeldElsewhere(t *testing.T) {
	e, _ := newConsoleEnv(t, func(c *Config) {
		c.ConsoleOwner = func(context.Context, string) (string, bool, error) { return "peer-b", false, nil }
	})
	ipmiConsoleNode(e, "far", "ipmitool-socat")
	require.Equal(t, http.StatusAccepted, e.do("PUT", "/v1/nodes/far/states/console", latest, map[string]any{"enabled": true}).status)
	info := e.do("GET", "/v1/nodes/far/states/console", latest, nil).json(t)["console_info"].(map[string]any)
	assert.Equal(t, "peer-b", info["controller"])
	for _, p := range []string{"/console/ws", "/console/log"} {
		r := e.do("GET", "/v1/nodes/far"+p, latest, nil)
		assert.Equal(t, http.StatusConflict, r.status)
		assert.Contains(t, string(r.body), "is held by controller peer-b")
	}
}
