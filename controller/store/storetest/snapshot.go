package storetest

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/controller/store"
)

// snapshotReader is a store that reads consistent snapshots.
type snapshotReader interface {
	ReadSnapshot(ctx context.Context, fn func(st store.Store) error) error
}

// RunSnapshot checks ReadSnapshot: writes committed by the store while a
// snapshot is open are not seen through it, writes through the view fail,
// and after it the store sees everything. open must return an empty store
// whose reads and writes can run at once (not SQLite's :memory:, whose one
// connection the snapshot holds).
func RunSnapshot(t *testing.T, open func(t *testing.T) store.Store) {
	ctx := context.Background()
	s := open(t)
	t.Cleanup(func() { s.Close() })
	sr, ok := s.(snapshotReader)
	require.True(t, ok, "%T reads no snapshots", s)
	first := createNode(t, s, "before")
	var late *store.Node
	err := sr.ReadSnapshot(ctx, func(view store.Store) error {
		nodes, err := view.ListNodes(ctx, store.NodeFilter{}, store.Page{})
		require.NoError(t, err)
		require.Len(t, nodes, 1)

		// Committed outside the snapshot, after its first read.
		late = createNode(t, s, "during")
		_, err = store.MutateNode(ctx, s, first.UUID, func(n *store.Node) error { n.ProvisionState = "manageable"; return nil })
		require.NoError(t, err)
		require.NoError(t, s.CreatePort(ctx, &store.Port{UUID: "77777777-0000-4000-8000-000000000001",
			Address: "52:54:00:00:77:01", NodeUUID: first.UUID}))

		nodes, err = view.ListNodes(ctx, store.NodeFilter{}, store.Page{})
		require.NoError(t, err)
		assert.Len(t, nodes, 1, "a node created meanwhile is not in the snapshot")
		got, err := view.GetNode(ctx, "before")
		require.NoError(t, err)
		assert.Equal(t, "enroll", got.ProvisionState, "an update made meanwhile is not in the snapshot")
		_, err = view.GetNode(ctx, "during")
		assert.ErrorIs(t, err, store.ErrNotFound)
		ports, err := view.ListPorts(ctx, store.ResourceFilter{}, store.Page{})
		require.NoError(t, err)
		assert.Empty(t, ports)

		assert.Error(t, view.CreateNode(ctx, NewNode("through-view")), "the view is read-only")
		return nil
	})
	require.NoError(t, err)
	nodes, err := s.ListNodes(ctx, store.NodeFilter{}, store.Page{})
	require.NoError(t, err)
	assert.Len(t, nodes, 2)
	_, err = s.GetNode(ctx, late.UUID)
	require.NoError(t, err)
	_, err = s.GetNode(ctx, "through-view")
	assert.ErrorIs(t, err, store.ErrNotFound, "nothing written through the view stays")
}
