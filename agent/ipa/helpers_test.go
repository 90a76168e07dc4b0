package ipa

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/hardware"
	"github.com/anvil-metal/anvil/hardware/generic"
	"github.com/anvil-metal/anvil/protocol"
)

// testToken is an agent token as Ironic makes them (43 characters).
const testToken = "3ZpXq7mB9tKc1YdV0wLr5sHn8uGf2aEj4oQi6yTb7Nc"

// fakePower records power actions.
type fakePower struct {
	mu      sync.Mutex
	actions []string
	done    chan string
}

func newFakePower() *fakePower { return &fakePower{done: make(chan string, 4)} }

func (p *fakePower) record(a string) error {
	p.mu.Lock()
	p.actions = append(p.actions, a)
	p.mu.Unlock()
	select { // a fuzzer powers off many times; tests read the first few
	case p.done <- a:
	default:
	}
	return nil
}

func (p *fakePower) PowerOff(context.Context) error { return p.record("power_off") }
func (p *fakePower) Reboot(context.Context) error   { return p.record("reboot") }

// fakeLogs returns a fixed archive.
type fakeLogs []byte

func (l fakeLogs) Collect(context.Context) ([]byte, error) { return l, nil }

// rig is the API on an httptest server, over a real dispatcher whose
// managers are the generic one (for its step list, IPA's priorities) and
// a fake that runs every step and lets tests hold it.
type rig struct {
	t      testing.TB
	srv    *Server
	ext    *Extensions
	http   *httptest.Server
	fake   *hardware.FakeManager
	power  *fakePower
	synced chan struct{}

	mu      sync.Mutex
	release chan struct{} // when set, steps block until it is closed
	fail    string        // when set, steps fail with this message
	args    []map[string]any
}

func newRig(t testing.TB) *rig {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	r := &rig{t: t, power: newFakePower(), synced: make(chan struct{}, 4)}
	gen := generic.New(generic.Config{})
	// The fake ranks above the generic manager and runs its steps, as a
	// vendor manager would; it never touches a disk.
	r.fake = &hardware.FakeManager{
		ManagerName: "fake_manager", ManagerVersion: "7", Level: hardware.SupportServiceProvider,
		Catalogue: gen.Steps(ctx),
		RunFunc: func(ctx context.Context, kind hardware.Kind, step protocol.Step, args map[string]any, _ hardware.ProgressFunc) (any, error) {
			r.mu.Lock()
			hold, fail := r.release, r.fail
			if len(r.args) < 100 {
				r.args = append(r.args, args)
			}
			r.mu.Unlock()
			if hold != nil {
				select {
				case <-hold:
				case <-ctx.Done():
					return nil, ctx.Err()
				}
			}
			if fail != "" {
				return nil, &protocol.Error{Type: "DiskError", Code: 500, Message: fail, Details: "seen by the fake"}
			}
			if step.Step == "write_image" {
				return map[string]any{"root_device": map[string]any{"path": "/dev/fake0"}}, nil
			}
			return map[string]any{"ran": string(kind) + ":" + step.Step}, nil
		},
	}
	d, err := hardware.NewDispatcher(ctx, r.fake, gen)
	require.NoError(t, err)
	log := slog.New(slog.DiscardHandler)
	r.ext = &Extensions{Hardware: d, Power: r.power, Logs: fakeLogs("tgz"), Log: log, PowerDelay: time.Millisecond,
		Sync: func() {
			select {
			case r.synced <- struct{}{}:
			default:
			}
		}}
	r.srv = r.fresh(ctx)
	r.http = httptest.NewServer(r.srv)
	t.Cleanup(r.http.Close)
	return r
}

// fresh is a new API (no results, not locked down) over the rig's
// extensions, as a new boot of the agent would have.
func (r *rig) fresh(ctx context.Context) *Server {
	log := slog.New(slog.DiscardHandler)
	srv := &Server{Version: "9.4.0-anvil", Started: time.Unix(1700000000, 500000000), Log: log}
	r.ext.Lockdown = func() { srv.Lockdown() }
	srv.Commands = newCommands(ctx, r.ext.handlers(), log, nil)
	srv.SetToken(testToken)
	return srv
}

// hold makes steps block until the returned function is called.
func (r *rig) hold() func() {
	ch := make(chan struct{})
	r.mu.Lock()
	r.release = ch
	r.mu.Unlock()
	var once sync.Once
	return func() { once.Do(func() { close(ch) }) }
}

func (r *rig) failSteps(msg string) {
	r.mu.Lock()
	r.fail = msg
	r.mu.Unlock()
}

func (r *rig) stepArgs() []map[string]any {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]map[string]any(nil), r.args...)
}

// do sends a request and decodes the JSON answer.
func (r *rig) do(method, path string, body any) (int, map[string]any) {
	r.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = bytes.NewReader([]byte(b))
	default:
		j, err := json.Marshal(b)
		require.NoError(r.t, err)
		rd = bytes.NewReader(j)
	}
	req, err := http.NewRequest(method, r.http.URL+path, rd)
	require.NoError(r.t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(r.t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(r.t, err)
	if method == http.MethodHead {
		return resp.StatusCode, nil
	}
	require.Equal(r.t, "application/json", resp.Header.Get("Content-Type"), "body %s", raw)
	var out map[string]any
	require.NoError(r.t, json.Unmarshal(raw, &out), "body %s", raw)
	return resp.StatusCode, out
}

// command posts a command with the agent token.
func (r *rig) command(name string, params map[string]any, wait bool) (int, map[string]any) {
	r.t.Helper()
	path := "/v1/commands/?agent_token=" + testToken
	if wait {
		path += "&wait=true"
	}
	return r.do(http.MethodPost, path, map[string]any{"name": name, "params": params})
}

// roundTrip is v as it comes back out of JSON.
func roundTrip(t *testing.T, v any) any {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	var out any
	require.NoError(t, json.Unmarshal(b, &out))
	return out
}

// fault is IPA's WSME error body.
func faultBody(code, msg string) map[string]any {
	return map[string]any{"faultcode": code, "faultstring": msg}
}
