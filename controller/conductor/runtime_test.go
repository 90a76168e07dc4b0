package conductor

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/controller/state"
	"github.com/anvil-metal/anvil/controller/store"
	"github.com/anvil-metal/anvil/controller/store/sqlite"
	"github.com/anvil-metal/anvil/controller/store/storetest"
	"github.com/anvil-metal/anvil/protocol"
)

// notifyingStore is a store with a recording Notifier, as PostgreSQL has.
type notifyingStore struct {
	store.Store
	mu       sync.Mutex
	notified []string // "holder node"
}

func (s *notifyingStore) NotifyNode(_ context.Context, node, holder string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.notified = append(s.notified, holder+" "+node)
	return nil
}

func (s *notifyingStore) ListenNodes(ctx context.Context, _ string, _ func(string)) error {
	<-ctx.Done()
	return nil
}

func (s *notifyingStore) sent() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.notified...)
}

func openSQLite(t *testing.T) store.Store {
	t.Helper()
	st, err := sqlite.Open(context.Background(), ":memory:")
	require.NoError(t, err)
	t.Cleanup(func() { st.Close() })
	return st
}

// A node whose lease another live controller holds is not worked on here:
// the kick is handed over to the holder.
func TestLeasedNodeIsHandedToItsHolder(t *testing.T) {
	ctx := context.Background()
	st := &notifyingStore{Store: openSQLite(t)}
	drv := &scriptDriver{steps: twoSteps(true)}
	e := start(t, drv, Config{}, st)
	id := e.manageable(t)
	ok, _, err := st.AcquireLease(ctx, id, "other/0001", time.Minute)
	require.NoError(t, err)
	require.True(t, ok)

	require.NoError(t, e.c.Provision(ctx, id, ProvisionRequest{Target: "provide"}))
	require.Eventually(t, func() bool { return len(st.sent()) > 0 }, 5*time.Second, 2*time.Millisecond)
	assert.Equal(t, "other/0001 "+id, st.sent()[0])
	require.Eventually(t, e.c.Idle, 5*time.Second, 2*time.Millisecond)
	assert.Empty(t, drv.executed(), "no step ran on the controller without the lease")
	n, err := st.GetNode(ctx, id)
	require.NoError(t, err)
	assert.Equal(t, string(state.Cleaning), n.ProvisionState)

	// The holder goes away cleanly: this controller takes the node on the
	// next kick and finishes it, then gives the lease back.
	require.NoError(t, st.ReleaseLease(ctx, id, "other/0001"))
	e.c.Kick(id)
	e.wait(t, id, state.Available)
	assert.Equal(t, []string{"deploy.erase_devices_metadata", "deploy.erase_devices"}, drv.executed())
	ok, other, err := st.AcquireLease(ctx, id, "third/0002", time.Minute)
	require.NoError(t, err)
	assert.True(t, ok, "a resting node's lease is released")
	assert.Empty(t, other)
}

// A controller that loses the lease in the middle of a step (it paused
// past the lease period and another one took over) cannot record the
// step's outcome: the fenced write fails and the node is left to the new
// holder.
func TestLostLeaseFencesTheWrite(t *testing.T) {
	ctx := context.Background()
	st := openSQLite(t)
	steal := make(chan struct{})
	drv := &stealingDriver{scriptDriver: scriptDriver{steps: twoSteps(true)}, st: st, stolen: steal}
	e := start(t, drv, Config{}, st)
	id := e.manageable(t)
	require.NoError(t, e.c.Provision(ctx, id, ProvisionRequest{Target: "provide"}))
	<-steal
	require.Eventually(t, e.c.Idle, 5*time.Second, 2*time.Millisecond)

	n, err := st.GetNode(ctx, id)
	require.NoError(t, err)
	assert.Equal(t, string(state.Cleaning), n.ProvisionState, "nothing recorded after the lease was lost")
	assert.Equal(t, "erase_devices_metadata", n.CleanStep["step"], "the step the thief will resume")
	assert.Equal(t, []string{"deploy.erase_devices_metadata"}, drv.executed(), "the loser stopped")
	events, err := st.ListEvents(ctx, id, 0)
	require.NoError(t, err)
	for _, ev := range events {
		assert.NotContains(t, ev.Event, "erase_devices_metadata finished")
	}
}

// stealingDriver hands the node's lease to another controller while its
// first step runs.
type stealingDriver struct {
	scriptDriver
	st     store.Store
	stolen chan struct{}
	once   sync.Once
}

func (d *stealingDriver) ExecuteStep(ctx context.Context, n *store.Node, phase string, s protocol.Step) (StepStatus, error) {
	st, err := d.scriptDriver.ExecuteStep(ctx, n, phase, s)
	d.once.Do(func() {
		_ = d.st.ClearLeases(context.Background())
		_, _, _ = d.st.AcquireLease(context.Background(), n.UUID, "thief/0001", time.Minute)
		close(d.stolen)
	})
	return st, err
}

// A node left by a controller whose lease expired is taken over, at its
// persisted step, with the takeover in its history.
func TestExpiredLeaseIsTakenOver(t *testing.T) {
	ctx := context.Background()
	st := openSQLite(t)
	n := storetest.NewNode("orphan")
	n.Driver, n.ProvisionState = "script", string(state.Cleaning)
	n.TargetProvisionState, n.Reservation = strp("available"), strp("dead")
	n.Operation.Clean = &store.StepPlan{Steps: twoSteps(true), Index: 1}
	require.NoError(t, st.CreateNode(ctx, n))
	ok, _, err := st.AcquireLease(ctx, n.UUID, "dead/0001", 20*time.Millisecond)
	require.NoError(t, err)
	require.True(t, ok)

	drv := &scriptDriver{steps: twoSteps(true)}
	e := start(t, drv, Config{LeaseTTL: 200 * time.Millisecond}, st)
	e.wait(t, n.UUID, state.Available)
	assert.Equal(t, []string{"deploy.erase_devices"}, drv.executed(), "resumed at the persisted step")
	events, err := st.ListEvents(ctx, n.UUID, 0)
	require.NoError(t, err)
	require.NotEmpty(t, events)
	assert.Contains(t, events[0].Event, "Controller c1 took over the operation in state \"cleaning\": the lease of dead/0001 expired")
}

// A renewal reports the leases held when it was sent; one acquired while
// it was in flight is not lost (it was reported lost, spuriously, under a
// burst of new work).
func TestRenewalKeepsLeasesTakenMeanwhile(t *testing.T) {
	t0 := time.Now()
	ttl := 20 * time.Second
	tbl := leaseTable{held: map[string]time.Time{}}
	tbl.set("old", t0.Add(ttl))             // held before the renewal
	tbl.set("gone", t0.Add(ttl))            // held before, not confirmed
	tbl.set("new", t0.Add(time.Second+ttl)) // acquired during the renewal
	lost := tbl.renewed([]string{"old", "released"}, t0.Add(ttl))
	assert.Equal(t, []string{"gone"}, lost)
	assert.True(t, tbl.has("old"))
	assert.True(t, tbl.has("new"))
	assert.False(t, tbl.has("gone"))
	assert.False(t, tbl.has("released"), "released while the renewal ran: not brought back (it would be 'lost' next time)")
}

// A controller alone on its store keeps leases in memory: a whole
// cleaning writes no lease row, and an interrupted operation is resumed
// at start.
func TestSoleControllerLeasesInMemory(t *testing.T) {
	ctx := context.Background()
	st := openSQLite(t)
	n := storetest.NewNode("interrupted")
	n.Driver, n.ProvisionState = "script", string(state.Cleaning)
	n.TargetProvisionState, n.Reservation = strp("available"), strp("c1")
	n.Operation.Clean = &store.StepPlan{Steps: twoSteps(true), Index: 1}
	require.NoError(t, st.CreateNode(ctx, n))

	drv := &scriptDriver{steps: twoSteps(true)}
	e := start(t, drv, Config{SoleController: true}, st)
	e.wait(t, n.UUID, state.Available)
	id := e.manageable(t)
	require.NoError(t, e.c.Provision(ctx, id, ProvisionRequest{Target: "provide"}))
	e.wait(t, id, state.Available)
	assert.Equal(t, []string{"deploy.erase_devices", "deploy.erase_devices_metadata", "deploy.erase_devices"}, drv.executed())

	for _, node := range []string{n.UUID, id} {
		ok, other, err := st.AcquireLease(ctx, node, "probe/0001", time.Minute)
		require.NoError(t, err)
		assert.True(t, ok, "no lease row was written for %s", node)
		assert.Empty(t, other)
	}
	events, err := st.ListEvents(ctx, n.UUID, 0)
	require.NoError(t, err)
	require.NotEmpty(t, events)
	assert.Contains(t, events[0].Event, "resumed the operation in state \"cleaning\" after a restart")
}

// A waiting node that nothing advances (rescue wait) is not taken over:
// a takeover would be released at once and repeated at every scan, each
// time with a "resumed" line in the node's history.
func TestRestingWaitIsNotTakenOver(t *testing.T) {
	ctx := context.Background()
	st := openSQLite(t)
	n := storetest.NewNode("rescued")
	n.Driver, n.ProvisionState = "script", string(state.RescueWait)
	require.NoError(t, st.CreateNode(ctx, n))
	e := start(t, &scriptDriver{}, Config{LeaseTTL: 40 * time.Millisecond}, st)
	time.Sleep(200 * time.Millisecond) // five scans
	require.Eventually(t, e.c.Idle, time.Second, 2*time.Millisecond)
	events, err := st.ListEvents(ctx, n.UUID, 0)
	require.NoError(t, err)
	assert.Empty(t, events)
}

// advanceLog is an engine stand-in for the runtime alone: it records the
// nodes processed and moves each through a scripted number of hops.
type advanceLog struct {
	mu    sync.Mutex
	calls []string
	hops  map[string]int // again=true this many times, then false
	gate  chan struct{}  // if set, each call waits for it
}

func (a *advanceLog) advance(_ context.Context, n *store.Node, _ Driver) (bool, error) {
	if a.gate != nil {
		<-a.gate
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.calls = append(a.calls, n.UUID)
	if a.hops[n.UUID] > 0 {
		a.hops[n.UUID]--
		return true, nil
	}
	return false, nil
}

func (a *advanceLog) count(id string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	c := 0
	for _, x := range a.calls {
		if x == id {
			c++
		}
	}
	return c
}

// runRuntime runs a runtime alone over st, with adv as its engine.
func runRuntime(t *testing.T, st store.Store, adv *advanceLog) *runtime {
	t.Helper()
	cfg := Config{Host: "rt", SoleController: true}
	cfg.defaults()
	rt := newRuntime(&core{cfg: cfg, st: st, drivers: map[string]Driver{"script": &scriptDriver{}}, log: cfg.Logger})
	rt.advance, rt.checkTimers = adv.advance, func(context.Context) {}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = rt.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return rt
}

func TestRuntimeProcessesUntilTheEngineRests(t *testing.T) {
	ctx := context.Background()
	st := openSQLite(t)
	n := storetest.NewNode("")
	n.Driver, n.ProvisionState, n.Reservation = "script", string(state.Cleaning), strp("previous-run")
	require.NoError(t, st.CreateNode(ctx, n))
	resting := storetest.NewNode("")
	resting.Driver, resting.ProvisionState = "script", string(state.Available)
	require.NoError(t, st.CreateNode(ctx, resting))

	adv := &advanceLog{hops: map[string]int{n.UUID: 3}}
	rt := runRuntime(t, st, adv)
	require.Eventually(t, func() bool { return rt.Idle() && adv.count(n.UUID) == 4 }, 5*time.Second, time.Millisecond,
		"the takeover at start finds the working node; it is advanced until the engine says it rests")
	rt.Kick(resting.UUID)
	require.Eventually(t, rt.Idle, 5*time.Second, time.Millisecond)
	assert.Zero(t, adv.count(resting.UUID), "a resting node is never handed to the engine")
}

func TestRuntimeKickDuringProcessingRunsAgain(t *testing.T) {
	ctx := context.Background()
	st := openSQLite(t)
	n := storetest.NewNode("")
	n.Driver, n.ProvisionState = "script", string(state.CleanWait)
	require.NoError(t, st.CreateNode(ctx, n))
	adv := &advanceLog{hops: map[string]int{}, gate: make(chan struct{})}
	rt := runRuntime(t, st, adv)
	adv.gate <- struct{}{} // the takeover's processing is under way
	rt.Kick(n.UUID)        // kicked meanwhile (a heartbeat)
	rt.Kick(n.UUID)        // twice: still one more round
	close(adv.gate)
	require.Eventually(t, func() bool { return rt.Idle() && adv.count(n.UUID) == 2 }, 5*time.Second, time.Millisecond)
	time.Sleep(20 * time.Millisecond)
	assert.Equal(t, 2, adv.count(n.UUID), "one node, one worker at a time; kicks during a round make one more")
}
