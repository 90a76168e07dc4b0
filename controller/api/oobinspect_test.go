package api

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/bmc"
	"github.com/anvil-metal/anvil/bmc/vbmc"
	"github.com/anvil-metal/anvil/controller/conductor"
	"github.com/anvil-metal/anvil/controller/simagent"
	"github.com/anvil-metal/anvil/protocol"
)

// newRedfishEnv serves the redfish hardware type against anvil-vbmc on
// loopback (in-memory nodes), with the conductor (configured by cc, its
// host and check interval set) running.
func newRedfishEnv(t *testing.T, cc conductor.Config, nodes ...*vbmc.Node) (*testEnv, *vbmc.Server, string) {
	t.Helper()
	srv := vbmc.NewServer(nil, "admin", "pw", nodes...)
	bmcSrv := httptest.NewServer(srv.Handler())
	t.Cleanup(bmcSrv.Close)
	ctx, cancel := context.WithCancel(context.Background())
	st, sqlSt, closeStore := openTestStore(ctx, t, onSQLite, ":memory:")
	m := bmc.New(bmc.Config{MinInterval: -1, ConnectTimeout: 2 * time.Second, VerifyTimeout: time.Second, PollInterval: 5 * time.Millisecond})
	cc.Host, cc.CheckInterval = "test-host", time.Hour
	cond := conductor.New(st, cc, conductor.NewBMCDriver(bmc.HardwareRedfish, m, nil))
	done := make(chan struct{})
	go func() { _ = cond.Run(ctx); close(done) }()
	api := httptest.NewServer(New(Config{Store: st, Conductor: cond}))
	var once sync.Once
	stop := func() { once.Do(func() { api.Close(); cancel(); <-done; closeStore() }) }
	t.Cleanup(stop)
	return &testEnv{t: t, srv: api, cond: cond, st: sqlSt, stop: stop}, srv, bmcSrv.URL
}

// TestInspectRedfish: the inspect verb on a redfish node with
// inspect_interface=redfish, at the microversion BMO pins: the node ends
// manageable with its properties, GET /inventory answers Ironic's shape,
// the ports exist, and the BMC was never asked to change the power.
func TestInspectRedfish(t *testing.T) {
	vn := vbmc.NewNode("r1", vbmc.NewMemory())
	vn.SetHardware(vbmc.Hardware{CPUs: 8, CPUModel: "Xeon", MemoryMiB: 16384, MACs: []string{"52:54:00:00:20:01", "52:54:00:00:20:02"},
		Disks: []vbmc.HardwareDisk{{Name: "Disk 0", Serial: "SN0", SizeBytes: 100 << 30, Bus: vbmc.BusNVMe}}})
	e, _, url := newRedfishEnv(t, conductor.Config{}, vn)
	const v = "1.109"
	r := e.do("POST", "/v1/nodes", v, map[string]any{"name": "r1", "driver": "redfish", "inspect_interface": "redfish",
		"driver_info": map[string]any{"redfish_address": url, "redfish_username": "admin", "redfish_password": "pw", "redfish_system_id": "/redfish/v1/Systems/r1"}})
	require.Equal(t, 201, r.status, "%s", r.body)
	assert.Equal(t, "redfish", r.json(t)["inspect_interface"])
	require.Equal(t, 202, e.do("PUT", "/v1/nodes/r1/states/provision", v, map[string]any{"target": "manage"}).status)
	e.waitState("r1", "manageable")
	boots, _ := vn.Backend().(*vbmc.Memory).Boots()
	// the inspection rules run on an out-of-band inspection too, with the
	// BMC's inventory
	rule := e.do("POST", "/v1/inspection_rules", v, map[string]any{"description": "xeons",
		"conditions": []any{map[string]any{"op": "eq", "args": map[string]any{"values": []any{"{inventory[cpu][model_name]}", "Xeon"}}}},
		"actions": []any{map[string]any{"op": "set-attribute", "args": map[string]any{"path": "/resource_class", "value": "xeon-{inventory[cpu][count]}"}},
			map[string]any{"op": "add-trait", "args": map[string]any{"name": "CUSTOM_FROM_BMC"}}}})
	require.Equal(t, 201, rule.status, "%s", rule.body)

	r = e.do("PUT", "/v1/nodes/r1/states/provision", v, map[string]any{"target": "inspect"})
	require.Equal(t, 202, r.status, "%s", r.body)
	n := e.waitState("r1", "manageable")
	assert.Nil(t, n["last_error"])
	assert.NotNil(t, n["inspection_finished_at"])
	props := n["properties"].(map[string]any)
	assert.Equal(t, 8.0, props["cpus"])
	assert.Equal(t, 16384.0, props["memory_mb"])
	assert.Equal(t, 99.0, props["local_gb"])
	assert.Equal(t, "x86_64", props["cpu_arch"])
	assert.Equal(t, "boot_mode:bios", props["capabilities"])
	assert.Equal(t, "xeon-8", n["resource_class"], "the rule ran on the BMC's inventory")
	assert.Equal(t, []any{"CUSTOM_FROM_BMC"}, n["traits"])

	inv := e.do("GET", "/v1/nodes/r1/inventory", v, nil)
	require.Equal(t, 200, inv.status, "%s", inv.body)
	var body struct {
		Inventory map[string]json.RawMessage `json:"inventory"`
	}
	require.NoError(t, json.Unmarshal(inv.body, &body))
	assert.JSONEq(t, `{"count":8,"architecture":"x86_64","model_name":"Xeon"}`, string(body.Inventory["cpu"]))
	assert.JSONEq(t, `[{"name":"Disk 0","size":107374182400,"serial":"SN0","rotational":false}]`, string(body.Inventory["disks"]))
	assert.JSONEq(t, `[{"mac_address":"52:54:00:00:20:01","name":"NIC0"},{"mac_address":"52:54:00:00:20:02","name":"NIC1"}]`, string(body.Inventory["interfaces"]))

	ports := e.do("GET", "/v1/nodes/r1/ports?fields=address,pxe_enabled", v, nil).json(t)["ports"].([]any)
	assert.Len(t, ports, 2)
	for _, p := range ports {
		assert.Equal(t, false, p.(map[string]any)["pxe_enabled"])
	}
	after, _ := vn.Backend().(*vbmc.Memory).Boots()
	assert.Equal(t, boots, after, "the node was not booted")
}

// TestRedfishInspectInterfaceChoices: redfish offers the redfish inspect
// interface (agent stays the default); ipmi does not.
func TestRedfishInspectInterfaceChoices(t *testing.T) {
	e, _, _ := newRedfishEnv(t, conductor.Config{})
	d := e.do("GET", "/v1/drivers/redfish", latest, nil).json(t)
	assert.Equal(t, []any{"agent", "no-inspect", "redfish"}, d["enabled_inspect_interfaces"])
	assert.Equal(t, "agent", d["default_inspect_interface"])
}

// redfishNode enrols and manages a redfish node of the anvil-vbmc at url.
func (e *testEnv) redfishNode(name, url, ver string, extra map[string]any) {
	e.t.Helper()
	body := map[string]any{"name": name, "driver": "redfish",
		"driver_info": map[string]any{"redfish_address": url, "redfish_username": "admin", "redfish_password": "pw", "redfish_system_id": "/redfish/v1/Systems/" + name}}
	for k, v := range extra {
		body[k] = v
	}
	r := e.do("POST", "/v1/nodes", ver, body)
	require.Equal(e.t, 201, r.status, "%s", r.body)
	require.Equal(e.t, 202, e.do("PUT", "/v1/nodes/"+name+"/states/provision", ver, map[string]any{"target": "manage"}).status)
	e.waitState(name, "manageable")
}

// TestNodeHealth: power sync reads the health from the BMC; a change on
// anvil-vbmc (OK → Critical) shows in the node after a sync, with
// Ironic's history entry. health is shown from 1.109, read-only.
func TestNodeHealth(t *testing.T) {
	vn := vbmc.NewNode("h1", vbmc.NewMemory())
	e, _, url := newRedfishEnv(t, conductor.Config{PowerSync: conductor.PowerSyncConfig{Interval: 20 * time.Millisecond, Ticks: 1, MaxFailures: 3}}, vn)
	e.redfishNode("h1", url, "1.109", nil)
	health := func() any {
		n := e.do("GET", "/v1/nodes/h1", "1.109", nil).json(t)
		require.Contains(t, n, "health")
		return n["health"]
	}
	require.Eventually(t, func() bool { return health() == "OK" }, 5*time.Second, 10*time.Millisecond)

	require.NoError(t, vn.SetHealth("Critical"))
	require.Eventually(t, func() bool { return health() == "Critical" }, 5*time.Second, 10*time.Millisecond)
	assert.Contains(t, historyText(e, "h1"), "Node health status changed: health='Critical' (previously 'OK')")

	assert.NotContains(t, e.do("GET", "/v1/nodes/h1", "1.108", nil).json(t), "health")
	assert.Equal(t, 406, e.do("GET", "/v1/nodes/h1?fields=health", "1.108", nil).status)
	r := e.do("GET", "/v1/nodes?fields=name,health", "1.109", nil)
	require.Equal(t, 200, r.status)
	assert.Equal(t, "Critical", r.json(t)["nodes"].([]any)[0].(map[string]any)["health"])

	r = e.do("PATCH", "/v1/nodes/h1", "1.109", []map[string]any{{"op": "replace", "path": "/health", "value": "OK"}})
	assert.Equal(t, 400, r.status, "%s", r.body)
	assert.Contains(t, r.fault(t), "Cannot patch /health")
	r = e.do("POST", "/v1/nodes", "1.109", map[string]any{"driver": "redfish", "health": "OK"})
	assert.Equal(t, 400, r.status, "%s", r.body)
	assert.Equal(t, "Critical", health())
}

// TestRedfishInspectionDoesNotArmTheDiskGuard: a redfish inspection lists
// the BMC's physical drives; behind a RAID controller the ramdisk sees a
// virtual disk instead. Cleaning after it is not failed by the disk guard
// for drives the agent can never see; an in-band inspection afterwards
// arms the guard again with what the agent saw.
func TestRedfishInspectionDoesNotArmTheDiskGuard(t *testing.T) {
	vn := vbmc.NewNode("raid", vbmc.NewMemory())
	vn.SetHardware(vbmc.Hardware{CPUs: 4, MemoryMiB: 8192, MACs: []string{mac1},
		Disks: []vbmc.HardwareDisk{{Name: "Drive 0", Serial: "PHYS0", SizeBytes: 100 << 30}, {Name: "Drive 1", Serial: "PHYS1", SizeBytes: 100 << 30}}})
	cc := agentConfig()
	cc.AutomatedClean = true
	e, _, url := newRedfishEnv(t, cc, vn)
	r := e.do("POST", "/v1/nodes", latest, map[string]any{"name": "raid", "driver": "redfish", "inspect_interface": "redfish", "deploy_interface": "direct",
		"driver_info": map[string]any{"redfish_address": url, "redfish_username": "admin", "redfish_password": "pw", "redfish_system_id": "/redfish/v1/Systems/raid"}})
	require.Equal(t, 201, r.status, "%s", r.body)
	require.Equal(t, 202, e.provision("raid", "manage", nil).status)
	e.waitState("raid", "manageable")
	require.Equal(t, 202, e.provision("raid", "inspect", nil).status)
	e.waitState("raid", "manageable")

	a := simagent.New(e.srv.URL, mac1)
	a.Inventory.Disks = []protocol.Disk{{Name: "/dev/sda", Serial: "VIRTUAL-RAID1", Model: "PERC H740P", Size: 100 << 30, Controller: "scsi"}}
	require.Equal(t, 202, e.provision("raid", "provide", nil).status)
	n := e.drive(a, "raid", "available", nil)
	assert.Nil(t, n["last_error"], "the BMC's drives are not expected of the ramdisk")

	// an in-band inspection records what the agent sees: the guard is armed
	require.Equal(t, 200, e.do("PATCH", "/v1/nodes/raid", latest, []map[string]any{{"op": "replace", "path": "/inspect_interface", "value": "agent"}}).status)
	require.Equal(t, 202, e.provision("raid", "manage", nil).status)
	e.waitState("raid", "manageable")
	a.Boot()
	require.Equal(t, 202, e.provision("raid", "inspect", nil).status)
	e.drive(a, "raid", "manageable", nil)
	a.Boot()
	a.Inventory.Disks = nil
	require.Equal(t, 202, e.provision("raid", "provide", nil).status)
	n = e.drive(a, "raid", "clean failed", nil)
	assert.Contains(t, n["last_error"], "VIRTUAL-RAID1")
}
