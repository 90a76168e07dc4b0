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
)

// healthStub is bmcStub with a health per node.
type healthStub struct {
	*bmcStub
	hmu    sync.Mutex
	health map[string]string
}

func (h *healthStub) PowerHealth(ctx context.Context, n *store.Node) (string, string, bool, error) {
	p, err := h.PowerState(ctx, n)
	h.hmu.Lock()
	defer h.hmu.Unlock()
	return p, h.health[n.UUID], true, err
}

func (h *healthStub) set(id, v string) {
	h.hmu.Lock()
	defer h.hmu.Unlock()
	h.health[id] = v
}

// TestPowerSyncHealth: the health the BMC reports is stored when it
// changes, with Ironic's history entry, and not written again while it
// stays the same (power sync adds no write per tick); a power drift and a
// health change land in one write.
func TestPowerSyncHealth(t *testing.T) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, ":memory:")
	require.NoError(t, err)
	defer st.Close()
	stub := &healthStub{bmcStub: &bmcStub{actual: map[string]string{}, fail: map[string]bool{}, reads: map[string]int{}}, health: map[string]string{}}
	c := New(st, Config{Host: "c1", Now: time.Now}, stub)
	n := storetest.NewNode("")
	n.Driver, n.ProvisionState, n.PowerState = "stub", string(state.Active), strp(PowerOn)
	require.NoError(t, st.CreateNode(ctx, n))
	id := n.UUID
	stub.actual[id] = PowerOn
	cfg := PowerSyncConfig{Ticks: 1, MaxFailures: 3}
	ps := &powerSync{failures: map[string]int{}, next: map[string]time.Time{}}
	tick := func(times int) *store.Node {
		for range times {
			c.powerSyncTick(ctx, ps, cfg)
		}
		got, err := st.GetNode(ctx, id)
		require.NoError(t, err)
		return got
	}
	rev := tick(1).Revision

	stub.set(id, "OK")
	got := tick(1)
	require.NotNil(t, got.Health)
	assert.Equal(t, "OK", *got.Health)
	assert.Equal(t, rev+1, got.Revision, "one write for the change")
	rev = got.Revision
	assert.Equal(t, rev, tick(5).Revision, "no write while the health stays the same")

	stub.set(id, "Critical")
	got = tick(3)
	assert.Equal(t, "Critical", *got.Health)
	assert.Equal(t, rev+1, got.Revision)
	events, err := st.ListEvents(ctx, id, 0)
	require.NoError(t, err)
	var msgs []string
	for _, e := range events {
		if e.EventType == "monitoring" {
			msgs = append(msgs, e.Severity+" "+e.Event)
		}
	}
	assert.Equal(t, []string{"INFO Node health status changed: health='OK' (previously 'None')",
		"INFO Node health status changed: health='Critical' (previously 'OK')"}, msgs)

	// drift and health together: one write
	rev = got.Revision
	stub.actual[id] = PowerOff
	stub.set(id, "")
	got = tick(1)
	assert.Equal(t, rev+1, got.Revision)
	assert.Equal(t, PowerOff, *got.PowerState)
	assert.Nil(t, got.Health, "the BMC stopped reporting one: None")
}
