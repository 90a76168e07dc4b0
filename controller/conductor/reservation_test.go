package conductor

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/controller/state"
	"github.com/anvil-metal/anvil/controller/store"
	"github.com/anvil-metal/anvil/controller/store/sqlite"
	"github.com/anvil-metal/anvil/controller/store/storetest"
)

// A node at rest that is still reserved was left by an API action (the
// vmedia API, vendor passthru, a step on a child node) whose controller
// died: the controller that takes it over gives the reservation back, so
// the node does not refuse every request as locked for ever. The
// reservation of an action in progress in this process is kept.
func TestStaleReservationIsGivenBack(t *testing.T) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, t.TempDir()+"/anvil.db")
	require.NoError(t, err)
	defer st.Close()
	n := storetest.NewNode("left-reserved")
	n.Driver, n.ProvisionState, n.Reservation = "script", string(state.Available), strp("dead-controller")
	require.NoError(t, st.CreateNode(ctx, n))

	e := start(t, &scriptDriver{}, Config{LeaseTTL: 400 * time.Millisecond}, st)
	require.Eventually(t, func() bool {
		got, err := st.GetNode(ctx, n.UUID)
		return err == nil && got.Reservation == nil
	}, 5*time.Second, 20*time.Millisecond, "the stale reservation was given back")
	events, err := st.ListEvents(ctx, n.UUID, 0)
	require.NoError(t, err)
	require.Len(t, events, 1, "one entry, not one per takeover tick")
	assert.Contains(t, events[0].Event, "cleared a reservation by dead-controller that no operation or action held")

	// an action in progress here keeps its reservation through takeover
	// ticks and kicks
	held, release, err := e.c.nodeCalls.hold(ctx, n.UUID, func(*store.Node) error { return nil })
	require.NoError(t, err)
	e.c.Kick(held.UUID)
	time.Sleep(300 * time.Millisecond) // more than two takeover ticks
	got, err := st.GetNode(ctx, n.UUID)
	require.NoError(t, err)
	require.NotNil(t, got.Reservation, "the action's reservation is not stale")
	release()
	got, err = st.GetNode(ctx, n.UUID)
	require.NoError(t, err)
	assert.Nil(t, got.Reservation)
	events, err = st.ListEvents(ctx, n.UUID, 0)
	require.NoError(t, err)
	assert.Len(t, events, 1, "no further clearing")
}
