package conductor

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

	"github.com/anvil-metal/anvil/controller/state"
	"github.com/anvil-metal/anvil/controller/store"
	"github.com/anvil-metal/anvil/controller/store/postgres"
	"github.com/anvil-metal/anvil/controller/store/postgres/pgserver"
	"github.com/anvil-metal/anvil/controller/store/sqlite"
)

// TestAllocations runs Ironic's allocation algorithm on SQLite and on
// PostgreSQL: resource classes, traits, candidates, the errors of an
// unsatisfiable request, backfill, deletion, takeover and concurrency.
func TestAllocations(t *testing.T) {
	stores := map[string]func(t *testing.T) store.Store{
		"SQLite": func(t *testing.T) store.Store {
			st, err := sqlite.Open(context.Background(), t.TempDir()+"/anvil.db")
			require.NoError(t, err)
			t.Cleanup(func() { st.Close() })
			return st
		},
	}
	stores["PostgreSQL"] = func(t *testing.T) store.Store {
		t.Skip("no PostgreSQL server")
		return nil
	}
	if pg, err := pgserver.Start(pgserver.Options{}); err == nil {
		t.Cleanup(pg.Stop)
		stores["PostgreSQL"] = func(t *testing.T) store.Store {
			st, err := postgres.Open(context.Background(), pg.NewDatabase(t))
			require.NoError(t, err)
			t.Cleanup(func() { st.Close() })
			return st
		}
	} else if !errors.Is(err, pgserver.ErrNotInstalled) {
		t.Fatal(err)
	}
	tests := map[string]func(t *testing.T, open func(t *testing.T) store.Store){
		"Matching":          testAllocationMatching,
		"Unsatisfiable":     testAllocationErrors,
		"BackfillDelete":    testAllocationBackfill,
		"Concurrent":        testAllocationConcurrent,
		"TakeOver":          testAllocationTakeOver,
		"DeleteWhileBusy":   testAllocationDeletedMeanwhile,
		"NameFirstAndOwner": testAllocationNameAndOwner,
		"Interrupted":       testAllocationInterrupted,
	}
	for _, sn := range []string{"SQLite", "PostgreSQL"} {
		t.Run(sn, func(t *testing.T) {
			for name, fn := range tests {
				t.Run(name, func(t *testing.T) { fn(t, stores[sn]) })
			}
		})
	}
}

// allocEnv is a conductor over a store, not running: tests drive the
// allocator's steps themselves.
type allocEnv struct {
	t    *testing.T
	st   store.Store
	cond *Conductor
}

func newAllocEnv(t *testing.T, st store.Store, sole bool) *allocEnv {
	c := New(st, Config{Host: "alloc-test", SoleController: sole, CheckInterval: time.Hour}, FakeDriver{})
	c.allocator.retryWait = 10 * time.Millisecond
	return &allocEnv{t: t, st: st, cond: c}
}

// node creates an available, powered node of resource class rc.
func (e *allocEnv) node(name, rc string, traits ...string) *store.Node {
	e.t.Helper()
	n := &store.Node{UUID: uuid.NewString(), Name: &name, Driver: "fake-hardware", ProvisionState: string(state.Available),
		PowerState: strp(PowerOff), ResourceClass: &rc, Traits: traits, CreatedAt: time.Now().UTC()}
	require.NoError(e.t, e.st.CreateNode(context.Background(), n))
	return n
}

// allocation records an allocation as the API does and processes it.
func (e *allocEnv) allocate(a *store.Allocation) *store.Allocation {
	e.t.Helper()
	e.create(a)
	e.cond.processAllocation(context.Background(), a.UUID)
	return e.get(a.UUID)
}

func (e *allocEnv) create(a *store.Allocation) {
	e.t.Helper()
	if a.UUID == "" {
		a.UUID = uuid.NewString()
	}
	a.State, a.CreatedAt = AllocAllocating, time.Now().UTC()
	if a.ConductorAffinity == "" {
		a.ConductorAffinity = e.cond.Holder()
	}
	require.NoError(e.t, e.st.CreateAllocation(context.Background(), a))
}

func (e *allocEnv) get(ident string) *store.Allocation {
	e.t.Helper()
	a, err := e.st.GetAllocation(context.Background(), ident)
	require.NoError(e.t, err)
	return a
}

func (e *allocEnv) getNode(ident string) *store.Node {
	e.t.Helper()
	n, err := e.st.GetNode(context.Background(), ident)
	require.NoError(e.t, err)
	return n
}

func testAllocationMatching(t *testing.T, open func(t *testing.T) store.Store) {
	e := newAllocEnv(t, open(t), true)
	e.node("g1", "gold")
	gpu := e.node("g2", "gold", "CUSTOM_GPU", "CUSTOM_FAST")
	e.node("s1", "silver", "CUSTOM_GPU")

	a := e.allocate(&store.Allocation{ResourceClass: "gold", Traits: []string{"CUSTOM_GPU"}})
	require.Equal(t, AllocActive, a.State, "last_error: %v", a.LastError)
	assert.Equal(t, gpu.UUID, *a.NodeUUID, "the only gold node with the trait")
	assert.Nil(t, a.LastError)
	n := e.getNode(gpu.UUID)
	assert.Equal(t, a.UUID, *n.AllocationUUID)
	assert.Equal(t, a.UUID, *n.InstanceUUID)
	assert.Equal(t, []any{"CUSTOM_GPU"}, n.InstanceInfo["traits"], "the allocation's traits are recorded on the node")

	// Several candidates: any of them, each at most once.
	seen := map[string]bool{}
	for i := range 2 {
		b := e.allocate(&store.Allocation{ResourceClass: "silver"})
		if i == 0 {
			require.Equal(t, AllocActive, b.State)
			seen[*b.NodeUUID] = true
		} else {
			assert.Equal(t, AllocError, b.State, "the only silver node is taken")
		}
	}
	assert.Len(t, seen, 1)
}

func testAllocationErrors(t *testing.T, open func(t *testing.T) store.Store) {
	e := newAllocEnv(t, open(t), true)
	g1 := e.node("g1", "gold", "CUSTOM_A")
	busy := e.node("busy", "gold", "CUSTOM_A")
	_, err := store.MutateNode(context.Background(), e.st, busy.UUID, func(n *store.Node) error {
		n.Reservation = strp("another-host")
		return nil
	})
	require.NoError(t, err)
	maint := e.node("m1", "bronze")
	_, err = store.MutateNode(context.Background(), e.st, maint.UUID, func(n *store.Node) error {
		n.Maintenance = true
		return nil
	})
	require.NoError(t, err)
	unpowered := e.node("u1", "iron")
	_, err = store.MutateNode(context.Background(), e.st, unpowered.UUID, func(n *store.Node) error {
		n.PowerState = nil
		return nil
	})
	require.NoError(t, err)

	tests := map[string]struct {
		a      store.Allocation
		reason string
	}{
		"no such resource class": {store.Allocation{ResourceClass: "platinum"}, "no available nodes match the resource class platinum"},
		"in maintenance":         {store.Allocation{ResourceClass: "bronze"}, "no available nodes match the resource class bronze"},
		"no power state":         {store.Allocation{ResourceClass: "iron"}, "no available nodes match the resource class iron"},
		"candidate elsewhere": {store.Allocation{ResourceClass: "bronze", CandidateNodes: []string{g1.UUID}},
			"none of the requested nodes are available and match the resource class bronze"},
		"missing trait": {store.Allocation{ResourceClass: "gold", Traits: []string{"CUSTOM_A", "CUSTOM_B"}},
			"no suitable nodes have the requested traits CUSTOM_A, CUSTOM_B"},
		"only a busy node": {store.Allocation{ResourceClass: "gold", CandidateNodes: []string{busy.UUID}},
			"could not reserve any of 1 suitable nodes"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			a := e.allocate(&tc.a)
			assert.Equal(t, AllocError, a.State)
			assert.Nil(t, a.NodeUUID)
			require.NotNil(t, a.LastError)
			assert.Equal(t, "Failed to process allocation "+a.UUID+": "+tc.reason+".", *a.LastError)
		})
	}
	assert.Nil(t, e.getNode(g1.UUID).InstanceUUID, "no failed allocation took a node")
}

func testAllocationBackfill(t *testing.T, open func(t *testing.T) store.Store) {
	ctx := context.Background()
	e := newAllocEnv(t, open(t), true)
	deployed := e.node("d1", "gold", "CUSTOM_A")
	inst := uuid.NewString()
	_, err := store.MutateNode(ctx, e.st, deployed.UUID, func(n *store.Node) error {
		n.ProvisionState, n.InstanceUUID = string(state.Active), &inst
		return nil
	})
	require.NoError(t, err)
	avail := e.node("a1", "gold")

	// A mismatch leaves the allocation in error with Ironic's reasons.
	bad := &store.Allocation{ResourceClass: "silver", Traits: []string{"CUSTOM_B"}}
	e.create(bad)
	err = e.cond.Backfill(ctx, bad, avail.UUID)
	var af *AllocationFailed
	require.ErrorAs(t, err, &af)
	want := "Failed to process allocation " + bad.UUID + ": Cannot backfill an allocation for node " + avail.UUID +
		`: Node must be in the "active" state, but the current state is "available"; Resource class gold does not match ` +
		"the requested resource class silver; List of traits [] does not match the requested traits ['CUSTOM_B']."
	assert.Equal(t, want, err.Error())
	assert.Equal(t, want, *e.get(bad.UUID).LastError)
	assert.Equal(t, AllocError, e.get(bad.UUID).State)

	// The instance's UUID already on another node.
	clash := &store.Allocation{UUID: inst, ResourceClass: "gold"}
	e.create(clash)
	err = e.cond.Backfill(ctx, clash, avail.UUID)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "is already associated with a node")
	require.NoError(t, e.st.DeleteAllocation(ctx, inst))

	// The deployed node's own instance UUID.
	good := &store.Allocation{UUID: inst, ResourceClass: "gold", Traits: []string{"CUSTOM_A"}}
	e.create(good)
	require.NoError(t, e.cond.Backfill(ctx, good, deployed.UUID))
	assert.Equal(t, AllocActive, good.State)
	assert.Equal(t, deployed.UUID, *e.get(inst).NodeUUID)
	assert.Equal(t, inst, *e.getNode(deployed.UUID).AllocationUUID)

	// An active node keeps its allocation; out of service it goes.
	err = e.cond.Deallocate(ctx, e.get(inst))
	require.Error(t, err)
	assert.Equal(t, "Cannot remove allocation "+inst+" for node "+deployed.UUID+", because the node is active (and maintenance mode is off)", err.Error())
	_, err = store.MutateNode(ctx, e.st, deployed.UUID, func(n *store.Node) error {
		n.Maintenance = true
		return nil
	})
	require.NoError(t, err)
	require.NoError(t, e.cond.Deallocate(ctx, e.get(inst)))
	n := e.getNode(deployed.UUID)
	assert.Nil(t, n.AllocationUUID, "deleting frees the node")
	assert.Nil(t, n.InstanceUUID)
	_, err = e.st.GetAllocation(ctx, inst)
	assert.ErrorIs(t, err, store.ErrNotFound)

	// Deleting an available node's allocation frees it for the next.
	a := e.allocate(&store.Allocation{ResourceClass: "gold"})
	require.Equal(t, AllocActive, a.State)
	require.NoError(t, e.cond.Deallocate(ctx, a))
	assert.Nil(t, e.getNode(avail.UUID).InstanceUUID)
	assert.Equal(t, AllocActive, e.allocate(&store.Allocation{ResourceClass: "gold"}).State)
}

// testAllocationConcurrent: two controllers' allocators race for fewer
// nodes than allocations; no node is given twice, every node is given.
func testAllocationConcurrent(t *testing.T, open func(t *testing.T) store.Store) {
	st := open(t)
	e1, e2 := newAllocEnv(t, st, false), newAllocEnv(t, st, false)
	const nodes, allocs = 6, 10
	for i := range nodes {
		e1.node(fmt.Sprintf("n%d", i), "gold")
	}
	var list []*store.Allocation
	for i := range allocs {
		e := e1
		if i%2 == 1 {
			e = e2
		}
		a := &store.Allocation{ResourceClass: "gold"}
		e.create(a)
		list = append(list, a)
	}
	var wg sync.WaitGroup
	for i, a := range list {
		e := e1
		if i%2 == 1 {
			e = e2
		}
		wg.Add(1)
		go func() { defer wg.Done(); e.cond.processAllocation(context.Background(), a.UUID) }()
	}
	wg.Wait()
	owner := map[string]string{}
	active := 0
	for _, a := range list {
		got := e1.get(a.UUID)
		require.NotEqual(t, AllocAllocating, got.State)
		if got.State != AllocActive {
			continue
		}
		active++
		prev, dup := owner[*got.NodeUUID]
		require.False(t, dup, "node %s given to %s and %s", *got.NodeUUID, prev, got.UUID)
		owner[*got.NodeUUID] = got.UUID
		assert.Equal(t, got.UUID, *e1.getNode(*got.NodeUUID).AllocationUUID)
	}
	assert.Equal(t, nodes, active, "every node was allocated once")
}

// testAllocationTakeOver: an allocation left in allocating by a controller
// that is gone is finished by another; one of a live controller is not.
func testAllocationTakeOver(t *testing.T, open func(t *testing.T) store.Store) {
	ctx := context.Background()
	st := open(t)
	n := (&allocEnv{t: t, st: st}).node("g1", "gold")
	require.NoError(t, st.RecordController(ctx, store.Controller{Holder: "alive/1"}, time.Minute))
	e := newAllocEnv(t, st, false)
	orphan := &store.Allocation{ResourceClass: "gold", ConductorAffinity: "gone/1"}
	e.create(orphan)
	kept := &store.Allocation{ResourceClass: "gold", ConductorAffinity: "alive/1"}
	e.create(kept)

	e.cond.ScanAllocations(ctx)
	select {
	case id := <-e.cond.allocator.queue:
		assert.Equal(t, orphan.UUID, id, "only the dead controller's allocation is taken over")
		e.cond.processAllocation(ctx, id)
	default:
		t.Fatal("nothing taken over")
	}
	got := e.get(orphan.UUID)
	assert.Equal(t, AllocActive, got.State)
	assert.Equal(t, n.UUID, *got.NodeUUID)
	assert.Equal(t, e.cond.Holder(), got.ConductorAffinity)
	assert.Equal(t, AllocAllocating, e.get(kept.UUID).State)

	// A controller that lost the allocation meanwhile does not finish it.
	e.cond.processAllocation(ctx, kept.UUID)
	assert.Equal(t, AllocAllocating, e.get(kept.UUID).State)

	// A controller alone on its store (restarted) takes every leftover.
	sole := newAllocEnv(t, st, true)
	sole.cond.ScanAllocations(ctx)
	assert.Len(t, sole.cond.allocator.queue, 1)
}

// testAllocationDeletedMeanwhile: an allocation deleted while it was
// processed gives its node back.
func testAllocationDeletedMeanwhile(t *testing.T, open func(t *testing.T) store.Store) {
	ctx := context.Background()
	e := newAllocEnv(t, open(t), true)
	n := e.node("g1", "gold")
	a := &store.Allocation{ResourceClass: "gold"}
	e.create(a)
	require.NoError(t, e.st.DeleteAllocation(ctx, a.UUID))
	err := e.cond.claim(ctx, a, n.UUID, func(*store.Node) error { return nil })
	assert.ErrorIs(t, err, errAllocationLost)
	got := e.getNode(n.UUID)
	assert.Nil(t, got.AllocationUUID, "the node is given back")
	assert.Nil(t, got.InstanceUUID)
}

func testAllocationNameAndOwner(t *testing.T, open func(t *testing.T) store.Store) {
	ctx := context.Background()
	e := newAllocEnv(t, open(t), true)
	for i := range 5 {
		e.node(fmt.Sprintf("node-%d", i), "gold")
	}
	a := e.allocate(&store.Allocation{Name: strp("node-3"), ResourceClass: "gold"})
	require.Equal(t, AllocActive, a.State)
	assert.Equal(t, "node-3", *e.getNode(*a.NodeUUID).Name, "a node named like the allocation is tried first")

	owned := e.node("owned", "silver")
	e.node("other", "silver")
	_, err := store.MutateNode(ctx, e.st, owned.UUID, func(n *store.Node) error {
		n.Lessee = strp("proj-1")
		return nil
	})
	require.NoError(t, err)
	b := e.allocate(&store.Allocation{ResourceClass: "silver", Owner: strp("proj-1")})
	require.Equal(t, AllocActive, b.State)
	assert.Equal(t, owned.UUID, *b.NodeUUID, "owner matches a node's owner or lessee")
}

// testAllocationInterrupted: a controller that stopped between reserving
// the node and recording it on the allocation left the node reserved; the
// allocation is finished with that node, not another.
func testAllocationInterrupted(t *testing.T, open func(t *testing.T) store.Store) {
	ctx := context.Background()
	e := newAllocEnv(t, open(t), true)
	e.node("free", "gold")
	held := e.node("held", "gold")
	a := &store.Allocation{ResourceClass: "gold"}
	e.create(a)
	_, err := store.MutateNode(ctx, e.st, held.UUID, func(n *store.Node) error {
		n.AllocationUUID, n.InstanceUUID = &a.UUID, &a.UUID
		return nil
	})
	require.NoError(t, err)
	e.cond.processAllocation(ctx, a.UUID)
	got := e.get(a.UUID)
	assert.Equal(t, AllocActive, got.State)
	assert.Equal(t, held.UUID, *got.NodeUUID)
}
