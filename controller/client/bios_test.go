package client

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/controller/api"
	"github.com/anvil-metal/anvil/controller/conductor"
	"github.com/anvil-metal/anvil/controller/store"
	"github.com/anvil-metal/anvil/controller/store/sqlite"
	"github.com/anvil-metal/anvil/controller/ui"
)

// TestBIOSAndFirmware reads a node's caches through the real API and
// dashboard over SQLite, mounted as the controller mounts them.
func TestBIOSAndFirmware(t *testing.T) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, ":memory:")
	require.NoError(t, err)
	defer st.Close()
	apiSrv := api.New(api.Config{Store: st, Conductor: conductor.New(st, conductor.Config{Host: "client"}, conductor.FakeDriver{})})
	root := http.NewServeMux()
	root.Handle("/ui/", ui.New(ui.Config{API: apiSrv, Counts: st, BIOS: st}))
	root.Handle("/", apiSrv)
	var mu sync.Mutex
	versions := map[string]string{} // path -> the microversion asked for
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		versions[r.URL.Path] = r.Header.Get("X-OpenStack-Ironic-API-Version")
		mu.Unlock()
		root.ServeHTTP(w, r)
	}))
	defer srv.Close()
	c := New(srv.URL, nil)

	name := "r740"
	n := &store.Node{UUID: uuid.NewString(), Name: &name, Driver: "redfish", ProvisionState: "manageable", CreatedAt: time.Now().UTC()}
	require.NoError(t, st.CreateNode(ctx, n))
	pending, yes, lo, hi := "Disabled", true, 0, 4094
	require.NoError(t, st.ReplaceBIOSSettings(ctx, n.UUID, []store.BIOSSetting{
		{Name: "ProcVirtualization", Value: "Enabled", PendingValue: &pending, AttributeType: "Enumeration",
			AllowableValues: []string{"Enabled", "Disabled"}, ResetRequired: &yes},
		{Name: "PxeDev1VlanId", Value: "0", AttributeType: "Integer", LowerBound: &lo, UpperBound: &hi},
	}))
	require.NoError(t, st.ReplaceFirmwareComponents(ctx, n.UUID, []store.FirmwareComponent{{Component: "bmc", CurrentVersion: "7.00"}}))

	b, err := c.BIOS(ctx, "r740")
	require.NoError(t, err)
	assert.Equal(t, n.UUID, b.NodeUUID)
	assert.Empty(t, b.Reason)
	require.Len(t, b.Settings, 2)
	assert.Equal(t, "PxeDev1VlanId", b.Settings[1].Name)
	assert.Equal(t, 4094, *b.Settings[1].UpperBound)
	assert.Nil(t, b.Settings[1].PendingValue)
	s := b.Settings[0]
	assert.Equal(t, "ProcVirtualization", s.Name)
	assert.Equal(t, "Enabled", s.Value)
	assert.Equal(t, "Disabled", *s.PendingValue)
	assert.Equal(t, []string{"Enabled", "Disabled"}, s.AllowableValues)
	assert.True(t, *s.ResetRequired)
	assert.NotEmpty(t, s.CreatedAt)

	why, err := c.FirmwareReason(ctx, "r740")
	require.NoError(t, err)
	assert.Empty(t, why, "the node has components")

	enroll := "fresh"
	require.NoError(t, st.CreateNode(ctx, &store.Node{UUID: uuid.NewString(), Name: &enroll, Driver: "redfish", ProvisionState: "enroll", CreatedAt: time.Now().UTC()}))
	b, err = c.BIOS(ctx, "fresh")
	require.NoError(t, err)
	assert.Empty(t, b.Settings)
	assert.Contains(t, b.Reason, "the node has not been managed yet")
	why, err = c.FirmwareReason(ctx, "fresh")
	require.NoError(t, err)
	assert.Contains(t, why, "no firmware versions cached: the node has not been managed yet")

	_, err = c.BIOS(ctx, "missing")
	var apiErr *Error
	require.ErrorAs(t, err, &apiErr)
	assert.Equal(t, http.StatusNotFound, apiErr.Status)
	assert.Equal(t, "Node missing could not be found.", apiErr.Message)

	// The firmware list is Ironic's, asked for at 1.86.
	comps, err := c.Firmware(ctx, "r740")
	mu.Lock()
	assert.Equal(t, "1.86", versions["/v1/nodes/r740/firmware"])
	assert.Equal(t, Version, versions["/ui/api/nodes/r740/bios"])
	mu.Unlock()
	require.NoError(t, err)
	require.Len(t, comps, 1)
	assert.Equal(t, FirmwareComponent{Component: "bmc", InitialVersion: "7.00", CurrentVersion: "7.00", CreatedAt: comps[0].CreatedAt}, comps[0])
	_, err = c.Firmware(ctx, "missing")
	require.ErrorAs(t, err, &apiErr)
	assert.Equal(t, "Node missing could not be found.", apiErr.Message)
}
