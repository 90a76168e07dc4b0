package ui

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/controller/store"
)

// biosNode stores a node with a cached BIOS (one setting pending, one
// read-only) and two firmware components.
func (e *env) biosNode(t testing.TB, name string) *store.Node {
	t.Helper()
	ctx := context.Background()
	n := e.addNode(t, name, "manageable", func(n *store.Node) { n.Driver, n.Interfaces.BIOS = "redfish", "redfish" })
	yes, no, maxLen, pending, flashed := true, false, 7, "Disabled", "2.20.0"
	require.NoError(t, e.st.ReplaceBIOSSettings(ctx, n.UUID, []store.BIOSSetting{
		{Name: "ProcVirtualization", Value: "Enabled", PendingValue: &pending, AttributeType: "Enumeration",
			AllowableValues: []string{"Enabled", "Disabled"}, ReadOnly: &no, ResetRequired: &yes, Unique: &no},
		{Name: "SystemServiceTag", Value: "ABC1234", AttributeType: "String", MaxLength: &maxLen, ReadOnly: &yes, ResetRequired: &no, Unique: &yes},
	}))
	require.NoError(t, e.st.ReplaceFirmwareComponents(ctx, n.UUID, []store.FirmwareComponent{
		{Component: "bios", InitialVersion: "2.19.1", CurrentVersion: "2.20.0", LastVersionFlashed: &flashed},
		{Component: "bmc", CurrentVersion: "7.00.00.171"},
	}))
	return n
}

func TestBIOSAndFirmwareOfANode(t *testing.T) {
	e := newEnv(t, ":memory:", nil)
	n := e.biosNode(t, "r740")

	code, m := e.get(t, "/ui/api/nodes/r740/bios")
	require.Equal(t, 200, code, m)
	assert.Equal(t, n.UUID, m["node_uuid"], "by name, answered with the UUID")
	assert.NotContains(t, m, "reason")
	settings := m["bios"].([]any)
	require.Len(t, settings, 2)
	pv := settings[0].(map[string]any)
	assert.Equal(t, "ProcVirtualization", pv["name"])
	assert.Equal(t, "Enabled", pv["value"])
	assert.Equal(t, "Disabled", pv["pending_value"])
	assert.Equal(t, []any{"Enabled", "Disabled"}, pv["allowable_values"])
	assert.Equal(t, true, pv["reset_required"])
	tag := settings[1].(map[string]any)
	assert.Equal(t, true, tag["read_only"])
	assert.NotContains(t, tag, "pending_value")

	// Ironic's view of the same cache does not show the pending value.
	code, m = e.get(t, "/v1/nodes/r740/bios?detail=True", "X-OpenStack-Ironic-API-Version", "1.74")
	require.Equal(t, 200, code, m)
	assert.NotContains(t, m["bios"].([]any)[0], "pending_value")

	code, m = e.get(t, "/ui/api/nodes/"+n.UUID+"/firmware")
	require.Equal(t, 200, code, m)
	comps := m["firmware"].([]any)
	require.Len(t, comps, 2)
	assert.Equal(t, "2.19.1", comps[0].(map[string]any)["initial_version"])
	assert.Equal(t, "2.20.0", comps[0].(map[string]any)["last_version_flashed"])
	assert.Equal(t, "7.00.00.171", comps[1].(map[string]any)["initial_version"], "first seen: the current one")

	for _, path := range []string{"/ui/api/nodes/nope/bios", "/ui/api/nodes/nope/firmware"} {
		code, m = e.get(t, path)
		assert.Equal(t, 404, code, path)
		assert.Equal(t, "Node nope could not be found.", faultstring(t, m), path)
	}
}

func TestEmptyBIOSCacheSaysWhy(t *testing.T) {
	e := newEnv(t, ":memory:", nil)
	tests := []struct {
		node   string
		mutate func(n *store.Node)
		state  string
		want   string
	}{
		{"ipmi", func(n *store.Node) { n.Driver = "ipmi" }, "manageable", "the ipmi driver has none (the redfish hardware type reads them from the BMC)"},
		{"no-bios", func(n *store.Node) { n.Driver, n.Interfaces.BIOS = "redfish", "no-bios" }, "manageable",
			"the node's bios_interface is no-bios (set it to redfish to read them)"},
		{"no-firmware", func(n *store.Node) { n.Driver, n.Interfaces.Firmware = "redfish", "no-firmware" }, "manageable",
			"the node's firmware_interface is no-firmware (set it to redfish to read them)"},
		{"enrolled", func(n *store.Node) { n.Driver = "redfish" }, "enroll", "the node has not been managed yet (they are read when it becomes manageable)"},
		{"unread", func(n *store.Node) { n.Driver = "redfish" }, "manageable", "yet: they are read from the BMC when the node becomes manageable, after cleaning"},
	}
	for _, tt := range tests {
		t.Run(tt.node, func(t *testing.T) {
			e.addNode(t, tt.node, tt.state, tt.mutate)
			// no-bios turns off the BIOS cache only, no-firmware the firmware cache only
			const notOff = "cached yet: they are read from the BMC"
			code, m := e.get(t, "/ui/api/nodes/"+tt.node+"/bios")
			require.Equal(t, 200, code, m)
			assert.Equal(t, []any{}, m["bios"])
			assert.Contains(t, m["reason"], "no BIOS settings cached")
			if tt.node == "no-firmware" {
				assert.Contains(t, m["reason"], notOff)
			} else {
				assert.Contains(t, m["reason"], tt.want)
			}
			code, m = e.get(t, "/ui/api/nodes/"+tt.node+"/firmware")
			require.Equal(t, 200, code, m)
			assert.Equal(t, []any{}, m["firmware"])
			assert.Contains(t, m["reason"], "no firmware versions cached")
			if tt.node == "no-bios" {
				assert.Contains(t, m["reason"], notOff)
			} else {
				assert.Contains(t, m["reason"], tt.want)
			}
		})
	}
}

// failingCache is a BIOSCache whose reads fail.
type failingCache struct{}

func (failingCache) ListBIOSSettings(context.Context, string) ([]store.BIOSSetting, error) {
	return nil, errors.New("disk on fire")
}

func (failingCache) ListFirmwareComponents(context.Context, string) ([]store.FirmwareComponent, error) {
	return nil, errors.New("disk on fire")
}

// TestBIOSCacheUnavailable: without a cache, and with one that fails, the
// pages answer in Ironic's error format without the store's words.
func TestBIOSCacheUnavailable(t *testing.T) {
	e := newEnv(t, ":memory:", nil)
	e.addNode(t, "n1", "manageable", nil)
	for _, tc := range []struct {
		cache BIOSCache
		code  int
		msg   string
	}{
		{nil, 404, "This controller's dashboard has no BIOS and firmware cache to read."},
		{failingCache{}, 500, "Internal server error; see the controller log"},
	} {
		h := New(Config{API: e.ui.api, Counts: e.st, BIOS: tc.cache})
		for _, what := range []string{"bios", "firmware"} {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/ui/api/nodes/n1/"+what, nil))
			assert.Equal(t, tc.code, rec.Code, what)
			assert.Contains(t, rec.Body.String(), tc.msg, what)
			assert.NotContains(t, rec.Body.String(), "fire", what)
		}
	}
}
