package conductor

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/bmc"
	"github.com/anvil-metal/anvil/bmc/vbmc"
	"github.com/anvil-metal/anvil/controller/state"
	"github.com/anvil-metal/anvil/controller/store"
	"github.com/anvil-metal/anvil/controller/store/sqlite"
	"github.com/anvil-metal/anvil/controller/store/storetest"
)

// TestRedfishHardwareType drives the redfish hardware type through the real
// bmclib client against anvil's in-memory virtual BMC.
func TestRedfishHardwareType(t *testing.T) {
	ctx := context.Background()
	mem := vbmc.NewMemory()
	srv := vbmc.NewServer(nil, "admin", "password", vbmc.NewNode("node-1", mem))
	hs := httptest.NewServer(srv.Handler())
	defer hs.Close()

	st, err := sqlite.Open(ctx, ":memory:")
	require.NoError(t, err)
	defer st.Close()
	m := bmc.New(bmc.Config{MinInterval: -1, VerifyTimeout: 5 * time.Second, PollInterval: 20 * time.Millisecond})
	note := func(ctx context.Context, node, sev, msg string) {
		_ = st.AppendEvent(ctx, &store.Event{UUID: node + msg, NodeUUID: node, CreatedAt: time.Now(), Severity: sev, EventType: "bmc", Event: msg})
	}
	drv := NewBMCDriver(bmc.HardwareRedfish, m, note)
	c := New(st, Config{Host: "c1", CheckInterval: time.Hour}, drv)
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { _ = c.Run(runCtx); close(done) }()
	defer func() { cancel(); <-done }()

	mk := func(name string, info map[string]any) string {
		n := storetest.NewNode(name)
		n.Driver, n.DriverInfo = "redfish", info
		n.Interfaces.Deploy = "direct"
		require.NoError(t, st.CreateNode(ctx, n))
		return n.UUID
	}
	wait := func(id string, want state.State) *store.Node {
		var n *store.Node
		require.Eventually(t, func() bool {
			n, err = st.GetNode(ctx, id)
			require.NoError(t, err)
			return n.ProvisionState == string(want) && c.Idle()
		}, 15*time.Second, 10*time.Millisecond, "never reached %s", want)
		return n
	}
	info := map[string]any{"redfish_address": hs.URL, "redfish_system_id": "/redfish/v1/Systems/node-1",
		"redfish_username": "admin", "redfish_password": "password"}

	good := mk("good", info)
	require.NoError(t, c.Provision(ctx, good, ProvisionRequest{Target: "manage"}))
	n := wait(good, state.Manageable)
	assert.Equal(t, PowerOff, *n.PowerState, "verifying read the power state from the BMC")

	require.NoError(t, c.SetPower(ctx, good, PowerOn))
	require.Eventually(t, func() bool {
		n, _ = st.GetNode(ctx, good)
		return n.TargetPowerState == nil && n.PowerState != nil && *n.PowerState == PowerOn
	}, 15*time.Second, 10*time.Millisecond)
	on, err := srv.Node("node-1").On(ctx)
	require.NoError(t, err)
	assert.True(t, on, "the virtual node really is on")
	events, err := st.ListEvents(ctx, good, 0)
	require.NoError(t, err)
	var texts []string
	for _, e := range events {
		texts = append(texts, e.Event)
	}
	joined := strings.Join(texts, "\n")
	assert.Contains(t, joined, "bmc: credentials verified via")
	assert.Contains(t, joined, "bmc: power power on via")

	bad := map[string]any{}
	for k, v := range info {
		bad[k] = v
	}
	bad["redfish_password"] = "wrong"
	wrong := mk("wrong", bad)
	require.NoError(t, c.Provision(ctx, wrong, ProvisionRequest{Target: "manage"}))
	n = wait(wrong, state.Enroll)
	require.NotNil(t, n.LastError, "bad credentials leave the node in enroll with last_error")
	assert.Contains(t, *n.LastError, "Failed to verify management access")
	assert.NotContains(t, *n.LastError, "wrong", "the password never appears in messages")

	missing := mk("missing", map[string]any{"redfish_username": "admin"})
	err = c.Provision(ctx, missing, ProvisionRequest{Target: "manage"})
	var ce *Error
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, CodeInvalid, ce.Code)
	assert.Contains(t, ce.Msg, "redfish_address")
	n, err = st.GetNode(ctx, missing)
	require.NoError(t, err)
	assert.Equal(t, "enroll", n.ProvisionState, "refused before any state change")
	assert.Error(t, drv.Validate(n)["power"])
}
