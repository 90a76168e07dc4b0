package api

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/controller/conductor"
	"github.com/anvil-metal/anvil/controller/store/sqlstore"
	"github.com/anvil-metal/anvil/controller/timeline"
)

type testEnv struct {
	t    testing.TB
	srv  *httptest.Server
	cond *conductor.Conductor
	st   *sqlstore.Store // the store's SQL side, for tests that write directly
	stop func()          // stops server, conductor and store (idempotent)
	tl   *timeline.Recorder
	// user and pass, if set, are sent as HTTP basic credentials by do
	// (the agent endpoints never need them).
	user, pass string
}

func newEnv(t testing.TB, opts ...func(*Config)) *testEnv {
	return newEnvOn(t, onSQLite, opts...)
}

// newEnvOn is newEnv on a fresh database of the given kind.
func newEnvOn(t testing.TB, kind storeKind, opts ...func(*Config)) *testEnv {
	return newEnvStore(t, kind, conductor.Config{CheckInterval: time.Hour}, ":memory:", opts...)
}

// newEnvWith builds an API over a conductor configured by cc and a SQLite
// store at path; it stops both when the test ends.
func newEnvWith(t testing.TB, cc conductor.Config, path string, opts ...func(*Config)) *testEnv {
	return newEnvStore(t, onSQLite, cc, path, opts...)
}

// newEnvStore is newEnvWith on a store of kind (path is SQLite's).
func newEnvStore(t testing.TB, kind storeKind, cc conductor.Config, path string, opts ...func(*Config)) *testEnv {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	st, sqlSt, closeStore := openTestStore(ctx, t, kind, path)
	cc.Host, cc.AutomatedClean = "test-host", true
	var probe Config // as the controller does: serving boot scripts means boots carry a nonce
	for _, o := range opts {
		o(&probe)
	}
	metrics := NewMetrics(st)
	cc.BootScripts = cc.BootScripts || probe.BootDir != ""
	cc.Suppressed = metrics.Suppressed
	tl := timeline.New(timeline.Config{Store: st})
	cc.Timeline = tl
	cond := conductor.New(st, cc, conductor.FakeDriver{})
	done, tlDone := make(chan struct{}), make(chan struct{})
	go func() { _ = cond.Run(ctx); close(done) }()
	go func() { tl.Run(ctx); close(tlDone) }()
	cfg := Config{Store: st, Conductor: cond, Metrics: metrics, Timeline: tl}
	for _, o := range opts {
		o(&cfg)
	}
	srv := httptest.NewServer(New(cfg))
	var once sync.Once
	stop := func() {
		once.Do(func() {
			srv.Close()
			cancel()
			<-done
			<-tlDone
			closeStore()
		})
	}
	t.Cleanup(stop)
	return &testEnv{t: t, srv: srv, cond: cond, st: sqlSt, stop: stop, tl: tl}
}

type resp struct {
	status int
	header http.Header
	body   []byte
}

func (r resp) json(t testing.TB) map[string]any {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal(r.body, &m), "body: %s", r.body)
	return m
}

// fault decodes Ironic's nested error body and returns faultstring.
func (r resp) fault(t testing.TB) string {
	t.Helper()
	outer := r.json(t)
	msg, ok := outer["error_message"].(string)
	require.True(t, ok, "no error_message in %s", r.body)
	var inner map[string]any
	require.NoError(t, json.Unmarshal([]byte(msg), &inner))
	if fs, ok := inner["faultstring"].(string); ok {
		return fs
	}
	return inner["description"].(string)
}

// do sends a request at the given microversion ("" = no header).
func (e *testEnv) do(method, path, ver string, body any) resp {
	e.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = bytes.NewBufferString(b)
	default:
		raw, err := json.Marshal(b)
		require.NoError(e.t, err)
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, e.srv.URL+path, rd)
	require.NoError(e.t, err)
	if ver != "" {
		req.Header.Set(versionHeader, ver)
	}
	req.Header.Set("Content-Type", "application/json")
	if e.user != "" {
		req.SetBasicAuth(e.user, e.pass)
	}
	res, err := e.srv.Client().Do(req)
	require.NoError(e.t, err)
	defer res.Body.Close()
	data, err := io.ReadAll(res.Body)
	require.NoError(e.t, err)
	return resp{status: res.StatusCode, header: res.Header, body: data}
}

const latest = "1.110"

func (e *testEnv) createNode(name string, extra map[string]any) map[string]any {
	e.t.Helper()
	body := map[string]any{"driver": "fake-hardware", "name": name}
	for k, v := range extra {
		body[k] = v
	}
	r := e.do("POST", "/v1/nodes", latest, body)
	require.Equal(e.t, http.StatusCreated, r.status, string(r.body))
	return r.json(e.t)
}

func (e *testEnv) provision(node, target string, extra map[string]any) resp {
	e.t.Helper()
	body := map[string]any{"target": target}
	for k, v := range extra {
		body[k] = v
	}
	return e.do("PUT", "/v1/nodes/"+node+"/states/provision", latest, body)
}

// waitState polls the node until it reaches want and no work is queued.
func (e *testEnv) waitState(node, want string) map[string]any {
	e.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		n := e.do("GET", "/v1/nodes/"+node, latest, nil).json(e.t)
		if n["provision_state"] == want && n["reservation"] == nil && e.cond.Idle() {
			return n
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("node %s stuck in %v (want %s), last_error=%v", node, n["provision_state"], want, n["last_error"])
		}
		time.Sleep(5 * time.Millisecond)
	}
}
