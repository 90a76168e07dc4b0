package ipa

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/agent"
	"github.com/anvil-metal/anvil/hardware"
	"github.com/anvil-metal/anvil/protocol"
)

func TestHeartbeatIntervalIsIPAs(t *testing.T) {
	assert.Equal(t, 3*time.Second, heartbeatInterval(10, 0))
	assert.Equal(t, 4500*time.Millisecond, heartbeatInterval(10, 0.5))
	assert.Less(t, heartbeatInterval(10, 0.9999999), 6*time.Second)
	assert.Equal(t, 90*time.Second, heartbeatInterval(300, 0), "Ironic's default [api]ramdisk_heartbeat_timeout")
	assert.Equal(t, 24*time.Hour, heartbeatInterval(1e300, 0.5), "no overflow into a negative period")
}

func TestNextLockPause(t *testing.T) {
	var got []time.Duration
	p := time.Duration(0)
	for range 5 {
		p = nextLockPause(p)
		got = append(got, p)
	}
	assert.Equal(t, []time.Duration{5 * time.Second, 10 * time.Second, 30 * time.Second, 30 * time.Second, 30 * time.Second}, got)
}

func TestWithBootIF(t *testing.T) {
	macs := []string{"52:54:00:00:00:02", "52:54:00:00:00:01", "52:54:00:00:00:03"}
	for _, tc := range []struct {
		bootif string
		want   []string
	}{
		{"01-52-54-00-00-00-01", []string{"52:54:00:00:00:01", "52:54:00:00:00:02", "52:54:00:00:00:03"}},
		{"52:54:00:00:00:03", []string{"52:54:00:00:00:03", "52:54:00:00:00:02", "52:54:00:00:00:01"}},
		{"01-52-54-00-AA-BB-CC", []string{"52:54:00:aa:bb:cc", "52:54:00:00:00:02", "52:54:00:00:00:01", "52:54:00:00:00:03"}},
		{"", macs},
		{"garbage", macs},
	} {
		assert.Equal(t, tc.want, withBootIF(macs, tc.bootif), tc.bootif)
	}
}

// agentRig runs Agent.Run against a fake Ironic, serving IPA's API on a
// loopback listener the test calls as Ironic would.
type agentRig struct {
	ironic *fakeIronic
	agent  *Agent
	api    string // where the agent's API listens
	done   chan error
	cancel context.CancelFunc
}

func startAgent(t *testing.T, f *fakeIronic, minHeartbeat time.Duration) *agentRig {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	fake := &hardware.FakeManager{ManagerName: "fake_manager", ManagerVersion: "1", Level: hardware.SupportGeneric,
		Catalogue: hardware.Catalogue{Clean: []protocol.Step{{Interface: "deploy", Step: "erase_devices_metadata", Priority: 99, Abortable: true}}},
		RunFunc: func(context.Context, hardware.Kind, protocol.Step, map[string]any, hardware.ProgressFunc) (any, error) {
			time.Sleep(20 * time.Millisecond)
			return nil, nil
		}}
	a := &Agent{
		Config: Config{API: f.srv.URL, AdvertiseHost: "127.0.0.1", AdvertisePort: 19999, BootIF: "01-52-54-00-00-00-01"},
		// Two NICs; BOOTIF's is looked up first.
		Network: agent.StaticMACs{"52:54:00:00:00:02", "52:54:00:00:00:01"},
		Hardware: func(ctx context.Context, _ map[string]any) (Hardware, error) {
			return hardware.NewDispatcher(ctx, fake)
		},
		Log:          slog.New(slog.DiscardHandler),
		Version:      "9.9-anvil",
		Backoff:      agent.Backoff{Initial: 5 * time.Millisecond, Max: 10 * time.Millisecond},
		Listener:     ln,
		MinHeartbeat: minHeartbeat,
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &agentRig{ironic: f, agent: a, api: "http://" + ln.Addr().String(), done: make(chan error, 1), cancel: cancel}
	go func() { r.done <- a.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-r.done:
		case <-time.After(10 * time.Second):
			t.Error("Run did not return after its context ended")
		}
	})
	return r
}

// beats waits for n heartbeats and returns when each arrived.
func (r *agentRig) beats(t *testing.T, n int, within time.Duration) []seen {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		got := r.ironic.requests("/v1/heartbeat/")
		if len(got) >= n {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d heartbeats after %v, want %d", len(got), within, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// post sends a command as Ironic's agent client does.
func (r *agentRig) post(t *testing.T, name string, params map[string]any, token string, wait bool) (int, map[string]any) {
	t.Helper()
	b, err := json.Marshal(map[string]any{"name": name, "params": params})
	require.NoError(t, err)
	resp, err := http.Post(fmt.Sprintf("%s/v1/commands/?wait=%v&agent_token=%s", r.api, wait, token), "application/json", bytes.NewReader(b))
	require.NoError(t, err)
	defer resp.Body.Close()
	var out map[string]any
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&out))
	return resp.StatusCode, out
}

func TestAgentLooksUpHeartbeatsAndServes(t *testing.T) {
	f := newFakeIronic(t, "1.82")
	f.lookup = func(n int, _ seen) (int, any) {
		if n <= 2 { // not enrolled yet: IPA keeps looking
			return 404, map[string]any{"error_message": map[string]any{"faultstring": "Node could not be found."}}
		}
		return 200, lookupAnswer(1, testToken)
	}
	f.beat = func(int, seen) (int, any) { return 202, nil }
	r := startAgent(t, f, 50*time.Millisecond)

	beats := r.beats(t, 4, 10*time.Second)
	lookups := f.requests("/v1/lookup")
	require.Len(t, lookups, 3)
	assert.Equal(t, "addresses=52%3A54%3A00%3A00%3A00%3A01%2C52%3A54%3A00%3A00%3A00%3A02", lookups[0].query, "BOOTIF's MAC first")
	for _, b := range beats {
		assert.Equal(t, "/v1/heartbeat/1be26c0b-03f2-4d2e-ae87-c02d7f33c123", b.path)
		assert.Equal(t, map[string]any{"callback_url": "http://127.0.0.1:19999", "agent_token": testToken, "agent_version": "9.9-anvil"}, b.body)
		assert.Equal(t, "1.68", b.header.Get("X-OpenStack-Ironic-API-Version"))
	}

	// Ironic calls back with the token it handed out at lookup.
	code, res := r.post(t, "clean.get_clean_steps", map[string]any{"node": map[string]any{}, "ports": []any{}}, testToken, true)
	assert.Equal(t, 200, code)
	assert.Equal(t, "SUCCEEDED", res["command_status"])
	code, _ = r.post(t, "clean.get_clean_steps", map[string]any{}, "stolen", true)
	assert.Equal(t, 401, code)
}

// TestAgentHeartbeatPeriod checks the period Ironic asks for: with
// heartbeat_timeout 1 s, IPA heartbeats every 0.3-0.6 s.
func TestAgentHeartbeatPeriod(t *testing.T) {
	f := newFakeIronic(t, "1.82")
	f.lookup = func(int, seen) (int, any) { return 200, lookupAnswer(1, testToken) }
	f.beat = func(int, seen) (int, any) { return 202, nil }
	r := startAgent(t, f, 50*time.Millisecond)
	beats := r.beats(t, 6, 10*time.Second)
	var times []time.Time
	for _, b := range beats {
		times = append(times, b.at)
	}
	for i := 1; i < len(times); i++ {
		gap := times[i].Sub(times[i-1])
		assert.GreaterOrEqual(t, gap, 290*time.Millisecond, "heartbeat %d", i)
		assert.LessOrEqual(t, gap, 900*time.Millisecond, "heartbeat %d (0.6 s plus scheduling slack)", i)
	}
}

// TestAgentForcedHeartbeat: a finished asynchronous command heartbeats at
// once (no sooner than MinHeartbeat after the last), as IPA's
// force_heartbeat does, so Ironic does not wait out a long period.
func TestAgentForcedHeartbeat(t *testing.T) {
	f := newFakeIronic(t, "1.82")
	f.lookup = func(int, seen) (int, any) { return 200, lookupAnswer(100, testToken) } // next regular one in 30-60 s
	f.beat = func(int, seen) (int, any) { return 202, nil }
	r := startAgent(t, f, 200*time.Millisecond)
	r.beats(t, 1, 10*time.Second)
	start := time.Now()
	code, res := r.post(t, "clean.execute_clean_step", map[string]any{
		"step": map[string]any{"interface": "deploy", "step": "erase_devices_metadata", "priority": 99},
		"node": map[string]any{}, "ports": []any{},
	}, testToken, false)
	require.Equal(t, 200, code)
	require.Equal(t, "RUNNING", res["command_status"])
	r.beats(t, 2, 5*time.Second)
	assert.Less(t, time.Since(start), 5*time.Second)
}

// TestAgentLooksUpAgainWhenIronicDropsItsToken: Ironic wipes the token when
// an operation ends; with fake power the ramdisk keeps running, so after
// three refusals the agent looks itself up again (Run returns and its
// caller restarts it). Conflicts (a locked node) are not refusals.
func TestAgentLooksUpAgainWhenIronicDropsItsToken(t *testing.T) {
	f := newFakeIronic(t, "1.82")
	f.lookup = func(int, seen) (int, any) { return 200, lookupAnswer(0.1, testToken) }
	answers := []struct {
		code int
		msg  string
	}{
		{409, "Node is locked by host c1"}, {409, "Node is locked by host c1"}, {409, "Node is locked by host c1"},
		{400, "Invalid or missing agent token received."}, {404, "Node could not be found."},
		{401, "Agent token is invalid."},
	}
	f.beat = func(n int, _ seen) (int, any) {
		a := answers[min(n, len(answers))-1]
		return a.code, map[string]any{"error_message": map[string]any{"faultstring": a.msg}}
	}
	r := startAgent(t, f, 10*time.Millisecond)
	select {
	case err := <-r.done:
		require.NoError(t, err)
		r.done <- err // for the cleanup
	case <-time.After(10 * time.Second):
		t.Fatal("the agent kept heartbeating with a token Ironic refuses")
	}
	assert.Len(t, f.requests("/v1/heartbeat/"), 6)
}

func TestAgentLockdownStopsHeartbeats(t *testing.T) {
	f := newFakeIronic(t, "1.82")
	f.lookup = func(int, seen) (int, any) { return 200, lookupAnswer(0.2, testToken) }
	f.beat = func(int, seen) (int, any) { return 202, nil }
	r := startAgent(t, f, 10*time.Millisecond)
	r.beats(t, 2, 10*time.Second)
	code, res := r.post(t, "system.lockdown", map[string]any{}, testToken, false)
	require.Equal(t, 200, code)
	require.Equal(t, "SUCCEEDED", res["command_status"])
	time.Sleep(100 * time.Millisecond) // a heartbeat already on its way may land
	n := len(f.requests("/v1/heartbeat/"))
	time.Sleep(500 * time.Millisecond)
	assert.Len(t, f.requests("/v1/heartbeat/"), n, "no heartbeat after the lockdown")
	resp, err := http.Get(r.api + "/v1/status")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, 503, resp.StatusCode)
	select {
	case <-r.done:
		t.Fatal("a locked-down agent must stay down, not look itself up again")
	default:
	}
}
