package bmc_test

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/bmc"
	"github.com/anvil-metal/anvil/bmc/vbmc"
)

const (
	testUser = "admin"
	testPass = "s3cr3t-Pa55word"
)

// syncBuffer is a log sink safe for concurrent writes.
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

// fastConfig keeps unit tests quick while leaving every mechanism on.
func fastConfig(logs *syncBuffer) bmc.Config {
	var lg *slog.Logger
	if logs != nil {
		lg = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return bmc.Config{
		Logger:         lg,
		MinInterval:    2 * time.Millisecond,
		PollInterval:   10 * time.Millisecond,
		ConnectTimeout: 2 * time.Second,
		VerifyTimeout:  1 * time.Second,
		// Soft power off waits as long as an OS needs; tests have no OS.
		SoftPowerOffTimeout: 1 * time.Second,
		Retry:               bmc.RetryPolicy{Attempts: 6, Initial: 50 * time.Millisecond, Max: 300 * time.Millisecond, MaxElapsed: 5 * time.Second},
	}
}

type vbmcEnv struct {
	srv   *vbmc.Server
	url   string
	nodes map[string]*vbmc.Memory
}

// startVBMC serves an in-memory anvil-vbmc with the named nodes on loopback.
func startVBMC(t *testing.T, names ...string) *vbmcEnv {
	t.Helper()
	env := &vbmcEnv{nodes: map[string]*vbmc.Memory{}}
	var nodes []*vbmc.Node
	for _, n := range names {
		m := vbmc.NewMemory()
		env.nodes[n] = m
		nodes = append(nodes, vbmc.NewNode(n, m))
	}
	env.srv = vbmc.NewServer(nil, testUser, testPass, nodes...)
	ts := httptest.NewServer(env.srv.Handler())
	t.Cleanup(ts.Close)
	env.url = ts.URL
	return env
}

func (e *vbmcEnv) target(t *testing.T, node, password string) bmc.Target {
	t.Helper()
	info := map[string]any{
		"redfish_address":  e.url,
		"redfish_username": testUser,
		"redfish_password": password,
	}
	if node != "" {
		info["redfish_system_id"] = "/redfish/v1/Systems/" + node
	}
	tg, err := bmc.ParseDriverInfo("redfish", info)
	require.NoError(t, err)
	return tg.WithID(node)
}

func (e *vbmcEnv) on(t *testing.T, node string) bool {
	on, err := e.nodes[node].On(context.Background())
	require.NoError(t, err)
	return on
}

func TestRedfishPowerActions(t *testing.T) {
	tests := []struct {
		name      string
		startOn   bool
		action    bmc.PowerAction
		wantOn    bool
		wantBoots int // boots of the backend after the action (start included)
	}{
		{"on from off", false, bmc.ActionOn, true, 1},
		{"on when on is a no-op", true, bmc.ActionOn, true, 1},
		{"off from on", true, bmc.ActionOff, false, 1},
		{"soft off (bmclib reports failure, read-back decides)", true, bmc.ActionSoftOff, false, 1},
		{"reboot when on resets", true, bmc.ActionReboot, true, 2},
		{"reboot when off powers on", false, bmc.ActionReboot, true, 1},
		{"cycle when on", true, bmc.ActionCycle, true, 2},
		{"cycle when off powers on (bmclib would fail)", false, bmc.ActionCycle, true, 1},
		{"soft reboot when on", true, bmc.ActionSoftReboot, true, 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			env := startVBMC(t, "node-1")
			ctx := context.Background()
			if tc.startOn {
				require.NoError(t, env.nodes["node-1"].PowerOn(ctx, vbmc.BootDisk))
			}
			m := bmc.New(fastConfig(nil))
			tg := env.target(t, "node-1", testPass)

			out, err := m.SetPower(ctx, tg, tc.action)
			require.NoError(t, err)
			assert.Equal(t, "gofish", out.Provider)
			assert.GreaterOrEqual(t, out.Attempts, 1)

			assert.Equal(t, tc.wantOn, env.on(t, "node-1"))
			boots, _ := env.nodes["node-1"].Boots()
			assert.Equal(t, tc.wantBoots, boots)

			st, _, err := m.PowerState(ctx, tg)
			require.NoError(t, err)
			want := bmc.PowerOff
			if tc.wantOn {
				want = bmc.PowerOn
			}
			assert.Equal(t, want, st)
		})
	}
}

func TestRedfishBootDevice(t *testing.T) {
	tests := []struct {
		name string
		dev  bmc.BootDevice
		opts bmc.BootOptions
		want vbmc.BootOverride
	}{
		{"pxe once legacy", bmc.BootPXE, bmc.BootOptions{}, vbmc.BootOverride{Target: "Pxe", Enabled: "Once", Mode: "Legacy"}},
		{"disk persistent", bmc.BootDisk, bmc.BootOptions{Persistent: true}, vbmc.BootOverride{Target: "Hdd", Enabled: "Continuous", Mode: "Legacy"}},
		{"pxe once uefi", bmc.BootPXE, bmc.BootOptions{EFI: true}, vbmc.BootOverride{Target: "Pxe", Enabled: "Once", Mode: "UEFI"}},
		{"cdrom persistent uefi", bmc.BootCDROM, bmc.BootOptions{Persistent: true, EFI: true}, vbmc.BootOverride{Target: "Cd", Enabled: "Continuous", Mode: "UEFI"}},
		{"bios", bmc.BootBIOS, bmc.BootOptions{}, vbmc.BootOverride{Target: "BiosSetup", Enabled: "Once", Mode: "Legacy"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			env := startVBMC(t, "node-1")
			m := bmc.New(fastConfig(nil))
			out, err := m.SetBootDevice(context.Background(), env.target(t, "node-1", testPass), tc.dev, tc.opts)
			require.NoError(t, err)
			assert.Equal(t, "gofish", out.Provider)
			assert.Equal(t, tc.want, env.srv.Node("node-1").Boot())
		})
	}
}

func TestRedfishBootOnceIsConsumedByPowerOn(t *testing.T) {
	env := startVBMC(t, "node-1")
	ctx := context.Background()
	m := bmc.New(fastConfig(nil))
	tg := env.target(t, "node-1", testPass)
	_, err := m.SetBootDevice(ctx, tg, bmc.BootPXE, bmc.BootOptions{})
	require.NoError(t, err)
	_, err = m.SetPower(ctx, tg, bmc.ActionOn)
	require.NoError(t, err)
	_, dev := env.nodes["node-1"].Boots()
	assert.Equal(t, vbmc.BootPXE, dev)
	assert.Equal(t, "None", env.srv.Node("node-1").Boot().Target)
}

// bmclib v2.3.0 acts on every member of the Systems collection for sets and
// reads the first for gets; the Manager must still touch only the target.
func TestRedfishSystemSelection(t *testing.T) {
	env := startVBMC(t, "node-1", "node-2", "node-3")
	ctx := context.Background()
	m := bmc.New(fastConfig(nil))

	_, err := m.SetPower(ctx, env.target(t, "node-2", testPass), bmc.ActionOn)
	require.NoError(t, err)
	assert.False(t, env.on(t, "node-1"))
	assert.True(t, env.on(t, "node-2"))
	assert.False(t, env.on(t, "node-3"))

	st, _, err := m.PowerState(ctx, env.target(t, "node-1", testPass))
	require.NoError(t, err)
	assert.Equal(t, bmc.PowerOff, st)
	st, _, err = m.PowerState(ctx, env.target(t, "node-2", testPass))
	require.NoError(t, err)
	assert.Equal(t, bmc.PowerOn, st)

	_, err = m.SetBootDevice(ctx, env.target(t, "node-3", testPass), bmc.BootPXE, bmc.BootOptions{})
	require.NoError(t, err)
	assert.Equal(t, "Pxe", env.srv.Node("node-3").Boot().Target)
	assert.Equal(t, "None", env.srv.Node("node-1").Boot().Target)
	assert.Equal(t, "None", env.srv.Node("node-2").Boot().Target)

	t.Run("no system id with several systems", func(t *testing.T) {
		_, _, err := m.PowerState(ctx, env.target(t, "", testPass))
		require.ErrorIs(t, err, bmc.ErrInvalidDriverInfo)
		assert.Contains(t, err.Error(), "set redfish_system_id")
		assert.Contains(t, err.Error(), "/redfish/v1/Systems/node-2")
	})
	t.Run("unknown system id", func(t *testing.T) {
		_, _, err := m.PowerState(ctx, env.target(t, "node-9", testPass))
		require.ErrorIs(t, err, bmc.ErrInvalidDriverInfo)
		assert.Contains(t, err.Error(), "node-9")
	})
}

func TestRedfishSingleSystemNeedsNoSystemID(t *testing.T) {
	env := startVBMC(t, "only")
	m := bmc.New(fastConfig(nil))
	_, err := m.SetPower(context.Background(), env.target(t, "", testPass), bmc.ActionOn)
	require.NoError(t, err)
	assert.True(t, env.on(t, "only"))
}

func TestRedfishUnreachable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close()) // nothing listens there now: connection refused

	tg, err := bmc.ParseDriverInfo("redfish", map[string]any{"redfish_address": "http://" + addr, "redfish_password": testPass})
	require.NoError(t, err)
	cfg := fastConfig(nil)
	cfg.Retry = bmc.RetryPolicy{Attempts: 3, Initial: 50 * time.Millisecond, Max: 100 * time.Millisecond, MaxElapsed: 2 * time.Second}
	m := bmc.New(cfg)
	start := time.Now()
	out, err := m.Verify(context.Background(), tg)
	require.ErrorIs(t, err, bmc.ErrUnreachable)
	assert.Equal(t, 3, out.Attempts, "connection refused is retried up to the attempt limit")
	assert.Less(t, time.Since(start), 2*time.Second)
}

func TestRedfishWrongPasswordFailsFastWithoutLeaking(t *testing.T) {
	env := startVBMC(t, "node-1")
	var logs syncBuffer
	m := bmc.New(fastConfig(&logs))
	const wrong = "Wr0ng-pa55-XYZZY"
	before := env.srv.Requests()
	out, err := m.SetPower(context.Background(), env.target(t, "node-1", wrong), bmc.ActionOn)
	require.ErrorIs(t, err, bmc.ErrAuth)
	assert.Equal(t, 1, out.Attempts, "authentication failures are not retried")
	assert.LessOrEqual(t, env.srv.Requests()-before, 2, "service root + one login")
	assert.False(t, env.on(t, "node-1"))
	assert.NotEmpty(t, logs.String())
	assert.NotContains(t, logs.String(), wrong)
	assert.NotContains(t, err.Error(), wrong)
}

func TestRedfishBusyAfterPowerOffIsRetried(t *testing.T) {
	env := startVBMC(t, "node-1")
	env.srv.SetFaults(vbmc.Faults{BusyAfterPowerOff: 400 * time.Millisecond})
	ctx := context.Background()
	require.NoError(t, env.nodes["node-1"].PowerOn(ctx, vbmc.BootDisk))
	var logs syncBuffer
	m := bmc.New(fastConfig(&logs))
	tg := env.target(t, "node-1", testPass)

	_, err := m.SetPower(ctx, tg, bmc.ActionOff)
	require.NoError(t, err)
	out, err := m.SetPower(ctx, tg, bmc.ActionOn)
	require.NoError(t, err)
	assert.True(t, env.on(t, "node-1"))
	assert.Greater(t, out.Attempts, 3, "get + at least one 409 + successful send + verify")
	assert.Contains(t, logs.String(), "HTTP 409")
}

// TestRedfishBusyDuringPOSTIsWaitedOut: a BMC that answers 409 for 20 s
// after a power-off (a server in POST), with the default retry policy:
// the power-on is retried past the attempt cap, which bounds unreachable
// BMCs only, and succeeds once the BMC accepts it.
func TestRedfishBusyDuringPOSTIsWaitedOut(t *testing.T) {
	if testing.Short() {
		t.Skip("waits 20 s of BMC busy time")
	}
	t.Parallel()
	env := startVBMC(t, "node-1")
	env.srv.SetFaults(vbmc.Faults{BusyAfterPowerOff: 20 * time.Second})
	ctx := context.Background()
	require.NoError(t, env.nodes["node-1"].PowerOn(ctx, vbmc.BootDisk))
	cfg := fastConfig(nil)
	cfg.Retry = bmc.RetryPolicy{} // the defaults: 4 attempts, 0.5 s doubling to 5 s, 30 s in all
	m := bmc.New(cfg)
	tg := env.target(t, "node-1", testPass)
	_, err := m.SetPower(ctx, tg, bmc.ActionOff)
	require.NoError(t, err)
	start := time.Now()
	out, err := m.SetPower(ctx, tg, bmc.ActionOn)
	require.NoError(t, err, "20 s of 409 is within the default 30 s")
	assert.True(t, env.on(t, "node-1"))
	assert.Greater(t, out.Attempts, 4, "more tries than the attempt cap")
	assert.GreaterOrEqual(t, time.Since(start), 15*time.Second)
}

func TestRedfishBusyForeverGivesUp(t *testing.T) {
	env := startVBMC(t, "node-1")
	env.srv.SetFaults(vbmc.Faults{BusyAfterPowerOff: time.Hour})
	ctx := context.Background()
	require.NoError(t, env.nodes["node-1"].PowerOn(ctx, vbmc.BootDisk))
	cfg := fastConfig(nil)
	cfg.Retry = bmc.RetryPolicy{Attempts: 3, Initial: 20 * time.Millisecond, Max: 50 * time.Millisecond, MaxElapsed: time.Second}
	m := bmc.New(cfg)
	tg := env.target(t, "node-1", testPass)
	_, err := m.SetPower(ctx, tg, bmc.ActionOff)
	require.NoError(t, err)
	_, err = m.SetPower(ctx, tg, bmc.ActionOn)
	require.ErrorIs(t, err, bmc.ErrBusy)
}

func TestRedfishIgnoredBootOverrideIsDetected(t *testing.T) {
	env := startVBMC(t, "node-1")
	env.srv.SetFaults(vbmc.Faults{IgnoreBootPatch: true})
	cfg := fastConfig(nil)
	cfg.VerifyTimeout = 100 * time.Millisecond
	m := bmc.New(cfg)
	_, err := m.SetBootDevice(context.Background(), env.target(t, "node-1", testPass), bmc.BootPXE, bmc.BootOptions{})
	require.ErrorIs(t, err, bmc.ErrVerify)
	assert.Contains(t, err.Error(), "boot device set to pxe persistent=false efi=false but the BMC reports none")
}

func TestRedfishAddressWithoutSchemeIsHTTPS(t *testing.T) {
	// An https target against a plain HTTP server must fail as a protocol
	// error quickly, proving the https default is used.
	env := startVBMC(t, "node-1")
	host := strings.TrimPrefix(env.url, "http://")
	tg, err := bmc.ParseDriverInfo("redfish", map[string]any{"redfish_address": host, "redfish_verify_ca": false})
	require.NoError(t, err)
	assert.Equal(t, "https", tg.Scheme)
	m := bmc.New(fastConfig(nil))
	_, out, err := m.PowerState(context.Background(), tg)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "HTTP response to HTTPS client")
	assert.Equal(t, 1, out.Attempts, "a scheme mismatch is not retried")
}

func TestRedfishSoftOffIgnoredByOS(t *testing.T) {
	env := startVBMC(t, "node-1")
	ctx := context.Background()
	require.NoError(t, env.nodes["node-1"].PowerOn(ctx, vbmc.BootDisk))
	env.nodes["node-1"].IgnoreShutdown = true
	cfg := fastConfig(nil)
	cfg.SoftPowerOffTimeout = 200 * time.Millisecond
	m := bmc.New(cfg)
	_, err := m.SetPower(ctx, env.target(t, "node-1", testPass), bmc.ActionSoftOff)
	require.ErrorIs(t, err, bmc.ErrVerify)
	assert.Contains(t, err.Error(), "power requested power off but the BMC reports power on")
	assert.True(t, env.on(t, "node-1"), "no silent escalation to a hard power off")
}

// A BMC without a SessionService: the Manager falls back to basic auth.
func TestRedfishBasicAuthFallback(t *testing.T) {
	srv := vbmc.NewServer(nil, testUser, testPass, vbmc.NewNode("node-1", vbmc.NewMemory()))
	h := srv.Handler()
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && strings.HasPrefix(r.URL.Path, "/redfish/v1/SessionService") {
			http.Error(w, "sessions not supported", http.StatusMethodNotAllowed)
			return
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(ts.Close)
	info := map[string]any{"redfish_address": ts.URL, "redfish_username": testUser, "redfish_password": testPass}
	tg, err := bmc.ParseDriverInfo("redfish", info)
	require.NoError(t, err)
	m := bmc.New(fastConfig(nil))
	_, err = m.SetPower(context.Background(), tg, bmc.ActionOn)
	require.NoError(t, err)
	on, _ := srv.Node("node-1").On(context.Background())
	assert.True(t, on)

	info["redfish_password"] = "wrong"
	tg, err = bmc.ParseDriverInfo("redfish", info)
	require.NoError(t, err)
	out, err := m.Verify(context.Background(), tg)
	require.ErrorIs(t, err, bmc.ErrAuth)
	assert.Equal(t, 1, out.Attempts)
}
