package controller

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/controller/console"
	"github.com/anvil-metal/anvil/controller/store"
	"github.com/anvil-metal/anvil/controller/store/sqlite"
	"github.com/anvil-metal/anvil/controller/store/storetest"
)

// reconcileConsoles opens the sessions of the console-enabled nodes this
// controller owns, closes the others, and forgets deleted nodes.
func TestReconcileConsoles(t *testing.T) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, ":memory:")
	require.NoError(t, err)
	defer st.Close()
	node := func(name string, enabled bool, iface string) *store.Node {
		n := storetest.NewNode(name)
		n.ConsoleEnabled, n.Interfaces.Console = enabled, iface
		require.NoError(t, st.CreateNode(ctx, n))
		return n
	}
	on := node("on", true, "ipmitool-socat")
	off := node("off", false, "ipmitool-socat")
	noIface := node("no-iface", true, "no-console")
	theirs := node("theirs", true, "ipmitool-socat")
	f := console.NewFake()
	m := console.New(console.Config{Opener: f})
	defer m.Close()
	owner := func(context.Context) (func(string) bool, error) {
		return func(id string) bool { return id != theirs.UUID }, nil
	}
	log := slog.New(slog.DiscardHandler)

	require.NoError(t, m.Enable(off)) // held, but its console was disabled elsewhere
	reconcileConsoles(ctx, st, m, owner, log)
	assert.ElementsMatch(t, []string{on.UUID}, m.Held())
	assert.False(t, m.Enabled(noIface.UUID))

	require.NoError(t, st.DeleteNode(ctx, on))
	reconcileConsoles(ctx, st, m, owner, log)
	assert.Empty(t, m.Held())
	_, kept := m.Scrollback(on.UUID)
	assert.False(t, kept, "a deleted node's scrollback is dropped")
	_, kept = m.Scrollback(off.UUID)
	assert.True(t, kept, "a disabled console's scrollback stays")
	require.Eventually(t, func() bool { return f.Opens() == f.Closes() }, 5*time.Second, 10*time.Millisecond, "every session opened was closed")
}

// Every controller computes the same holder for a node, only live
// controllers hold consoles, and the nodes spread over them.
func TestRendezvousOwner(t *testing.T) {
	cs := []store.Controller{{Hostname: "a", Alive: true}, {Hostname: "b", Alive: true}, {Hostname: "c", Alive: false}}
	count := map[string]int{}
	for i := range 300 {
		id := fmt.Sprintf("node-%d", i)
		h := rendezvous(cs, "a", id)
		assert.Equal(t, h, rendezvous(cs, "b", id), "the same answer on every controller")
		count[h]++
	}
	assert.Zero(t, count["c"], "a dead controller holds nothing")
	assert.InDelta(t, 150, count["a"], 40)
	assert.Equal(t, "self", rendezvous(nil, "self", "n"), "alone")
}
