package conductor

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/controller/state"
	"github.com/anvil-metal/anvil/controller/store"
	"github.com/anvil-metal/anvil/controller/store/sqlite"
	"github.com/anvil-metal/anvil/controller/store/storetest"
)

// bmcStub reports scripted power states per node and records sets.
type bmcStub struct {
	FakeDriver
	mu     sync.Mutex
	actual map[string]string
	fail   map[string]bool
	reads  map[string]int
	sets   []string
}

func (b *bmcStub) Name() string { return "stub" }
func (b *bmcStub) PowerState(_ context.Context, n *store.Node) (string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.reads[n.UUID]++
	if b.fail[n.UUID] {
		return "", errors.New("BMC unreachable")
	}
	return b.actual[n.UUID], nil
}
func (b *bmcStub) SetPower(_ context.Context, n *store.Node, target string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.sets = append(b.sets, n.UUID+"="+target)
	b.actual[n.UUID] = target
	return nil
}

func TestPowerSync(t *testing.T) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, ":memory:")
	require.NoError(t, err)
	defer st.Close()
	stub := &bmcStub{actual: map[string]string{}, fail: map[string]bool{}, reads: map[string]int{}}
	now := time.Now()
	c := New(st, Config{Host: "c1", Now: func() time.Time { return now }}, stub)
	mk := func(ps state.State, power string, maint bool) string {
		n := storetest.NewNode("")
		n.Driver, n.ProvisionState, n.PowerState, n.Maintenance = "stub", string(ps), strp(power), maint
		require.NoError(t, st.CreateNode(ctx, n))
		stub.actual[n.UUID] = power
		return n.UUID
	}
	drifted := mk(state.Active, PowerOn, false)
	inMaint := mk(state.Active, PowerOn, true)
	enrolled := mk(state.Enroll, PowerOff, false)
	broken := mk(state.Manageable, PowerOff, false)
	for i := 0; i < 6; i++ {
		mk(state.Available, PowerOff, false)
	}
	stub.actual[drifted] = PowerOff // someone pressed the button
	stub.actual[inMaint] = PowerOff
	stub.fail[broken] = true

	cfg := PowerSyncConfig{Ticks: 4, MaxFailures: 3, Enforce: true}
	ps := &powerSync{failures: map[string]int{}, next: map[string]time.Time{}}
	// one interval = Ticks pages of 10/4+1 = 3 nodes: every node read once
	for i := 0; i < cfg.Ticks; i++ {
		c.powerSyncTick(ctx, ps, cfg)
	}
	for id, n := range stub.reads {
		assert.LessOrEqual(t, n, 1, "node %s read more than once in one interval", id)
	}
	assert.Zero(t, stub.reads[enrolled], "nodes in enroll are not synced")
	assert.Len(t, stub.reads, 9, "every managed node was read once")

	assert.Equal(t, []string{drifted + "=" + PowerOn}, stub.sets, "the drifted resting node was restored; the one in maintenance was not")
	m, err := st.GetNode(ctx, inMaint)
	require.NoError(t, err)
	assert.Equal(t, PowerOff, *m.PowerState, "in maintenance the drift is recorded, not fought")
	events, err := st.ListEvents(ctx, inMaint, 0)
	require.NoError(t, err)
	require.Len(t, events, 1)
	assert.Contains(t, events[0].Event, "changed outside the controller")

	// the broken BMC backs off, then goes to maintenance after 3 failures
	for round := 0; round < 3; round++ {
		now = now.Add(10 * time.Minute)
		for i := 0; i < cfg.Ticks; i++ {
			c.powerSyncTick(ctx, ps, cfg)
		}
	}
	b, err := st.GetNode(ctx, broken)
	require.NoError(t, err)
	assert.True(t, b.Maintenance)
	assert.Equal(t, "power failure", *b.Fault)
	assert.Contains(t, *b.MaintenanceReason, "max retries exceeded")
	assert.Equal(t, 4, stub.reads[broken], "one read per interval: the first interval, then three more")

	before := stub.reads[broken]
	ps.failures[broken] = 1
	ps.next[broken] = now.Add(time.Minute)
	for i := 0; i < cfg.Ticks; i++ {
		c.powerSyncTick(ctx, ps, cfg)
	}
	assert.Equal(t, before, stub.reads[broken], "backing off: no read before the backoff expires")
}

// TestPowerSyncIsSplitAmongControllers: with three live controllers on one
// database, each node's BMC is read by exactly one of them per interval.
func TestPowerSyncIsSplitAmongControllers(t *testing.T) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, ":memory:")
	require.NoError(t, err)
	defer st.Close()
	const nodes = 60
	for i := 0; i < nodes; i++ {
		n := storetest.NewNode("")
		n.Driver, n.ProvisionState, n.PowerState = "stub", string(state.Available), strp(PowerOff)
		require.NoError(t, st.CreateNode(ctx, n))
	}
	var stubs []*bmcStub
	var cs []*Conductor
	for i := 0; i < 3; i++ {
		stub := &bmcStub{actual: map[string]string{}, fail: map[string]bool{}, reads: map[string]int{}}
		c := New(st, Config{Host: "c" + string(rune('0'+i))}, stub)
		require.NoError(t, st.RecordController(ctx, store.Controller{Holder: c.Holder()}, time.Minute))
		stubs, cs = append(stubs, stub), append(cs, c)
	}
	cfg := PowerSyncConfig{Ticks: 3, MaxFailures: 3, Workers: 4}
	for i, c := range cs {
		ps := &powerSync{failures: map[string]int{}, next: map[string]time.Time{}}
		for tick := 0; tick < cfg.Ticks; tick++ {
			c.powerSyncTick(ctx, ps, cfg)
		}
		assert.NotEmpty(t, stubs[i].reads, "controller %d has a share", i)
	}
	total := map[string]int{}
	for _, s := range stubs {
		for id, n := range s.reads {
			total[id] += n
		}
	}
	assert.Len(t, total, nodes, "every node was read")
	for id, n := range total {
		assert.Equal(t, 1, n, "node %s read by %d controllers", id, n)
	}

	// One controller stops (its registration goes): the others cover its
	// share from the next interval on.
	require.NoError(t, st.UnregisterController(ctx, cs[2].Holder()))
	for _, s := range stubs {
		s.reads = map[string]int{}
	}
	for _, c := range cs[:2] {
		ps := &powerSync{failures: map[string]int{}, next: map[string]time.Time{}}
		for tick := 0; tick < cfg.Ticks; tick++ {
			c.powerSyncTick(ctx, ps, cfg)
		}
	}
	survivors := map[string]int{}
	for _, s := range stubs[:2] {
		for id, n := range s.reads {
			survivors[id] += n
		}
	}
	assert.Len(t, survivors, nodes, "the two survivors cover the fleet")
	for id, n := range survivors {
		assert.Equal(t, 1, n, "node %s read twice", id)
	}
	assert.Empty(t, stubs[2].reads)
}
