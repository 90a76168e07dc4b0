package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anvil-metal/anvil/hardware"
	"github.com/anvil-metal/anvil/hardware/erase"
	"github.com/anvil-metal/anvil/protocol"
	"github.com/stretchr/testify/require"
)

const testNode = "fe5d8075-6b0d-4b5e-9d1c-4b7c1b2d9e01"

// fakeController speaks the controller's side of the agent protocol over
// real HTTP, decoding with the protocol package as the real one will.
type fakeController struct {
	t   *testing.T
	srv *httptest.Server
	ln  string // listen address, kept so the server can come back

	mu sync.Mutex
	// lookupStatus are the answers to the first lookups before a 200.
	lookupStatus []int
	lookups      []*http.Request
	tokens       int    // lookups answered with a token
	token        string // the token heartbeats must carry; "" refuses all
	heartbeats   []*protocol.Heartbeat
	// pending is sent in the next heartbeat reply (once, unless sticky).
	pending *protocol.Command
	sticky  bool // keep sending pending in every reply
	// autoAck acknowledges a final status the first time it is seen.
	autoAck bool
	ack     string // sent in every reply when set (manual ack)
	abort   string // sent in every reply when set (an operator's abort)
	// hbStatus, when set, answers heartbeats with this status and body.
	hbStatus  int
	hbBody    string
	sendSteps bool
	onFinalHB func(*protocol.CommandStatus) // called under mu for each final status seen
	interval  float64
	// later becomes pending after the current reply (a command decided
	// after the controller recorded what this heartbeat reported).
	later *protocol.Command
	// failAfterSend is the status of every heartbeat answer after pending
	// was handed out (a controller that dies right after sending a command).
	failAfterSend int
	badQueries    []string
}

func newFakeController(t *testing.T) *fakeController {
	t.Helper()
	f := &fakeController{t: t, autoAck: true, interval: 0.02}
	f.start("127.0.0.1:0")
	t.Cleanup(func() { f.srv.Close() })
	return f
}

func (f *fakeController) start(addr string) {
	ln, err := net.Listen("tcp", addr)
	require.NoError(f.t, err)
	f.ln = ln.Addr().String()
	srv := httptest.NewUnstartedServer(http.HandlerFunc(f.serve))
	srv.Listener.Close()
	srv.Listener = ln
	srv.Start()
	f.srv = srv
}

// restart brings the controller back on the same address after stop.
func (f *fakeController) restart() { f.start(f.ln) }

func (f *fakeController) stop() {
	f.srv.CloseClientConnections()
	f.srv.Close()
}

func (f *fakeController) URL() string { return "http://" + f.ln }

func (f *fakeController) serve(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("X-OpenStack-Ironic-API-Version") != APIVersion {
		ironicError(w, http.StatusNotAcceptable, "missing API version")
		return
	}
	switch {
	case r.Method == http.MethodGet && r.URL.Path == protocol.LookupPath:
		f.serveLookup(w, r)
	case r.Method == http.MethodPost && strings.HasPrefix(r.URL.Path, protocol.HeartbeatPath):
		f.serveHeartbeat(w, r)
	default:
		http.NotFound(w, r)
	}
}

func ironicError(w http.ResponseWriter, status int, msg string) {
	inner, _ := json.Marshal(map[string]any{"faultcode": "Client", "faultstring": msg, "debuginfo": nil})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{"error_message": string(inner)})
}

func (f *fakeController) serveLookup(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lookups = append(f.lookups, r.Clone(context.Background()))
	q := r.URL.Query()
	if q.Get("addresses") == "" || q.Get("boot_id") == "" {
		f.badQueries = append(f.badQueries, r.URL.RawQuery)
		ironicError(w, http.StatusBadRequest, "At least one of 'addresses' and 'node_uuid' parameters is required")
		return
	}
	if len(f.lookups) <= len(f.lookupStatus) {
		ironicError(w, f.lookupStatus[len(f.lookups)-1], "Resource could not be found.")
		return
	}
	f.tokens++
	f.token = fmt.Sprintf("token-%d-0123456789abcdefghijklmnopqrstuvwxyz", f.tokens)
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(protocol.LookupResponse{
		Node:   protocol.LookupNode{UUID: testNode, Name: "node-1", Properties: map[string]any{}, InstanceInfo: map[string]any{}},
		Config: protocol.AgentConfig{HeartbeatTimeout: 300, HeartbeatInterval: f.interval, AgentToken: f.token, AgentTokenRequired: true},
	})
}

func (f *fakeController) serveHeartbeat(w http.ResponseWriter, r *http.Request) {
	hb, err := protocol.DecodeHeartbeat(r.Body)
	if err != nil {
		f.t.Errorf("agent sent an invalid heartbeat: %v", err)
		ironicError(w, http.StatusBadRequest, err.Error())
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if strings.TrimPrefix(r.URL.Path, protocol.HeartbeatPath) != testNode {
		ironicError(w, http.StatusNotFound, "Node could not be found.")
		return
	}
	if f.token == "" || hb.AgentToken != f.token {
		ironicError(w, http.StatusUnauthorized, "Invalid or missing agent token received.")
		return
	}
	f.heartbeats = append(f.heartbeats, hb)
	if f.hbStatus != 0 {
		ironicError(w, f.hbStatus, f.hbBody)
		return
	}
	resp := protocol.HeartbeatResponse{HeartbeatInterval: f.interval, Ack: f.ack, SendSteps: f.sendSteps, Abort: f.abort}
	if c := hb.Command; c != nil && c.State != protocol.CommandRunning {
		if f.onFinalHB != nil {
			f.onFinalHB(c)
		}
		if f.autoAck {
			resp.Ack = c.ID
		}
	}
	if f.pending != nil {
		resp.Command = f.pending
		if !f.sticky {
			f.pending = nil
		}
		if f.failAfterSend != 0 {
			f.hbStatus, f.hbBody = f.failAfterSend, "controller going away"
		}
	}
	if f.later != nil {
		f.pending, f.later = f.later, nil
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(resp)
}

func (f *fakeController) send(cmd *protocol.Command, sticky bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pending, f.sticky = cmd, sticky
}

func (f *fakeController) set(fn func(f *fakeController)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f)
}

func (f *fakeController) hbs() []*protocol.Heartbeat {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]*protocol.Heartbeat(nil), f.heartbeats...)
}

func (f *fakeController) lookupCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.lookups)
}

// statusOf returns the heartbeats' reports of command id, in order.
func (f *fakeController) statusOf(id string) []*protocol.CommandStatus {
	var out []*protocol.CommandStatus
	for _, hb := range f.hbs() {
		if hb.Command != nil && hb.Command.ID == id {
			out = append(out, hb.Command)
		}
	}
	return out
}

// finalOf returns the first final report of command id, or nil.
func (f *fakeController) finalOf(id string) *protocol.CommandStatus {
	for _, s := range f.statusOf(id) {
		if s.State != protocol.CommandRunning {
			return s
		}
	}
	return nil
}

// syncBuffer collects log output from the agent's goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// blockingStep is a manager step that reports progress and then waits to
// be released (or cancelled).
type blockingStep struct {
	started  chan struct{}
	release  chan struct{}
	once     sync.Once
	progress hardware.Progress
}

func newBlockingStep() *blockingStep {
	return &blockingStep{started: make(chan struct{}), release: make(chan struct{}),
		progress: hardware.Progress{Percent: 42.5, Message: "erasing /dev/nvme0n1", Device: "/dev/nvme0n1", BytesDone: 425, BytesTotal: 1000}}
}

func (b *blockingStep) run(ctx context.Context, _ hardware.Kind, _ protocol.Step, _ map[string]any, progress hardware.ProgressFunc) (any, error) {
	progress.Report(b.progress)
	b.once.Do(func() { close(b.started) })
	select {
	case <-b.release:
		return erasedResult{Erased: []string{"/dev/nvme0n1"}}, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// erasedResult is a step result with a summary, as the hardware
// managers' results have.
type erasedResult struct {
	Erased []string `json:"erased"`
}

func (r erasedResult) Summary() string { return "erased " + strings.Join(r.Erased, ", ") }

// partialErase is what erase_devices returns with its error when one disk
// of two fails verification.
func partialErase() erase.Result {
	return erase.Result{Devices: []erase.DeviceResult{
		{Plan: erase.DevicePlan{Device: "/dev/sda", Size: 64e6, Action: erase.ActionErase, Methods: []erase.Method{erase.MethodDiscard, erase.MethodOverwrite}},
			Status: erase.StatusErased, Method: erase.MethodOverwrite, Seconds: 1.25},
		{Plan: erase.DevicePlan{Device: "/dev/sdb", Size: 64e6, Action: erase.ActionErase, Methods: []erase.Method{erase.MethodOverwrite}},
			Status: erase.StatusFailed, Error: "verify: byte 123 is 0x5a, want 0x00"},
	}}
}

// testManager offers erase_devices (blocking), a quick step, a step with a
// required argument, a panicking one and one that fails with a partial
// result (erase_partly).
func testManager(step *blockingStep) *hardware.FakeManager {
	m := &hardware.FakeManager{
		ManagerName: "test_manager", ManagerVersion: "1.0", Level: hardware.SupportGeneric,
		Catalogue: hardware.Catalogue{
			Clean: []protocol.Step{
				{Interface: protocol.InterfaceDeploy, Step: "erase_devices", Priority: 10, Abortable: true},
				{Interface: protocol.InterfaceDeploy, Step: "quick", Priority: 0},
				{Interface: protocol.InterfaceDeploy, Step: "explode", Priority: 0},
				{Interface: protocol.InterfaceDeploy, Step: "erase_partly", Priority: 0},
				{Interface: protocol.InterfaceRAID, Step: "create_configuration", Priority: 0, ArgsInfo: map[string]protocol.ArgInfo{
					"target_raid_config": {Description: "RAID layout", Required: true}}},
			},
			Deploy: []protocol.Step{{Interface: protocol.InterfaceDeploy, Step: "write_image", Priority: 0}},
		},
	}
	m.RunFunc = func(ctx context.Context, kind hardware.Kind, s protocol.Step, args map[string]any, p hardware.ProgressFunc) (any, error) {
		switch s.Step {
		case "erase_devices":
			return step.run(ctx, kind, s, args, p)
		case "explode":
			panic("manager bug")
		case "erase_partly":
			return partialErase(), &protocol.Error{Type: protocol.ErrTypeBlockDeviceErase, Code: 500,
				Message: "1 of 2 devices were not erased", Details: "/dev/sdb: verify: byte 123 is 0x5a, want 0x00"}
		case "create_configuration":
			return map[string]any{"got": args["target_raid_config"]}, nil
		}
		return map[string]any{"ran": s.Step, "kind": string(kind)}, nil
	}
	return m
}

// fakePower records power actions on a shared event list.
type fakePower struct {
	mu     sync.Mutex
	events *[]string
	calls  chan string
}

func (p *fakePower) PowerOff(context.Context) error { p.record("power_off"); return nil }
func (p *fakePower) Reboot(context.Context) error   { p.record("reboot"); return nil }
func (p *fakePower) record(s string) {
	p.mu.Lock()
	*p.events = append(*p.events, "power:"+s)
	p.mu.Unlock()
	p.calls <- s
}

type harness struct {
	ctrl   *fakeController
	mgr    *hardware.FakeManager
	disp   *hardware.Dispatcher
	step   *blockingStep
	logs   *syncBuffer
	cancel context.CancelFunc
	done   chan error
	agent  *Agent
}

// startAgent runs an agent against ctrl until the test ends.
func startAgent(t *testing.T, ctrl *fakeController, tweak func(a *Agent)) *harness {
	t.Helper()
	h := &harness{ctrl: ctrl, step: newBlockingStep(), logs: &syncBuffer{}, done: make(chan error, 1)}
	h.mgr = testManager(h.step)
	var err error
	h.disp, err = hardware.NewDispatcher(context.Background(), h.mgr)
	require.NoError(t, err)
	client, err := NewClient(ClientConfig{API: ctrl.URL(), Version: Version, Timeout: 5 * time.Second})
	require.NoError(t, err)
	h.agent = &Agent{
		Controller:   client,
		Hardware:     StaticHardware(h.disp),
		Network:      StaticMACs{"52:54:00:12:34:56"},
		Log:          slog.New(slog.NewTextHandler(h.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		KernelUptime: 1500 * time.Millisecond,
		Backoff:      Backoff{Initial: 5 * time.Millisecond, Max: 40 * time.Millisecond},
	}
	if tweak != nil {
		tweak(h.agent)
	}
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel = cancel
	go func() { h.done <- h.agent.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-h.done:
			require.NoError(t, err)
		case <-time.After(10 * time.Second):
			t.Error("agent did not stop after cancel")
		}
		if t.Failed() {
			t.Logf("agent log:\n%s", h.logs.String())
		}
	})
	return h
}

const (
	waitFor = 10 * time.Second
	poll    = 5 * time.Millisecond
)
