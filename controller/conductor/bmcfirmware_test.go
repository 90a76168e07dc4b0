package conductor

// The firmware flow through the real Redfish client against anvil-vbmc
// whose UpdateService only takes pushed images.

import (
	"context"
	"net/http"
	"net/http/httptest"
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
	"github.com/anvil-metal/anvil/protocol"
)

func TestRedfishFirmwareUpdatePushedAgainstVBMC(t *testing.T) {
	ctx := context.Background()
	files := map[string][]byte{
		"/bmc-2.bin":  vbmc.FirmwareImage(vbmc.FirmwareBMC, "2.00.00", []byte("bmc payload")),
		"/bios-3.bin": vbmc.FirmwareImage(vbmc.FirmwareBIOS, "3.0.0", []byte("bios payload")),
	}
	images := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if b, ok := files[r.URL.Path]; ok {
			_, _ = w.Write(b)
			return
		}
		http.NotFound(w, r)
	}))
	defer images.Close()
	srv := vbmc.NewServer(nil, "admin", "password", vbmc.NewNode("node-1", vbmc.NewMemory()))
	srv.SetFirmwareOptions(vbmc.FirmwareOptions{PushOnly: true, UpdateDuration: 20 * time.Millisecond})
	hs := httptest.NewServer(srv.Handler())
	defer hs.Close()
	defer srv.Close()
	st, err := sqlite.Open(ctx, ":memory:")
	require.NoError(t, err)
	defer st.Close()
	m := bmc.New(bmc.Config{MinInterval: -1, VerifyTimeout: 5 * time.Second, PollInterval: 20 * time.Millisecond})
	note := func(ctx context.Context, node, sev, msg string) {
		_ = st.AppendEvent(ctx, &store.Event{UUID: node + msg + time.Now().String(), NodeUUID: node, CreatedAt: time.Now(), Severity: sev, EventType: "bmc", Event: msg})
	}
	e := start(t, NewBMCDriver(bmc.HardwareRedfish, m, note), fwConfig(), st)

	n := storetest.NewNode("")
	n.Driver, n.Interfaces.Deploy = "redfish", "fake"
	n.DriverInfo = map[string]any{"redfish_address": hs.URL, "redfish_system_id": "/redfish/v1/Systems/node-1",
		"redfish_username": "admin", "redfish_password": "password"}
	require.NoError(t, st.CreateNode(ctx, n))
	require.NoError(t, e.c.Provision(ctx, n.UUID, ProvisionRequest{Target: "manage"}))
	e.wait(t, n.UUID, state.Manageable)

	require.NoError(t, e.c.Provision(ctx, n.UUID, ProvisionRequest{Target: "clean", CleanSteps: []protocol.Step{
		updateStep(fwSetting("bios", images.URL+"/bios-3.bin"), fwSetting("bmc", images.URL+"/bmc-2.bin"))}}))
	var got *store.Node
	require.Eventually(t, func() bool {
		got, err = st.GetNode(ctx, n.UUID)
		require.NoError(t, err)
		return got.ProvisionState == string(state.Manageable) && e.c.Idle()
	}, 20*time.Second, 10*time.Millisecond)
	require.Nil(t, got.LastError)
	bmcV, _ := srv.FirmwareVersion("node-1", vbmc.FirmwareBMC)
	biosV, pending := srv.FirmwareVersion("node-1", vbmc.FirmwareBIOS)
	assert.Equal(t, "2.00.00", bmcV)
	assert.Equal(t, "3.0.0", biosV, "activated by the reboot")
	assert.Empty(t, pending)
	cache := firmwareCache(t, st, n.UUID)
	assert.Equal(t, "2.00.00", cache["bmc"].CurrentVersion)
	assert.Equal(t, "3.0.0", cache["bios"].CurrentVersion)
	assert.Regexp(t, `(?s)firmware update of bmc asked .*via gofish \(MultipartHttpPushUri\).*firmware update of bios asked .*via gofish \(MultipartHttpPushUri\)`,
		history(t, st, n.UUID), "the history says the image was pushed")
}
