package conductor

import (
	"context"
	"encoding/json"
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
)

// redfishEnv runs the redfish hardware type against anvil-vbmc on
// loopback, with one QEMU-configured node (QEMU is not started: its BMC
// describes it from its configuration).
type redfishEnv struct {
	*env
	srv *vbmc.Server
	url string
}

func startRedfish(t *testing.T, cfg vbmc.QEMUConfig) *redfishEnv {
	t.Helper()
	q, err := vbmc.NewQEMU(nil, cfg)
	require.NoError(t, err)
	srv := vbmc.NewServer(nil, "admin", "pw", vbmc.NewNode("q1", q))
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(ts.Close)
	st, err := sqlite.Open(context.Background(), ":memory:")
	require.NoError(t, err)
	t.Cleanup(func() { st.Close() })
	m := bmc.New(bmc.Config{MinInterval: -1, ConnectTimeout: 2 * time.Second, VerifyTimeout: time.Second, PollInterval: 5 * time.Millisecond,
		Retry: bmc.RetryPolicy{Attempts: 2, Initial: 10 * time.Millisecond, Max: 20 * time.Millisecond, MaxElapsed: 200 * time.Millisecond}})
	drv := NewBMCDriver(bmc.HardwareRedfish, m, nil)
	return &redfishEnv{env: start(t, drv, Config{}, st), srv: srv, url: ts.URL}
}

func (e *redfishEnv) node(t *testing.T, mut func(n *store.Node)) string {
	t.Helper()
	n := storetest.NewNode("")
	n.Driver, n.ProvisionState = bmc.HardwareRedfish, string(state.Manageable)
	n.DriverInfo = map[string]any{"redfish_address": e.url, "redfish_username": "admin", "redfish_password": "pw", "redfish_system_id": "/redfish/v1/Systems/q1"}
	n.Interfaces.Inspect = InspectRedfish
	if mut != nil {
		mut(n)
	}
	require.NoError(t, e.st.CreateNode(context.Background(), n))
	return n.UUID
}

// TestRedfishInspection: inspect_interface=redfish end to end on
// anvil-vbmc: the properties, Ironic's inventory, ports (not
// pxe_enabled, as Ironic's ports hook without a PXE MAC), the boot mode
// capability, and no power action.
func TestRedfishInspection(t *testing.T) {
	e := startRedfish(t, vbmc.QEMUConfig{StateDir: t.TempDir(), CPUs: 4, MemoryMiB: 3072,
		Disks: []vbmc.QEMUDisk{{Path: "d0.raw", SizeMiB: 20 << 10, Serial: "S0"}, {Path: "d1.raw", SizeMiB: 6 << 10, Serial: "S1", Bus: vbmc.BusVirtioSCSI}},
		NIC:   &vbmc.QEMUNIC{MAC: "52:54:00:00:10:01", MoreMACs: []string{"52:54:00:00:10:02"}}})
	ctx := context.Background()
	id := e.node(t, func(n *store.Node) { n.Properties = map[string]any{"capabilities": "foo:bar"} })
	existing := &store.Port{UUID: "7c1d0a6b-0000-4000-8000-000000000001", Address: "52:54:00:00:10:01", NodeUUID: id, PXEEnabled: true, CreatedAt: time.Now()}
	require.NoError(t, e.st.CreatePort(ctx, existing))
	before := e.srv.Requests()

	require.NoError(t, e.c.Provision(ctx, id, ProvisionRequest{Target: "inspect"}))
	n := e.wait(t, id, state.Manageable)
	assert.Nil(t, n.LastError)
	assert.NotNil(t, n.InspectionFinishedAt)
	p := n.Properties
	assert.EqualValues(t, 4, p["cpus"])
	assert.EqualValues(t, 3072, p["memory_mb"])
	assert.Equal(t, "x86_64", p["cpu_arch"])
	assert.EqualValues(t, 5, p["local_gb"], "the smallest disk of at least 4 GiB (6 GiB), less one")
	assert.Equal(t, "foo:bar,boot_mode:bios", p["capabilities"])

	raw, err := e.st.GetInventory(ctx, id)
	require.NoError(t, err)
	var inv map[string]any
	require.NoError(t, json.Unmarshal(raw, &inv))
	assert.Equal(t, map[string]any{"count": 4.0, "architecture": "x86_64", "model_name": "QEMU Virtual CPU version 2.5+"}, inv["cpu"])
	assert.Equal(t, map[string]any{"physical_mb": 3072.0}, inv["memory"])
	assert.Equal(t, map[string]any{"current_boot_mode": "bios"}, inv["boot"])
	disks := inv["disks"].([]any)
	require.Len(t, disks, 2)
	assert.Equal(t, map[string]any{"name": "Disk 1", "size": float64(6 << 30), "serial": "S1", "rotational": true}, disks[1])
	assert.Len(t, inv["interfaces"], 2)

	ports, err := e.st.ListPorts(ctx, store.ResourceFilter{NodeUUID: &id}, store.Page{Limit: 10})
	require.NoError(t, err)
	require.Len(t, ports, 2)
	for _, port := range ports {
		if port.Address == existing.Address {
			assert.True(t, port.PXEEnabled, "an existing port is left as it is")
		} else {
			assert.Equal(t, "52:54:00:00:10:02", port.Address)
			assert.False(t, port.PXEEnabled, "Ironic's redfish inspection knows no PXE MAC")
			assert.Equal(t, "NIC1", port.Extra["interface"])
		}
	}
	assert.Contains(t, history(t, e.st, id), "inventory stored (out of band, from the BMC): 4 CPUs, 3072 MiB, 2 disks, 2 NICs; 1 ports created")
	assert.Nil(t, n.PowerState, "inspection read the BMC, it did not power the node")
	t.Logf("Redfish requests of one inspection: %d", e.srv.Requests()-before)
}

// TestRedfishInspectionFailures: without memory in the BMC's answer the
// inspection fails with Ironic's error; an unreachable BMC fails it too.
func TestRedfishInspectionFailures(t *testing.T) {
	e := startRedfish(t, vbmc.QEMUConfig{StateDir: t.TempDir()})
	ctx := context.Background()
	e.srv.Node("q1").SetHardware(vbmc.Hardware{CPUs: 2})
	id := e.node(t, nil)
	require.NoError(t, e.c.Provision(ctx, id, ProvisionRequest{Target: "inspect"}))
	n := e.wait(t, id, state.InspectFailed)
	assert.Equal(t, "Failed to inspect hardware. Reason: Failed to discover the following properties: memory_mb on node "+id, *n.LastError)

	gone := e.node(t, func(n *store.Node) { n.DriverInfo["redfish_address"] = "http://127.0.0.1:1" })
	require.NoError(t, e.c.Provision(ctx, gone, ProvisionRequest{Target: "inspect"}))
	n = e.wait(t, gone, state.InspectFailed)
	assert.Contains(t, *n.LastError, "Failed to inspect hardware of node "+gone)
}
