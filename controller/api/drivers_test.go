package api

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/controller/conductor"
)

// newDriversEnv serves fake-hardware, ipmi and redfish (the BMC types
// without a BMC manager: the driver endpoints never reach one).
func newDriversEnv(t *testing.T, kind storeKind) *testEnv {
	t.Helper()
	st, sqlSt, closeStore := openTestStore(context.Background(), t, kind, ":memory:")
	cond := conductor.New(st, conductor.Config{Host: "test-host", CheckInterval: time.Hour}, conductor.FakeDriver{},
		conductor.NewBMCDriver("ipmi", nil, nil), conductor.NewBMCDriver("redfish", nil, nil))
	srv := httptest.NewServer(New(Config{Store: st, Conductor: cond}))
	t.Cleanup(func() { srv.Close(); closeStore() })
	return &testEnv{t: t, srv: srv, cond: cond, st: sqlSt, stop: func() {}}
}

func TestDriverInterfaces(t *testing.T) {
	forEachStore(t, func(t *testing.T, kind storeKind) { testDriverInterfaces(t, newDriversEnv(t, kind)) })
}

func testDriverInterfaces(t *testing.T, e *testEnv) {
	d := e.do("GET", "/v1/drivers/fake-hardware", latest, nil)
	require.Equal(t, http.StatusOK, d.status, string(d.body))
	fake := d.json(t)
	assert.Equal(t, "dynamic", fake["type"])
	assert.Equal(t, []any{"test-host"}, fake["hosts"])
	for _, typ := range conductor.InterfaceTypes() {
		assert.Contains(t, fake, "default_"+typ+"_interface")
		assert.Contains(t, fake, "enabled_"+typ+"_interfaces")
	}
	assert.Equal(t, "fake", fake["default_power_interface"])
	assert.Equal(t, []any{"direct", "fake"}, fake["enabled_deploy_interfaces"])

	ipmi := e.do("GET", "/v1/drivers/ipmi", latest, nil).json(t)
	assert.Equal(t, "ipmitool", ipmi["default_power_interface"])
	assert.Equal(t, "direct", ipmi["default_deploy_interface"])
	redfish := e.do("GET", "/v1/drivers/redfish", latest, nil).json(t)
	assert.Equal(t, []any{"ipxe", "redfish-virtual-media"}, redfish["enabled_boot_interfaces"])

	// a node of the type gets the defaults the driver shows
	n := e.createNode("ipmi-1", map[string]any{"driver": "ipmi"})
	assert.Equal(t, "ipmitool", n["power_interface"])
	assert.Equal(t, "agent", n["inspect_interface"])

	// microversions: interface fields from 1.30, storage 1.33, rescue 1.38, bios 1.40
	for _, c := range []struct {
		ver     string
		has, no []string
	}{
		{"1.29", []string{"name", "hosts", "properties"}, []string{"type", "default_boot_interface"}},
		{"1.13", []string{"name"}, []string{"properties"}},
		{"1.32", []string{"type", "default_boot_interface"}, []string{"default_storage_interface"}},
		{"1.37", []string{"default_storage_interface", "enabled_storage_interfaces"}, []string{"default_rescue_interface"}},
		{"1.39", []string{"enabled_rescue_interfaces"}, []string{"default_bios_interface"}},
		{"1.40", []string{"default_bios_interface", "enabled_bios_interfaces"}, nil},
	} {
		got := e.do("GET", "/v1/drivers/fake-hardware", c.ver, nil).json(t)
		for _, k := range c.has {
			assert.Contains(t, got, k, c.ver)
		}
		for _, k := range c.no {
			assert.NotContains(t, got, k, c.ver)
		}
	}
}

func TestDriverList(t *testing.T) {
	forEachStore(t, func(t *testing.T, kind storeKind) { testDriverList(t, newDriversEnv(t, kind)) })
}

func testDriverList(t *testing.T, e *testEnv) {
	plain := e.do("GET", "/v1/drivers", latest, nil).json(t)["drivers"].([]any)
	require.Len(t, plain, 3)
	first := plain[0].(map[string]any)
	assert.Equal(t, "fake-hardware", first["name"])
	assert.NotContains(t, first, "default_boot_interface", "a plain list has no interface fields")

	detail := e.do("GET", "/v1/drivers?detail=true", latest, nil).json(t)["drivers"].([]any)
	require.Len(t, detail, 3)
	assert.Equal(t, "redfish", detail[2].(map[string]any)["default_management_interface"])

	assert.Empty(t, e.do("GET", "/v1/drivers?type=classic", latest, nil).json(t)["drivers"])
	assert.Len(t, e.do("GET", "/v1/drivers?type=dynamic", latest, nil).json(t)["drivers"], 3)

	sel := e.do("GET", "/v1/drivers?fields=name,hosts", latest, nil).json(t)["drivers"].([]any)
	assert.Equal(t, []string{"hosts", "links", "name"}, sortedKeys(sel[1].(map[string]any)), "links stay, as in Ironic")
	one := e.do("GET", "/v1/drivers/ipmi?fields=name,default_deploy_interface", latest, nil).json(t)
	assert.Equal(t, "direct", one["default_deploy_interface"])
	assert.Len(t, one, 3)
}

func TestDriverRefusals(t *testing.T) {
	e := newDriversEnv(t, onSQLite)
	for _, c := range []struct {
		path, ver string
		status    int
		msg       string
	}{
		{"/v1/drivers?detail=true&fields=name", latest, 400, "Can not specify ?detail=True and fields in the same request."},
		{"/v1/drivers?detail=true", "1.29", 406, "Request not acceptable. The minimal required API version should be 1.30"},
		{"/v1/drivers?type=dynamic", "1.29", 406, "Request not acceptable. The minimal required API version should be 1.30"},
		{"/v1/drivers?type=foo", latest, 400, `"type" filter must be one of "classic" or "dynamic", if specified.`},
		{"/v1/drivers?fields=name", "1.76", 406, "Request not acceptable."},
		{"/v1/drivers/fake-hardware?fields=nope", latest, 400, `Field(s) "nope" are not valid`},
		// a plain list has no interface fields to select (Ironic's driver_sanitize)
		{"/v1/drivers?fields=name,default_deploy_interface", latest, 400, `Field(s) "default_deploy_interface" are not valid`},
		{"/v1/drivers?bogus=1", latest, 400, "Unknown argument(s): bogus"},
		{"/v1/drivers?detail=maybe", latest, 400, `Invalid value for detail: "maybe" is not a boolean`},
		{"/v1/drivers/nope", latest, 404, "Could not find the following driver(s) or hardware type(s): nope."},
		{"/v1/drivers/nope/properties", latest, 404, "Could not find the following driver(s) or hardware type(s): nope."},
		{"/v1/drivers/nope/raid/logical_disk_properties", latest, 404, "Could not find the following driver(s) or hardware type(s): nope."},
		{"/v1/drivers/ipmi/raid/logical_disk_properties", "1.11", 406, "Request not acceptable."},
	} {
		r := e.do("GET", c.path, c.ver, nil)
		assert.Equal(t, c.status, r.status, c.path)
		assert.Equal(t, c.msg, r.fault(t), c.path)
	}
}

func TestDriverProperties(t *testing.T) {
	e := newDriversEnv(t, onSQLite)
	assert.Empty(t, e.do("GET", "/v1/drivers/fake-hardware/properties", latest, nil).json(t),
		"Ironic's fake interfaces read no driver_info")
	ipmi := e.do("GET", "/v1/drivers/ipmi/properties", latest, nil).json(t)
	assert.Equal(t, "IP address or hostname of the node. Required.", ipmi["ipmi_address"])
	for _, k := range []string{"ipmi_username", "ipmi_password", "ipmi_port", "ipmi_priv_level", "ipmi_cipher_suite", "kernel_append_params"} {
		assert.Contains(t, ipmi, k)
	}
	redfish := e.do("GET", "/v1/drivers/redfish/properties", latest, nil).json(t)
	for _, k := range []string{"redfish_address", "redfish_system_id", "redfish_username", "redfish_password", "redfish_verify_ca"} {
		assert.Contains(t, redfish, k)
	}
	assert.NotContains(t, redfish, "ipmi_address")

	raid := e.do("GET", "/v1/drivers/ipmi/raid/logical_disk_properties", latest, nil)
	require.Equal(t, http.StatusOK, raid.status, string(raid.body))
	assert.Contains(t, raid.json(t)["raid_level"], "Required.")
	assert.Contains(t, e.do("GET", "/v1/drivers/fake-hardware/raid/logical_disk_properties", latest, nil).json(t), "size_gb")
}
