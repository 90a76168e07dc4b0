// Package storetest is the behaviour every store.Store implementation must
// have. Each backend's tests call Run with a constructor of fresh stores.
package storetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/controller/store"
)

// Run runs the suite; open must return an empty store.
func Run(t *testing.T, open func(t *testing.T) store.Store) {
	tests := map[string]func(*testing.T, store.Store){
		"NodeCRUD":           testNodeCRUD,
		"NodeConflict":       testNodeConflict,
		"NodeFilters":        testNodeFilters,
		"NodePagination":     testNodePagination,
		"MutateNodeRetries":  testMutateNodeRetries,
		"Ports":              testPorts,
		"Allocations":        testAllocations,
		"Revisions":          testRevisions,
		"NoOrphans":          testNoOrphans,
		"Chassis":            testChassis,
		"Volumes":            testVolumes,
		"Events":             testEvents,
		"CountByState":       testCountByState,
		"EventsWithUpdate":   testEventsWithUpdate,
		"Summaries":          testSummaries,
		"Inventory":          testInventory,
		"ConcurrentUpdates":  testConcurrentUpdates,
		"Leases":             testLeases,
		"LeaseExpiry":        testLeaseExpiry,
		"LeaseFence":         testLeaseFence,
		"LeaseRace":          testLeaseRace,
		"UnleasedWork":       testUnleasedWork,
		"Controllers":        testControllers,
		"Operation":          testOperation,
		"AgentStatePages":    testAgentStatePages,
		"StepResults":        testStepResults,
		"StepResultsBound":   testStepResultsBound,
		"EraseRecords":       testEraseRecords,
		"DeployTemplates":    testDeployTemplates,
		"InspectionRules":    testInspectionRules,
		"Runbooks":           testRunbooks,
		"ControllerRecords":  testControllerRecords,
		"BIOSSettings":       testBIOSSettings,
		"Firmware":           testFirmwareComponents,
		"ParentNode":         testParentNode,
		"BootTimelines":      testBootTimelines,
		"BootTimelineFlood":  testBootTimelineFlood,
		"StepResultWithNode": testStepResultWithNode,
		"EnrolNode":          testEnrolNode,
	}
	for name, fn := range tests {
		t.Run(name, func(t *testing.T) {
			s := open(t)
			t.Cleanup(func() { s.Close() })
			fn(t, s)
		})
	}
}

func strp(s string) *string { return &s }
func boolp(b bool) *bool    { return &b }

// NewNode returns a valid node for tests.
func NewNode(name string) *store.Node {
	n := &store.Node{UUID: uuid.NewString(), Driver: "fake-hardware", ProvisionState: "enroll", CreatedAt: time.Now().UTC()}
	if name != "" {
		n.Name = &name
	}
	return n
}

func testNodeCRUD(t *testing.T, s store.Store) {
	ctx := context.Background()
	n := NewNode("node-1")
	n.DriverInfo = map[string]any{"ipmi_address": "127.0.0.1", "port": float64(623)}
	require.NoError(t, s.CreateNode(ctx, n))
	assert.NotZero(t, n.ID)

	byUUID, err := s.GetNode(ctx, n.UUID)
	require.NoError(t, err)
	byName, err := s.GetNode(ctx, "node-1")
	require.NoError(t, err)
	assert.Equal(t, byUUID, byName)
	assert.Equal(t, n.DriverInfo, byUUID.DriverInfo)
	assert.Equal(t, []string{}, byUUID.Traits, "nil slices come back empty")
	assert.Equal(t, map[string]any{}, byUUID.CleanStep)

	dup := NewNode("node-1")
	assert.ErrorIs(t, s.CreateNode(ctx, dup), store.ErrDuplicateName)
	same := NewNode("other")
	same.UUID = n.UUID
	assert.ErrorIs(t, s.CreateNode(ctx, same), store.ErrDuplicateUUID)

	byUUID.ProvisionState = "manageable"
	require.NoError(t, s.UpdateNode(ctx, byUUID))
	got, err := s.GetNode(ctx, n.UUID)
	require.NoError(t, err)
	assert.Equal(t, "manageable", got.ProvisionState)
	require.NotNil(t, got.UpdatedAt)

	assert.ErrorIs(t, s.DeleteNode(ctx, n), store.ErrConflict, "n was read before the update")
	_, err = s.GetNode(ctx, n.UUID)
	require.NoError(t, err, "a refused delete leaves the node")
	require.NoError(t, s.DeleteNode(ctx, got))
	_, err = s.GetNode(ctx, n.UUID)
	assert.ErrorIs(t, err, store.ErrNotFound)
	assert.ErrorIs(t, s.DeleteNode(ctx, got), store.ErrNotFound)
}

func testNodeConflict(t *testing.T, s store.Store) {
	ctx := context.Background()
	n := NewNode("")
	require.NoError(t, s.CreateNode(ctx, n))
	a, err := s.GetNode(ctx, n.UUID)
	require.NoError(t, err)
	b, err := s.GetNode(ctx, n.UUID)
	require.NoError(t, err)
	a.ProvisionState = "verifying"
	require.NoError(t, s.UpdateNode(ctx, a))
	b.ProvisionState = "manageable"
	assert.ErrorIs(t, s.UpdateNode(ctx, b), store.ErrConflict, "stale writer must lose")
	got, err := s.GetNode(ctx, n.UUID)
	require.NoError(t, err)
	assert.Equal(t, "verifying", got.ProvisionState)

	ghost := NewNode("")
	assert.ErrorIs(t, s.UpdateNode(ctx, ghost), store.ErrNotFound)
}

func testMutateNodeRetries(t *testing.T, s store.Store) {
	ctx := context.Background()
	n := NewNode("")
	require.NoError(t, s.CreateNode(ctx, n))
	calls := 0
	got, err := store.MutateNode(ctx, s, n.UUID, func(m *store.Node) error {
		calls++
		if calls == 1 { // a concurrent writer sneaks in between read and write
			other, err := s.GetNode(ctx, n.UUID)
			require.NoError(t, err)
			other.Extra = map[string]any{"other": true}
			require.NoError(t, s.UpdateNode(ctx, other))
		}
		m.Properties = map[string]any{"cpus": float64(calls)}
		return nil
	})
	require.NoError(t, err)
	assert.Equal(t, 2, calls)
	assert.Equal(t, map[string]any{"other": true}, got.Extra, "the concurrent change survives")
	assert.Equal(t, map[string]any{"cpus": float64(2)}, got.Properties)

	_, err = store.MutateNode(ctx, s, n.UUID, func(*store.Node) error { return fmt.Errorf("refused") })
	assert.EqualError(t, err, "refused")
}

func testNodeFilters(t *testing.T, s store.Store) {
	ctx := context.Background()
	mk := func(name, state string, maint, retired bool, inst *string, rc string) {
		n := NewNode(name)
		n.ProvisionState, n.Maintenance, n.Retired, n.InstanceUUID = state, maint, retired, inst
		n.ResourceClass = strp(rc)
		n.Description = strp("rack " + name)
		require.NoError(t, s.CreateNode(ctx, n))
	}
	mk("a", "available", false, false, nil, "gold")
	mk("b", "available", true, false, strp(uuid.NewString()), "gold")
	mk("c", "manageable", false, true, nil, "silver")
	mk("d", "active", false, false, strp(uuid.NewString()), "silver")
	_, err := store.MutateNode(ctx, s, "d", func(n *store.Node) error { n.Reservation = strp("ctl-2"); return nil })
	require.NoError(t, err)
	// acme owns a and leases c (the project filter of policy's lists)
	_, err = store.MutateNode(ctx, s, "a", func(n *store.Node) error { n.Owner = strp("acme"); return nil })
	require.NoError(t, err)
	_, err = store.MutateNode(ctx, s, "c", func(n *store.Node) error { n.Owner, n.Lessee = strp("beta"), strp("acme"); return nil })
	require.NoError(t, err)

	names := func(f store.NodeFilter) []string {
		nodes, err := s.ListNodes(ctx, f, store.Page{})
		require.NoError(t, err)
		var out []string
		for _, n := range nodes {
			out = append(out, *n.Name)
		}
		return out
	}
	tests := map[string]struct {
		f    store.NodeFilter
		want []string
	}{
		"all":             {store.NodeFilter{}, []string{"a", "b", "c", "d"}},
		"project":         {store.NodeFilter{Project: strp("acme")}, []string{"a", "c"}},
		"project beta":    {store.NodeFilter{Project: strp("beta")}, []string{"c"}},
		"state":           {store.NodeFilter{ProvisionState: strp("available")}, []string{"a", "b"}},
		"maintenance":     {store.NodeFilter{Maintenance: boolp(true)}, []string{"b"}},
		"retired":         {store.NodeFilter{Retired: boolp(true)}, []string{"c"}},
		"not retired":     {store.NodeFilter{Retired: boolp(false)}, []string{"a", "b", "d"}},
		"associated":      {store.NodeFilter{Associated: boolp(true)}, []string{"b", "d"}},
		"unassociated":    {store.NodeFilter{Associated: boolp(false)}, []string{"a", "c"}},
		"resource class":  {store.NodeFilter{ResourceClass: strp("silver")}, []string{"c", "d"}},
		"combined":        {store.NodeFilter{ResourceClass: strp("gold"), Maintenance: boolp(false)}, []string{"a"}},
		"description":     {store.NodeFilter{DescriptionContains: strp("rack c")}, []string{"c"}},
		"name contains":   {store.NodeFilter{NameContains: strp("C")}, []string{"c"}},
		"name, literal %": {store.NodeFilter{NameContains: strp("%")}, nil},
		"text: descr.":    {store.NodeFilter{TextContains: strp("RACK C")}, []string{"c"}},
		"text: all":       {store.NodeFilter{TextContains: strp("Rack")}, []string{"a", "b", "c", "d"}},
		"text: literal _": {store.NodeFilter{TextContains: strp("_")}, nil},
		"driver none":     {store.NodeFilter{Driver: strp("ipmi")}, nil},
		"conductor":       {store.NodeFilter{Conductor: &store.ConductorFilter{Host: "ctl-2"}}, []string{"d"}},
		"conductor, free": {store.NodeFilter{Conductor: &store.ConductorFilter{Host: "ctl-1", Free: true}}, []string{"a", "b", "c"}},
	}
	for name, tc := range tests {
		assert.Equal(t, tc.want, names(tc.f), name)
	}
}

func testNodePagination(t *testing.T, s store.Store) {
	ctx := context.Background()
	var all []string
	for i := 0; i < 7; i++ {
		n := NewNode(fmt.Sprintf("n%d", 6-i)) // names in reverse insertion order
		require.NoError(t, s.CreateNode(ctx, n))
		all = append(all, n.UUID)
	}
	walk := func(p store.Page) []string {
		var got []string
		for {
			page, err := s.ListNodes(ctx, store.NodeFilter{}, p)
			require.NoError(t, err)
			for _, n := range page {
				got = append(got, n.UUID)
			}
			if len(page) < p.Limit {
				return got
			}
			p.Marker = page[len(page)-1].UUID
		}
	}
	assert.Equal(t, all, walk(store.Page{Limit: 3}))
	rev := make([]string, len(all))
	for i := range all {
		rev[i] = all[len(all)-1-i]
	}
	assert.Equal(t, rev, walk(store.Page{Limit: 2, Desc: true}))
	assert.Equal(t, rev, walk(store.Page{Limit: 3, SortKey: "name"}), "sorted by name n0..n6")

	_, err := s.ListNodes(ctx, store.NodeFilter{}, store.Page{Limit: 1, Marker: uuid.NewString()})
	assert.ErrorIs(t, err, store.ErrNotFound)
	_, err = s.ListNodes(ctx, store.NodeFilter{}, store.Page{SortKey: "driver_info"})
	assert.Error(t, err)
}

func testPorts(t *testing.T, s store.Store) {
	ctx := context.Background()
	n := NewNode("")
	require.NoError(t, s.CreateNode(ctx, n))
	p := &store.Port{UUID: uuid.NewString(), Address: "52:54:00:aa:bb:cc", NodeUUID: n.UUID, PXEEnabled: true, CreatedAt: time.Now().UTC()}
	require.NoError(t, s.CreatePort(ctx, p))
	dup := &store.Port{UUID: uuid.NewString(), Address: p.Address, NodeUUID: n.UUID}
	assert.ErrorIs(t, s.CreatePort(ctx, dup), store.ErrDuplicateAddr)

	byAddr, err := s.ListPorts(ctx, store.ResourceFilter{Address: strp(p.Address)}, store.Page{})
	require.NoError(t, err)
	require.Len(t, byAddr, 1)
	assert.Equal(t, p.UUID, byAddr[0].UUID)

	p.Address = "52:54:00:aa:bb:dd"
	require.NoError(t, s.UpdatePort(ctx, p))
	got, err := s.GetPort(ctx, p.UUID)
	require.NoError(t, err)
	assert.Equal(t, "52:54:00:aa:bb:dd", got.Address)
	stalePort, err := s.GetPort(ctx, p.UUID)
	require.NoError(t, err)
	got.InternalInfo = map[string]any{"tenant_vif_port_id": "vif-1"}
	require.NoError(t, s.UpdatePort(ctx, got), "a port read is written at its revision")
	assert.ErrorIs(t, s.UpdatePort(ctx, stalePort), store.ErrConflict, "a stale port is not written over it")
	got, err = s.GetPort(ctx, p.UUID)
	require.NoError(t, err)
	assert.Equal(t, "vif-1", got.InternalInfo["tenant_vif_port_id"])

	pg := &store.Portgroup{UUID: uuid.NewString(), Name: strp("bond0"), NodeUUID: n.UUID}
	require.NoError(t, s.CreatePortgroup(ctx, pg))
	gotPG, err := s.GetPortgroup(ctx, "bond0")
	require.NoError(t, err)
	assert.Equal(t, pg.UUID, gotPG.UUID)

	require.NoError(t, s.DeleteNode(ctx, n))
	_, err = s.GetPort(ctx, p.UUID)
	assert.ErrorIs(t, err, store.ErrNotFound, "ports go with their node")
	_, err = s.GetPortgroup(ctx, pg.UUID)
	assert.ErrorIs(t, err, store.ErrNotFound)
}

func testAllocations(t *testing.T, s store.Store) {
	ctx := context.Background()
	a := &store.Allocation{UUID: uuid.NewString(), Name: strp("alloc-1"), State: "allocating", ResourceClass: "gold"}
	require.NoError(t, s.CreateAllocation(ctx, a))
	got, err := s.GetAllocation(ctx, "alloc-1")
	require.NoError(t, err)
	assert.Equal(t, a.UUID, got.UUID)
	ghost := uuid.NewString()
	got.NodeUUID = &ghost
	assert.ErrorIs(t, s.UpdateAllocation(ctx, got), store.ErrNotFound, "an allocation of a node that does not exist")
	n := NewNode("")
	require.NoError(t, s.CreateNode(ctx, n))
	got.NodeUUID, got.State = &n.UUID, "active"
	stale, err := s.GetAllocation(ctx, a.UUID)
	require.NoError(t, err)
	require.NoError(t, s.UpdateAllocation(ctx, got))
	stale.State = "error"
	assert.ErrorIs(t, s.UpdateAllocation(ctx, stale), store.ErrConflict, "a write of what another writer changed since")
	list, err := s.ListAllocations(ctx, store.ResourceFilter{NodeUUID: &n.UUID}, store.Page{})
	require.NoError(t, err)
	require.Len(t, list, 1)
	assert.Equal(t, "active", list[0].State)
	require.NoError(t, s.DeleteAllocation(ctx, a.UUID))
	assert.ErrorIs(t, s.DeleteAllocation(ctx, a.UUID), store.ErrNotFound)

	// Deleting a node deletes its allocation, as in Ironic.
	b := &store.Allocation{UUID: uuid.NewString(), NodeUUID: &n.UUID, State: "active", ResourceClass: "gold"}
	require.NoError(t, s.CreateAllocation(ctx, b))
	require.NoError(t, s.DeleteNode(ctx, n))
	_, err = s.GetAllocation(ctx, b.UUID)
	assert.ErrorIs(t, err, store.ErrNotFound, "allocations go with their node")
}

// testNoOrphans: no port, port group, allocation or inventory of a node
// that does not exist can be written.
func testNoOrphans(t *testing.T, s store.Store) {
	ctx := context.Background()
	ghost := uuid.NewString()
	assert.ErrorIs(t, s.CreatePort(ctx, &store.Port{UUID: uuid.NewString(), Address: "52:54:00:0f:0f:0f", NodeUUID: ghost}), store.ErrNotFound)
	assert.ErrorIs(t, s.CreatePortgroup(ctx, &store.Portgroup{UUID: uuid.NewString(), NodeUUID: ghost}), store.ErrNotFound)
	assert.ErrorIs(t, s.CreateAllocation(ctx, &store.Allocation{UUID: uuid.NewString(), NodeUUID: &ghost, State: "active"}), store.ErrNotFound)
	assert.ErrorIs(t, s.PutInventory(ctx, ghost, []byte(`{}`)), store.ErrNotFound)

	n := NewNode("")
	require.NoError(t, s.CreateNode(ctx, n))
	p := &store.Port{UUID: uuid.NewString(), Address: "52:54:00:0f:0f:0e", NodeUUID: n.UUID}
	require.NoError(t, s.CreatePort(ctx, p))
	p.NodeUUID = ghost
	assert.ErrorIs(t, s.UpdatePort(ctx, p), store.ErrNotFound, "a port moved to a node that does not exist")
	got, err := s.GetPort(ctx, p.UUID)
	require.NoError(t, err)
	assert.Equal(t, n.UUID, got.NodeUUID, "the refused update changed nothing")
	ports, err := s.ListPorts(ctx, store.ResourceFilter{}, store.Page{})
	require.NoError(t, err)
	assert.Len(t, ports, 1)
}

func testEvents(t *testing.T, s store.Store) {
	ctx := context.Background()
	n := NewNode("")
	require.NoError(t, s.CreateNode(ctx, n))
	for i := 0; i < 5; i++ {
		require.NoError(t, s.AppendEvent(ctx, &store.Event{UUID: uuid.NewString(), NodeUUID: n.UUID,
			CreatedAt: time.Now().UTC(), Severity: "INFO", EventType: "provisioning", Event: fmt.Sprintf("e%d", i)}))
	}
	all, err := s.ListEvents(ctx, n.UUID, 0)
	require.NoError(t, err)
	require.Len(t, all, 5)
	assert.Equal(t, "e0", all[0].Event)
	last, err := s.ListEvents(ctx, n.UUID, 2)
	require.NoError(t, err)
	require.Len(t, last, 2)
	assert.Equal(t, []string{"e3", "e4"}, []string{last[0].Event, last[1].Event})
}

func testCountByState(t *testing.T, s store.Store) {
	ctx := context.Background()
	for _, st := range []string{"enroll", "enroll", "available"} {
		n := NewNode("")
		n.ProvisionState = st
		require.NoError(t, s.CreateNode(ctx, n))
	}
	counts, err := s.CountNodesByState(ctx)
	require.NoError(t, err)
	assert.Equal(t, map[string]int{"enroll": 2, "available": 1}, counts)
}

func testEventsWithUpdate(t *testing.T, s store.Store) {
	ctx := context.Background()
	n := NewNode("")
	require.NoError(t, s.CreateNode(ctx, n))
	stale, err := s.GetNode(ctx, n.UUID)
	require.NoError(t, err)
	ev := func(msg string) *store.Event {
		return &store.Event{UUID: uuid.NewString(), NodeUUID: n.UUID, CreatedAt: time.Now().UTC(), Severity: "INFO", Event: msg}
	}
	cur, err := s.GetNode(ctx, n.UUID)
	require.NoError(t, err)
	cur.ProvisionState = "verifying"
	require.NoError(t, s.UpdateNode(ctx, cur, ev("enroll -> verifying"), ev("second")))

	stale.ProvisionState = "manageable"
	require.ErrorIs(t, s.UpdateNode(ctx, stale, ev("lost")), store.ErrConflict)
	events, err := s.ListEvents(ctx, n.UUID, 0)
	require.NoError(t, err)
	var msgs []string
	for _, e := range events {
		msgs = append(msgs, e.Event)
	}
	assert.Equal(t, []string{"enroll -> verifying", "second"}, msgs, "a refused update writes none of its events")
}

func testSummaries(t *testing.T, s store.Store) {
	ctx := context.Background()
	for i := 0; i < 5; i++ {
		n := NewNode(fmt.Sprintf("s%d", i))
		n.Maintenance = i%2 == 0
		n.PowerState = strp("power on")
		require.NoError(t, s.CreateNode(ctx, n))
	}
	f := store.NodeFilter{Maintenance: boolp(true)}
	p := store.Page{Limit: 2, SortKey: "name", Desc: true}
	full, err := s.ListNodes(ctx, f, p)
	require.NoError(t, err)
	sums, err := s.ListNodeSummaries(ctx, f, p)
	require.NoError(t, err)
	require.Len(t, sums, len(full))
	for i := range full {
		assert.Equal(t, full[i].UUID, sums[i].UUID)
		assert.Equal(t, full[i].Name, sums[i].Name)
		assert.Equal(t, full[i].Maintenance, sums[i].Maintenance)
		assert.Equal(t, full[i].PowerState, sums[i].PowerState)
		assert.Equal(t, full[i].ProvisionState, sums[i].ProvisionState)
	}
}

func testInventory(t *testing.T, s store.Store) {
	ctx := context.Background()
	n := NewNode("")
	require.NoError(t, s.CreateNode(ctx, n))
	_, err := s.GetInventory(ctx, n.UUID)
	assert.ErrorIs(t, err, store.ErrNotFound)
	require.NoError(t, s.PutInventory(ctx, n.UUID, []byte(`{"cpu":{"count":2}}`)))
	require.NoError(t, s.PutInventory(ctx, n.UUID, []byte(`{"cpu":{"count":4}}`)), "a second inspection replaces it")
	got, err := s.GetInventory(ctx, n.UUID)
	require.NoError(t, err)
	assert.JSONEq(t, `{"cpu":{"count":4}}`, string(got))
	assert.Error(t, s.PutInventory(ctx, n.UUID, []byte(`{`)))
	require.NoError(t, s.DeleteNode(ctx, n))
	_, err = s.GetInventory(ctx, n.UUID)
	assert.ErrorIs(t, err, store.ErrNotFound, "the inventory goes with its node")
}

// testConcurrentUpdates writes many nodes at once (a backend may commit
// them together) and checks that each writer gets its own outcome: fresh
// writes land with their events, stale ones fail alone.
func testConcurrentUpdates(t *testing.T, s store.Store) {
	ctx := context.Background()
	const n = 40
	var ids []string
	for i := 0; i < n; i++ {
		node := NewNode(fmt.Sprintf("c%d", i))
		require.NoError(t, s.CreateNode(ctx, node))
		ids = append(ids, node.UUID)
	}
	var wg sync.WaitGroup
	errs := make([]error, 2*n)
	for i, id := range ids {
		fresh, err := s.GetNode(ctx, id)
		require.NoError(t, err)
		stale := *fresh
		stale.Revision-- // as if read before someone else's write
		wg.Add(2)
		go func(i int) {
			defer wg.Done()
			fresh.ProvisionState = "manageable"
			errs[i] = s.UpdateNode(ctx, fresh, &store.Event{UUID: uuid.NewString(), NodeUUID: fresh.UUID, CreatedAt: time.Now(), Event: "ok"})
		}(i)
		go func(i int) {
			defer wg.Done()
			stale.ProvisionState = "error"
			errs[n+i] = s.UpdateNode(ctx, &stale, &store.Event{UUID: uuid.NewString(), NodeUUID: stale.UUID, CreatedAt: time.Now(), Event: "stale"})
		}(i)
	}
	wg.Wait()
	for i, id := range ids {
		require.NoError(t, errs[i], id)
		assert.True(t, errors.Is(errs[n+i], store.ErrConflict), "stale write %d: %v", i, errs[n+i])
		got, err := s.GetNode(ctx, id)
		require.NoError(t, err)
		assert.Equal(t, "manageable", got.ProvisionState)
		events, err := s.ListEvents(ctx, id, 0)
		require.NoError(t, err)
		require.Len(t, events, 1)
		assert.Equal(t, "ok", events[0].Event)
	}
}
