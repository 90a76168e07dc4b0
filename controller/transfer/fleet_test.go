package transfer

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/controller/store"
)

func strp(s string) *string { return &s }
func boolp(b bool) *bool    { return &b }

// at is a fixed instant minutes after a base, with nanoseconds: the
// document must keep them (the stores' documents do).
func at(minutes int) time.Time {
	return time.Date(2025, 3, 1, 10, 0, 0, 123456789, time.UTC).Add(time.Duration(minutes) * time.Minute)
}

func atp(minutes int) *time.Time { t := at(minutes); return &t }

// fleetUUID is a fixed UUID per kind and number, so documents are stable.
func fleetUUID(kind, n int) string { return fmt.Sprintf("%08x-0000-4000-8000-%012x", kind, n) }

const (
	kindNode = iota + 1
	kindPortgroup
	kindPort
	kindAllocation
	kindEvent
	kindResult
	kindRecord
	kindChassis
	kindVolume
	kindTemplate
	kindRunbook
	kindInspectionRule
)

// fillFleet writes a varied fleet through store calls, with everything an
// operator would lose in a careless copy: nodes in several states (one in
// clean failed with its last error), with and without names, BMC secrets,
// traits, steps and RAID configurations, ports in a portgroup, allocations,
// history and inventories. extra adds plain nodes, to cross list pages.
func fillFleet(t *testing.T, st store.Store, extra int) {
	t.Helper()
	ctx := context.Background()
	enroll := &store.Node{UUID: fleetUUID(kindNode, 1), Driver: "fake-hardware", ProvisionState: "enroll", CreatedAt: at(0)}
	available := &store.Node{UUID: fleetUUID(kindNode, 2), Name: strp("rack1-02"), Driver: "ipmi", ProvisionState: "available",
		PowerState: strp("power off"), CreatedAt: at(1), UpdatedAt: atp(30), ProvisionUpdatedAt: atp(29),
		DriverInfo: map[string]any{"ipmi_address": "10.0.0.2", "ipmi_username": "admin",
			"ipmi_password": "p<a&s>s\"wörd\u0000", "ipmi_port": float64(623)},
		Properties:    map[string]any{"cpus": float64(64), "memory_mb": float64(524288), "cpu_arch": "x86_64", "capabilities": "boot_mode:uefi"},
		ResourceClass: strp("baremetal.large"), Traits: []string{"CUSTOM_GPU", "CUSTOM_RAID"},
		Interfaces: store.Interfaces{Boot: "ipxe", Deploy: "direct", Management: "ipmitool", Power: "ipmitool", RAID: "agent"},
		Extra:      map[string]any{"rack": "r1", "u": float64(2), "nested": map[string]any{"a": []any{"x", 1.5, true, nil}}},
		BootMode:   strp("uefi"), SecureBoot: boolp(true), AutomatedClean: boolp(true), ConductorGroup: "dc1",
	}
	failed := &store.Node{UUID: fleetUUID(kindNode, 3), Name: strp("rack1-03"), Driver: "redfish", ProvisionState: "clean failed",
		PowerState: strp("power on"), CreatedAt: at(2), UpdatedAt: atp(45), ProvisionUpdatedAt: atp(44),
		DriverInfo:         map[string]any{"redfish_address": "https://10.0.0.3", "redfish_username": "root", "redfish_password": "calvin", "redfish_verify_ca": false},
		DriverInternalInfo: map[string]any{"clean_steps": []any{map[string]any{"interface": "deploy", "step": "erase_devices", "priority": float64(10)}}, "agent_url": "http://10.0.0.3:9999"},
		CleanStep:          map[string]any{"interface": "deploy", "step": "erase_devices", "priority": float64(10)},
		LastError:          strp("clean step deploy.erase_devices failed: /dev/sdb: write error at sector 123456"),
		Maintenance:        true, MaintenanceReason: strp("disk sdb failing"), Fault: strp("clean failure"),
		TargetRAIDConfig: map[string]any{"logical_disks": []any{map[string]any{"size_gb": "MAX", "raid_level": "1", "is_root_volume": true}}},
		RAIDConfig:       map[string]any{"logical_disks": []any{map[string]any{"size_gb": float64(446), "raid_level": "1"}}},
		Retired:          true, RetiredReason: strp("end of warranty"), Description: strp("old GPU box"),
		InspectionStartedAt: atp(5), InspectionFinishedAt: atp(7),
	}
	active := &store.Node{UUID: fleetUUID(kindNode, 4), Name: strp("web-01"), Driver: "ipmi", ProvisionState: "active",
		PowerState: strp("power on"), CreatedAt: at(3), UpdatedAt: atp(60), ProvisionUpdatedAt: atp(59),
		DriverInfo:   map[string]any{"ipmi_address": "10.0.0.4", "ipmi_username": "admin", "ipmi_password": "s3cret"},
		InstanceUUID: strp("11111111-2222-4333-8444-555555555555"), InstanceInfo: map[string]any{"image_source": "http://images/web.raw", "image_checksum": "sha256:abc", "root_gb": float64(100)},
		DeployStep: map[string]any{}, Protected: true, ProtectedReason: strp("production database"), Owner: strp("team-web"), Lessee: strp("tenant-7"),
		AllocationUUID: strp(fleetUUID(kindAllocation, 1)), NetworkData: map[string]any{"links": []any{map[string]any{"id": "eth0", "type": "phy"}}},
		AutomatedClean: boolp(false), Shard: strp("shard-a"), ChassisUUID: strp("99999999-0000-4000-8000-000000000001"),
		ResourceClass: strp("baremetal.small"), Traits: []string{"CUSTOM_WEB"},
	}
	nodes := []*store.Node{enroll, available, failed, active}
	for i := 0; i < extra; i++ {
		nodes = append(nodes, &store.Node{UUID: fleetUUID(kindNode, 100+i), Name: strp(fmt.Sprintf("extra-%04d", i)), Driver: "fake-hardware",
			ProvisionState: "manageable", CreatedAt: at(100 + i), DriverInfo: map[string]any{"password": fmt.Sprintf("pw-%d", i)}})
	}
	// chassis first: a node's chassis must exist
	for _, c := range []*store.Chassis{
		{UUID: *active.ChassisUUID, Description: strp("rack 1, row \"A\""), Extra: map[string]any{"pdu": "pdu-1"}, CreatedAt: at(-2)},
		{UUID: fleetUUID(kindChassis, 2), Extra: map[string]any{}, CreatedAt: at(-1), UpdatedAt: atp(70)},
	} {
		require.NoError(t, st.CreateChassis(ctx, c))
	}
	for _, n := range nodes {
		require.NoError(t, st.CreateNode(ctx, n))
	}

	bond := &store.Portgroup{UUID: fleetUUID(kindPortgroup, 1), Name: strp("rack1-02-bond0"), Address: strp("52:54:00:00:02:00"),
		NodeUUID: available.UUID, Mode: strp("802.3ad"), Properties: map[string]any{"miimon": "100"}, StandalonePortsSupported: true,
		Extra: map[string]any{}, CreatedAt: at(10), UpdatedAt: atp(11)}
	require.NoError(t, st.CreatePortgroup(ctx, bond))
	ports := []*store.Port{
		{UUID: fleetUUID(kindPort, 1), Address: "52:54:00:00:02:01", NodeUUID: available.UUID, PortgroupUUID: &bond.UUID, Name: strp("rack1-02-eth0"),
			LocalLinkConnection: map[string]any{"switch_id": "aa:bb:cc:dd:ee:ff", "port_id": "Ethernet1/2"}, PXEEnabled: true,
			PhysicalNetwork: strp("physnet1"), Extra: map[string]any{}, CreatedAt: at(12)},
		{UUID: fleetUUID(kindPort, 2), Address: "52:54:00:00:02:02", NodeUUID: available.UUID, PortgroupUUID: &bond.UUID,
			LocalLinkConnection: map[string]any{}, Extra: map[string]any{"cable": "blue"}, CreatedAt: at(13), UpdatedAt: atp(14)},
		{UUID: fleetUUID(kindPort, 3), Address: "52:54:00:00:04:01", NodeUUID: active.UUID, PXEEnabled: true, IsSmartNIC: true,
			LocalLinkConnection: map[string]any{}, Extra: map[string]any{}, CreatedAt: at(15)},
	}
	for _, p := range ports {
		require.NoError(t, st.CreatePort(ctx, p))
	}
	allocs := []*store.Allocation{
		{UUID: fleetUUID(kindAllocation, 1), Name: strp("web-alloc"), NodeUUID: &active.UUID, State: "active", ResourceClass: "baremetal.small",
			CandidateNodes: []string{active.UUID}, Traits: []string{"CUSTOM_WEB"}, Owner: strp("team-web"), Extra: map[string]any{}, CreatedAt: at(20), UpdatedAt: atp(21)},
		{UUID: fleetUUID(kindAllocation, 2), State: "error", LastError: strp("no available nodes match the resource class baremetal.huge"),
			ResourceClass: "baremetal.huge", CandidateNodes: []string{}, Traits: []string{}, Extra: map[string]any{}, CreatedAt: at(22)},
	}
	for _, a := range allocs {
		require.NoError(t, st.CreateAllocation(ctx, a))
	}
	require.NoError(t, st.CreateVolumeConnector(ctx, &store.VolumeConnector{UUID: fleetUUID(kindVolume, 1), NodeUUID: active.UUID,
		Type: "iqn", ConnectorID: "iqn.2025-03.org.example:web-01", Extra: map[string]any{}, CreatedAt: at(23)}))
	require.NoError(t, st.CreateVolumeTarget(ctx, &store.VolumeTarget{UUID: fleetUUID(kindVolume, 2), NodeUUID: active.UUID,
		VolumeType: "iscsi", VolumeID: "cinder-vol-1", BootIndex: 0, Properties: map[string]any{"target_lun": float64(1), "auth_password": "chap"},
		Extra: map[string]any{}, CreatedAt: at(24), UpdatedAt: atp(25)}))
	events := []*store.Event{
		{NodeUUID: available.UUID, Severity: "INFO", EventType: "provisioning", Event: "manage: enroll -> manageable", Conductor: "ctl-1", User: strp("admin")},
		{NodeUUID: failed.UUID, Severity: "INFO", EventType: "cleaning", Event: "clean step deploy.erase_devices started", Conductor: "ctl-1"},
		{NodeUUID: available.UUID, Severity: "INFO", EventType: "provisioning", Event: "provide: manageable -> available", Conductor: "ctl-2"},
		{NodeUUID: failed.UUID, Severity: "ERROR", EventType: "cleaning", Event: "clean step deploy.erase_devices failed: /dev/sdb: write error", Conductor: "ctl-1"},
		{NodeUUID: active.UUID, Severity: "WARNING", EventType: "power", Event: "power state changed outside anvil", Conductor: "ctl-2"},
	}
	for i, e := range events {
		e.UUID, e.CreatedAt = fleetUUID(kindEvent, i+1), at(40+i)
		require.NoError(t, st.AppendEvent(ctx, e))
	}
	require.NoError(t, st.PutInventory(ctx, available.UUID,
		[]byte(`{"cpu": {"model_name": "EPYC", "count": 64},
  "disks": [{"name": "/dev/nvme0n1", "size": 960197124096}], "memory": {"physical_mb": 524288}}`)))
	require.NoError(t, st.PutInventory(ctx, failed.UUID, []byte(`{"disks":[{"name":"/dev/sdb","size":480103981056}],"boot":{"current_boot_mode":"uefi"}}`)))
	results := []*store.StepResult{
		{UUID: fleetUUID(kindResult, 1), NodeUUID: failed.UUID, Kind: "clean", Step: "deploy.erase_devices_metadata",
			StartedAt: at(42), FinishedAt: at(42).Add(3 * time.Second), Outcome: store.OutcomeSucceeded, AgentVersion: "anvil-agent 1.0",
			Summary: "/dev/sdb metadata wiped", Result: json.RawMessage(`{"devices":[{"device":"/dev/sdb","status":"erased"}]}`)},
		{UUID: fleetUUID(kindResult, 2), NodeUUID: failed.UUID, Kind: "clean", Step: "deploy.erase_devices", Args: map[string]any{"x": "y"},
			StartedAt: at(43), FinishedAt: at(44), Outcome: store.OutcomeFailed, Error: "/dev/sdb: write error at sector 123456",
			Result: json.RawMessage(`{"devices":[{"plan":{"device":"/dev/sdb"},"status":"failed","bytes":63209472}]}`)},
	}
	for _, r := range results {
		require.NoError(t, st.PutStepResult(ctx, r))
	}
	require.NoError(t, st.PutEraseRecords(ctx, []*store.EraseRecord{{UUID: fleetUUID(kindRecord, 1), NodeUUID: fleetUUID(kindNode, 999),
		CreatedAt: at(50), Data: json.RawMessage(`{"record":{"device":"/dev/sda","serial":"S1<&>"},"signature":"c2ln"}`)}}))
	require.NoError(t, st.CreateDeployTemplate(ctx, &store.DeployTemplate{UUID: fleetUUID(kindTemplate, 1), Name: "CUSTOM_RAID1",
		Steps: []store.TemplateStep{{Interface: "raid", Step: "apply_configuration", Priority: 90,
			Args: map[string]any{"raid_config": map[string]any{"logical_disks": []any{map[string]any{"raid_level": "1", "size_gb": "MAX"}}}}}},
		Extra: map[string]any{"owner": "ops"}, CreatedAt: at(51), UpdatedAt: atp(52)}))
	require.NoError(t, st.CreateRunbook(ctx, &store.Runbook{UUID: fleetUUID(kindRunbook, 1), Name: "CUSTOM_BIOS_TUNE",
		Steps: []store.RunbookStep{
			{Interface: "bios", Step: "apply_configuration", Order: 2,
				Args: map[string]any{"settings": []any{map[string]any{"name": "LogicalProc", "value": "Disabled"}}}},
			{Interface: "bios", Step: "factory_reset", Order: 1, Args: map[string]any{}}},
		DisableRamdisk: true, Owner: strp("team-a"), Extra: map[string]any{"ticket": "OPS-1"}, CreatedAt: at(57), UpdatedAt: atp(58)}))
	require.NoError(t, st.CreateInspectionRule(ctx, &store.InspectionRule{UUID: fleetUUID(kindInspectionRule, 1),
		Description: strp("BMC password from the inventory"), Phase: "main", Priority: 40, Sensitive: true,
		Conditions: []map[string]any{{"op": "eq", "args": []any{"{inventory[system_vendor][manufacturer]}", "Dell Inc."}}},
		Actions:    []map[string]any{{"op": "set-attribute", "args": []any{"/driver_info/redfish_password", "s3cr<e>t"}}},
		CreatedAt:  at(59), UpdatedAt: atp(60)}))
	hi := 64
	require.NoError(t, st.ReplaceBIOSSettings(ctx, available.UUID, []store.BIOSSetting{
		{Name: "BootMode", Value: "Uefi", AttributeType: "Enumeration", AllowableValues: []string{"Bios", "Uefi"},
			ReadOnly: boolp(false), ResetRequired: boolp(true), CreatedAt: at(53), UpdatedAt: atp(54)},
		{Name: "ProcCores", Value: "64", AttributeType: "Integer", UpperBound: &hi, CreatedAt: at(53)}}))
	require.NoError(t, st.ReplaceFirmwareComponents(ctx, failed.UUID, []store.FirmwareComponent{
		{Component: "bmc", InitialVersion: "1.0", CurrentVersion: "1.2", LastVersionFlashed: strp("1.2"), CreatedAt: at(55), UpdatedAt: atp(56)}}))
}
