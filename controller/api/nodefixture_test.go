package api

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/controller/store"
	"github.com/anvil-metal/anvil/protocol"
)

// fixtureNode is node i of a fleet like the one anvil-bench lists: every
// node enrolled through the API with properties and driver_info (so every
// interface is set), a tenth taken to active (instance_info, deploy steps
// done, an agent session), some with traits, extra, a description, a
// maintenance reason or a last error. Everything is derived from i (UUIDs
// and times included), so a page of them renders the same bytes every
// time: the golden test pins those bytes, the list benchmark reads them.
func fixtureNode(i int) *store.Node {
	at := time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC).Add(time.Duration(i) * 1234567 * time.Microsecond)
	later := at.Add(90 * time.Second)
	str := func(s string) *string { return &s }
	name := fmt.Sprintf("n-%05d", i)
	n := &store.Node{
		UUID: fmt.Sprintf("%08x-1111-4222-8333-%012x", i, i*7919), Name: &name, Driver: "fake-hardware",
		ProvisionState: "enroll", CreatedAt: at, UpdatedAt: &later,
		Properties: map[string]any{"cpus": float64(32), "memory_mb": float64(262144), "local_gb": float64(960), "cpu_arch": "x86_64"},
		DriverInfo: map[string]any{"ipmi_address": fmt.Sprintf("10.1.%d.%d", i>>8&0xff, i&0xff), "ipmi_username": "admin",
			"ipmi_password": "x"},
		Interfaces: store.Interfaces{Boot: "fake", Console: "no-console", Deploy: "fake", Inspect: "fake", Management: "fake",
			Network: "noop", Power: "fake", RAID: "fake", Rescue: "fake", Storage: "noop", Vendor: "no-vendor", BIOS: "fake"},
	}
	n.Normalize()
	if i%10 == 0 { // taken enroll -> active, as the bench's lifecycle nodes
		inst := fmt.Sprintf("%08x-aaaa-4bbb-8ccc-%012x", i, i)
		n.ProvisionState, n.PowerState, n.InstanceUUID = "active", str("power on"), &inst
		n.ProvisionUpdatedAt = &later
		n.ResourceClass = str("baremetal.large")
		n.InstanceInfo = map[string]any{"image_source": "http://images.example/jammy.qcow2", "image_os_hash_algo": "sha256",
			"image_os_hash_value": "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08", "root_gb": "100",
			"capabilities": map[string]any{"boot_mode": "uefi"}, "configdrive": "H4sIAAAAAAAA/+3BAQ0AAADCoPdP"}
		n.DriverInternalInfo = map[string]any{"is_whole_disk_image": true, "deploy_boot_mode": "uefi",
			"last_power_state_change": later.Format("2006-01-02T15:04:05.000000")}
		n.Traits = []string{"CUSTOM_GPU", "HW_CPU_X86_AVX2"}
		n.Operation.Deploy = &store.StepPlan{Index: 2, Steps: []protocol.Step{
			{Interface: "deploy", Step: "deploy", Priority: 100},
			{Interface: "deploy", Step: "write_image", Priority: 80, Args: map[string]any{"force": true}},
		}}
		v := "9.8.0"
		n.Operation.Agent = store.AgentSession{Token: "s3cret-token", BootID: "b-1", Version: &v, LastHeartbeat: later}
		if i%20 == 0 { // the agent's step cache and last command, kept apart from the node
			n.Operation.Agent.Steps = &store.StepCache{Fingerprint: "f1", AgentVersion: v, RefreshedAt: at,
				Deploy: []protocol.Step{{Interface: "deploy", Step: "write_image", Priority: 80}}}
			n.Operation.Agent.CommandStatus = &protocol.CommandStatus{ID: "c1", Name: "deploy.write_image", State: "SUCCEEDED",
				Result: []byte(`{"ok":true}`), StartedAt: at, FinishedAt: &later}
		}
	}
	switch i % 10 {
	case 5:
		n.ProvisionState, n.PowerState = "available", str("power off")
	case 7:
		n.ProvisionState, n.TargetProvisionState = "inspect wait", str("manageable")
		n.InspectionStartedAt = &later
	}
	if i%7 == 3 {
		n.Extra = map[string]any{"rack": fmt.Sprintf("r%02d", i%40), "slot": float64(i % 42), "tags": []any{"a", "b<c>&d"},
			"ratio": 0.000001 * float64(i), "nested": map[string]any{"z": nil, "a": []any{float64(1), 2.5, "é\u2028"}}}
		n.Description = str(fmt.Sprintf("rack %d \"east\" <row>\n", i%40))
	}
	if i%13 == 5 {
		n.Maintenance, n.MaintenanceReason, n.Fault = true, str("BMC unreachable"), str("power failure")
		n.PowerState, n.LastError = str("power off"), str("Failed to get power state: timeout\tafter 60s")
	}
	if i%17 == 1 {
		n.Owner, n.Lessee, n.ConductorGroup = str("project-a"), str("project-b"), "rack1"
		n.DriverInfo["redfish_password"], n.DriverInfo["deploy_key"], n.DriverInfo["ipmi_port"] = "p", "k", float64(623)
		n.AutomatedClean, n.SecureBoot, n.BootMode = new(bool), new(bool), str("uefi")
	}
	if i%29 == 2 {
		n.Retired, n.RetiredReason, n.Protected, n.ProtectedReason = true, str("old"), true, str("keep")
		n.NetworkData = map[string]any{"links": []any{map[string]any{"id": "eth0", "type": "phy", "mtu": float64(1500)}}}
		n.RAIDConfig = map[string]any{"logical_disks": []any{map[string]any{"size_gb": float64(100), "raid_level": "1"}}}
	}
	return n
}

// createFixtureNodes stores nodes 0..n-1 and two ports for each (the
// node view does not read ports, but a listing runs beside them).
func createFixtureNodes(tb testing.TB, st store.Store, n int) {
	ctx := context.Background()
	for i := 0; i < n; i++ {
		node := fixtureNode(i)
		require.NoError(tb, st.CreateNode(ctx, node))
		for j := 0; j < 2; j++ {
			require.NoError(tb, st.CreatePort(ctx, &store.Port{
				UUID: fmt.Sprintf("%08x-2222-4333-8444-%012x", i, j), NodeUUID: node.UUID, CreatedAt: node.CreatedAt,
				Address: fmt.Sprintf("52:54:%02x:%02x:%02x:%02x", i>>16&0xff, i>>8&0xff, i&0xff, j), PXEEnabled: j == 0,
				LocalLinkConnection: map[string]any{"switch_id": "aa:bb:cc:dd:ee:ff", "port_id": fmt.Sprintf("Eth1/%d", i%48)},
				Extra:               map[string]any{}}))
		}
	}
}
