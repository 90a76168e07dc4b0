package api

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/bmc"
	"github.com/anvil-metal/anvil/controller/conductor"
)

// newBIOSEnv serves a BMC-backed hardware type over the bmc package's
// fake (fake-hardware targets have a Redfish-like BIOS with a registry),
// on SQLite, with the conductor running.
func newBIOSEnv(t *testing.T) (*testEnv, *bmc.Fake) {
	t.Helper()
	return newBMCEnv(t, conductor.Config{Host: "test-host", CheckInterval: time.Hour})
}

// newBMCEnv is newBIOSEnv with the conductor's configuration.
func newBMCEnv(t *testing.T, cc conductor.Config, opts ...func(*Config)) (*testEnv, *bmc.Fake) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	st, sqlSt, closeStore := openTestStore(ctx, t, onSQLite, ":memory:")
	f := bmc.NewFake()
	drv := conductor.NewBMCDriver(bmc.HardwareFake, bmc.New(bmc.Config{Fake: f, MinInterval: -1}), nil)
	drv.BIOSApplyTimeout, drv.BIOSPollInterval = time.Second, 10*time.Millisecond
	cond := conductor.New(st, cc, drv)
	done := make(chan struct{})
	go func() { _ = cond.Run(ctx); close(done) }()
	cfg := Config{Store: st, Conductor: cond}
	for _, o := range opts {
		o(&cfg)
	}
	srv := httptest.NewServer(New(cfg))
	var once sync.Once
	stop := func() { once.Do(func() { srv.Close(); cancel(); <-done; closeStore() }) }
	t.Cleanup(stop)
	return &testEnv{t: t, srv: srv, cond: cond, st: sqlSt, stop: stop}, f
}

// TestManualCleanBIOSSettingsRefusedWith400: settings the node's registry
// rejects are refused with a 400 naming the attribute, before anything
// runs; good ones are applied.
func TestManualCleanBIOSSettingsRefusedWith400(t *testing.T) {
	e, f := newBIOSEnv(t)
	id := e.createNode("bios-1", map[string]any{"deploy_interface": "fake"})["uuid"].(string)
	require.Equal(t, http.StatusAccepted, e.provision("bios-1", "manage", nil).status)
	e.waitState("bios-1", "manageable")
	calls := len(f.Calls(id))

	apply := func(settings ...map[string]any) map[string]any {
		list := make([]any, len(settings))
		for i, s := range settings {
			list[i] = s
		}
		return map[string]any{"clean_steps": []any{map[string]any{"interface": "bios", "step": "apply_configuration",
			"args": map[string]any{"settings": list}}}}
	}
	for _, c := range []struct {
		setting map[string]any
		want    string
	}{
		{map[string]any{"name": "SystemServiceTag", "value": "HACKED"}, "SystemServiceTag: read-only"},
		{map[string]any{"name": "Turbo", "value": "On"}, "Turbo: unknown attribute"},
		{map[string]any{"name": "BootMode", "value": "Legacy"}, "BootMode"},
		{map[string]any{"name": "PxeDev1VlanId", "value": 5000}, "PxeDev1VlanId"},
	} {
		r := e.provision("bios-1", "clean", apply(map[string]any{"name": "ProcVirtualization", "value": "Disabled"}, c.setting))
		require.Equal(t, http.StatusBadRequest, r.status, string(r.body))
		msg := r.fault(t)
		assert.Contains(t, msg, c.want)
		assert.Contains(t, msg, "Cannot clean node "+id)
	}
	n := e.do("GET", "/v1/nodes/bios-1", latest, nil).json(t)
	assert.Equal(t, "manageable", n["provision_state"], "nothing ran")
	assert.Nil(t, n["last_error"])
	for _, c := range f.Calls(id)[calls:] {
		assert.Contains(t, []string{"open", "get_bios", "get_bios_registry"}, c.Command, "only the registry was read")
	}

	r := e.provision("bios-1", "clean", apply(map[string]any{"name": "ProcVirtualization", "value": "Disabled"},
		map[string]any{"name": "PxeDev1VlanId", "value": 42}))
	require.Equal(t, http.StatusAccepted, r.status, string(r.body))
	n = e.waitState("bios-1", "manageable")
	assert.Nil(t, n["last_error"])
	assert.Equal(t, "Disabled", f.BIOS(id).Current["ProcVirtualization"])
	s := e.do("GET", "/v1/nodes/bios-1/bios/PxeDev1VlanId", latest, nil).json(t)
	assert.Equal(t, "42", s["PxeDev1VlanId"].(map[string]any)["value"], "the cache shows the value applied")
}

// TestRedfishBIOSInterface: redfish nodes default to the redfish bios
// interface (no-bios may be chosen), as in Ironic; ipmi has none.
func TestRedfishBIOSInterface(t *testing.T) {
	e := newDriversEnv(t, onSQLite)
	redfish := e.do("GET", "/v1/drivers/redfish", latest, nil).json(t)
	assert.Equal(t, "redfish", redfish["default_bios_interface"])
	assert.Equal(t, []any{"no-bios", "redfish"}, redfish["enabled_bios_interfaces"])
	ipmi := e.do("GET", "/v1/drivers/ipmi", latest, nil).json(t)
	assert.Equal(t, "no-bios", ipmi["default_bios_interface"])
	n := e.createNode("rf-1", map[string]any{"driver": "redfish"})
	assert.Equal(t, "redfish", n["bios_interface"])
}
