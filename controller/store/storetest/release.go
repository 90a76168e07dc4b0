package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/controller/store"
	"github.com/anvil-metal/anvil/protocol"
)

// ReleaseFixtureDir holds databases written by the last release before the
// SQL store was unified (schema version 5, SQLite and PostgreSQL stores of
// their own), relative to a store package's directory. PopulateRelease
// wrote them; CheckRelease reads them back through today's store.
const ReleaseFixtureDir = "../testdata/release5"

// Fixed identities of the release fixture's rows.
const (
	releaseNode  = "6c0e3b3e-0000-4000-8000-000000000001"
	releaseNode2 = "6c0e3b3e-0000-4000-8000-000000000002"
	releasePort  = "6c0e3b3e-0000-4000-8000-0000000000a1"
	releasePG    = "6c0e3b3e-0000-4000-8000-0000000000b1"
	releaseAlloc = "6c0e3b3e-0000-4000-8000-0000000000c1"
	releaseEvent = "6c0e3b3e-0000-4000-8000-0000000000e1"
)

// ReleaseOrphanSQL adds to a release database a port of a node that does
// not exist, which an earlier release could leave behind (a port created
// while its node was being deleted) and the migration must remove.
const ReleaseOrphanSQL = `INSERT INTO resources (kind, uuid, node_uuid, address, revision, data)
	VALUES ('port', '` + releaseOrphan + `', '6c0e3b3e-0000-4000-8000-00000000dead', '52:54:00:00:de:ad', 1, '{}')`

// ReleaseChassisSQL puts a release database's second node in a chassis
// that does not exist, as earlier releases let a client do (chassis_uuid
// was a free string); the migration must create the chassis.
const ReleaseChassisSQL = `UPDATE nodes SET chassis_uuid = '` + releaseChassis + `' WHERE uuid = '` + releaseNode2 + `'`

const releaseChassis = "6c0e3b3e-0000-4000-8000-0000000000d1"

const releaseOrphan = "6c0e3b3e-0000-4000-8000-0000000000a9"

var releaseTime = time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)

// PopulateRelease fills an empty store with one of everything the store
// keeps: two nodes (one mid-cleaning with an operation, agent step cache
// and command status), a port, a port group, an allocation, history, an
// inventory, a live lease, a controller and a DHCP lease.
func PopulateRelease(t testing.TB, s store.Store) {
	ctx := context.Background()
	n := &store.Node{UUID: releaseNode, Name: strp("rel-1"), Driver: "ipmi", ProvisionState: "cleaning",
		CreatedAt: releaseTime, DriverInfo: map[string]any{"ipmi_address": "192.0.2.10"},
		Properties: map[string]any{"cpus": float64(8)}, Traits: []string{"CUSTOM_GOLD"},
		ResourceClass: strp("baremetal"), Reservation: strp("ctl-1")}
	n.Operation = store.Operation{
		Clean: &store.StepPlan{Steps: []protocol.Step{{Interface: "deploy", Step: "erase_devices", Priority: 10}}, Index: 0},
		Agent: store.AgentSession{Token: "tok", BootID: "boot-1", LastHeartbeat: releaseTime,
			Steps:         &store.StepCache{Fingerprint: "fp", Clean: []protocol.Step{{Interface: "deploy", Step: "erase_devices", Priority: 10}}, RefreshedAt: releaseTime},
			CommandStatus: &protocol.CommandStatus{ID: "cmd-1", Name: "execute_clean_step", State: "RUNNING"}},
	}
	require.NoError(t, s.CreateNode(ctx, n))
	n.Maintenance = true
	require.NoError(t, s.UpdateNode(ctx, n, &store.Event{UUID: releaseEvent, NodeUUID: releaseNode,
		CreatedAt: releaseTime, Severity: "INFO", EventType: "cleaning", Event: "cleaning started", Conductor: "ctl-1"}))
	m := &store.Node{UUID: releaseNode2, Driver: "fake-hardware", ProvisionState: "available", CreatedAt: releaseTime.Add(time.Second)}
	require.NoError(t, s.CreateNode(ctx, m))
	require.NoError(t, s.CreatePortgroup(ctx, &store.Portgroup{UUID: releasePG, Name: strp("bond0"), NodeUUID: releaseNode,
		Address: strp("52:54:00:00:00:aa"), CreatedAt: releaseTime}))
	require.NoError(t, s.CreatePort(ctx, &store.Port{UUID: releasePort, Address: "52:54:00:00:00:01", NodeUUID: releaseNode,
		PortgroupUUID: strp(releasePG), PXEEnabled: true, CreatedAt: releaseTime}))
	require.NoError(t, s.CreateAllocation(ctx, &store.Allocation{UUID: releaseAlloc, Name: strp("alloc-1"), NodeUUID: strp(releaseNode2),
		State: "active", ResourceClass: "baremetal", Traits: []string{}, CandidateNodes: []string{}, CreatedAt: releaseTime}))
	require.NoError(t, s.PutInventory(ctx, releaseNode, []byte(`{"cpu":{"count":8}}`)))
	ok, _, err := s.AcquireLease(ctx, releaseNode, "ctl-1", 24*time.Hour*365*10)
	require.NoError(t, err)
	require.True(t, ok)
	require.NoError(t, s.RecordController(ctx, store.Controller{Holder: "ctl-1"}, 24*time.Hour*365*10))
	if dl, ok := s.(interface {
		ClaimDHCPLease(ctx context.Context, l store.DHCPLease, now time.Time) error
	}); ok {
		require.NoError(t, dl.ClaimDHCPLease(ctx, store.DHCPLease{MAC: "52:54:00:00:00:01", IP: "10.0.0.10",
			ExpiresAt: releaseTime.Add(time.Hour)}, releaseTime))
	}
}

// CheckRelease reads what PopulateRelease wrote through s and checks that
// every row is there, as written, and that s can still write.
func CheckRelease(t *testing.T, s store.Store) {
	ctx := context.Background()
	n, err := s.GetNode(ctx, "rel-1")
	require.NoError(t, err)
	assert.Equal(t, releaseNode, n.UUID)
	assert.Equal(t, int64(2), n.Revision)
	assert.True(t, n.Maintenance)
	assert.Equal(t, "192.0.2.10", n.DriverInfo["ipmi_address"])
	assert.Equal(t, []string{"CUSTOM_GOLD"}, n.Traits)
	require.NotNil(t, n.Operation.Clean)
	assert.Equal(t, "erase_devices", n.Operation.Clean.Steps[0].Step)
	assert.Equal(t, "tok", n.Operation.Agent.Token)
	require.NotNil(t, n.Operation.Agent.Steps, "the agent's step cache survives")
	assert.Equal(t, "fp", n.Operation.Agent.Steps.Fingerprint)
	require.NotNil(t, n.Operation.Agent.CommandStatus, "the agent's command status survives")
	assert.Equal(t, "RUNNING", n.Operation.Agent.CommandStatus.State)
	assert.True(t, n.Operation.Agent.LastHeartbeat.Equal(releaseTime))

	nodes, err := s.ListNodes(ctx, store.NodeFilter{}, store.Page{SortKey: "created_at"})
	require.NoError(t, err)
	require.Len(t, nodes, 2)
	assert.Equal(t, []string{releaseNode, releaseNode2}, []string{nodes[0].UUID, nodes[1].UUID})

	events, err := s.ListEvents(ctx, releaseNode, 0)
	require.NoError(t, err)
	require.Len(t, events, 1)
	assert.Equal(t, "cleaning started", events[0].Event)
	assert.True(t, events[0].CreatedAt.Equal(releaseTime))

	p, err := s.GetPort(ctx, releasePort)
	require.NoError(t, err)
	_, err = s.GetPort(ctx, releaseOrphan)
	assert.ErrorIs(t, err, store.ErrNotFound, "the migration removed the orphan port")
	assert.Equal(t, "52:54:00:00:00:01", p.Address)
	assert.Equal(t, releasePG, *p.PortgroupUUID)
	pg, err := s.GetPortgroup(ctx, "bond0")
	require.NoError(t, err)
	assert.Equal(t, releasePG, pg.UUID)
	a, err := s.GetAllocation(ctx, "alloc-1")
	require.NoError(t, err)
	assert.Equal(t, releaseNode2, *a.NodeUUID)
	ch, err := s.GetChassis(ctx, releaseChassis)
	require.NoError(t, err, "the migration created the chassis a node named")
	assert.Equal(t, releaseChassis, ch.UUID)
	assert.Empty(t, ch.Extra)
	assert.ErrorIs(t, s.DeleteChassis(ctx, releaseChassis), store.ErrNotEmpty)
	inv, err := s.GetInventory(ctx, releaseNode)
	require.NoError(t, err)
	assert.JSONEq(t, `{"cpu":{"count":8}}`, string(inv))

	ok, other, err := s.AcquireLease(ctx, releaseNode, "ctl-2", time.Minute)
	require.NoError(t, err)
	assert.False(t, ok, "the lease written by the release is live")
	assert.Equal(t, "ctl-1", other)
	live, err := s.LiveControllers(ctx)
	require.NoError(t, err)
	assert.Equal(t, []string{"ctl-1"}, live)
	if dl, ok := s.(interface {
		ListDHCPLeases(ctx context.Context) ([]store.DHCPLease, error)
	}); ok {
		leases, err := dl.ListDHCPLeases(ctx)
		require.NoError(t, err)
		require.Len(t, leases, 1)
		assert.Equal(t, "10.0.0.10", leases[0].IP)
		assert.True(t, leases[0].ExpiresAt.Equal(releaseTime.Add(time.Hour)))
	}

	// And the migrated database takes writes.
	_, err = store.MutateNode(ctx, s, releaseNode2, func(n *store.Node) error { n.ProvisionState = "active"; return nil })
	require.NoError(t, err)
	require.NoError(t, s.CreatePort(ctx, &store.Port{UUID: "6c0e3b3e-0000-4000-8000-0000000000a2", Address: "52:54:00:00:00:02",
		NodeUUID: releaseNode2, CreatedAt: time.Now().UTC()}))
	require.NoError(t, s.DeleteNode(ctx, n))
	_, err = s.GetPort(ctx, releasePort)
	assert.ErrorIs(t, err, store.ErrNotFound, "deleting the node took its port")
}
