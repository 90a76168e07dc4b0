package storetest

import (
	"context"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/controller/store"
)

// revised is one kind with a revision (optimistic concurrency), seen
// through its revision and its store methods.
type revised struct {
	create func(ctx context.Context, s store.Store, node string) (uuid string, err error)
	// read returns the stored resource and a pointer to its Revision.
	read func(ctx context.Context, s store.Store, uuid string) (v any, rev *int64, err error)
	// blank is a resource with that uuid not read from the store
	// (Revision 0), as a caller that writes without reading makes it.
	blank  func(s store.Store, uuid, node string) (v any, rev *int64)
	update func(ctx context.Context, s store.Store, v any) error
}

// testRevisions: ports, port groups and allocations keep revisions alike.
// A resource read from the store is written only at the revision read and
// then carries the new one; one not read (Revision 0) is written
// unconditionally and stays unrevised, so writing it again works too.
func testRevisions(t *testing.T, s store.Store) {
	kinds := map[string]revised{
		"port": {
			create: func(ctx context.Context, s store.Store, node string) (string, error) {
				p := &store.Port{UUID: uuid.NewString(), Address: "52:54:00:aa:00:01", NodeUUID: node}
				return p.UUID, s.CreatePort(ctx, p)
			},
			read: func(ctx context.Context, s store.Store, id string) (any, *int64, error) {
				p, err := s.GetPort(ctx, id)
				if err != nil {
					return nil, nil, err
				}
				return p, &p.Revision, nil
			},
			blank: func(_ store.Store, id, node string) (any, *int64) {
				p := &store.Port{UUID: id, Address: "52:54:00:aa:00:01", NodeUUID: node}
				return p, &p.Revision
			},
			update: func(ctx context.Context, s store.Store, v any) error { return s.UpdatePort(ctx, v.(*store.Port)) },
		},
		"portgroup": {
			create: func(ctx context.Context, s store.Store, node string) (string, error) {
				p := &store.Portgroup{UUID: uuid.NewString(), NodeUUID: node}
				return p.UUID, s.CreatePortgroup(ctx, p)
			},
			read: func(ctx context.Context, s store.Store, id string) (any, *int64, error) {
				p, err := s.GetPortgroup(ctx, id)
				if err != nil {
					return nil, nil, err
				}
				return p, &p.Revision, nil
			},
			blank: func(_ store.Store, id, node string) (any, *int64) {
				p := &store.Portgroup{UUID: id, NodeUUID: node}
				return p, &p.Revision
			},
			update: func(ctx context.Context, s store.Store, v any) error {
				return s.UpdatePortgroup(ctx, v.(*store.Portgroup))
			},
		},
		"allocation": {
			create: func(ctx context.Context, s store.Store, node string) (string, error) {
				a := &store.Allocation{UUID: uuid.NewString(), NodeUUID: &node, State: "allocating", ResourceClass: "gold"}
				return a.UUID, s.CreateAllocation(ctx, a)
			},
			read: func(ctx context.Context, s store.Store, id string) (any, *int64, error) {
				a, err := s.GetAllocation(ctx, id)
				if err != nil {
					return nil, nil, err
				}
				return a, &a.Revision, nil
			},
			blank: func(_ store.Store, id, node string) (any, *int64) {
				a := &store.Allocation{UUID: id, NodeUUID: &node, State: "active", ResourceClass: "gold"}
				return a, &a.Revision
			},
			update: func(ctx context.Context, s store.Store, v any) error {
				return s.UpdateAllocation(ctx, v.(*store.Allocation))
			},
		},
	}
	for name, k := range kinds {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			n := NewNode("")
			require.NoError(t, s.CreateNode(ctx, n))
			id, err := k.create(ctx, s, n.UUID)
			require.NoError(t, err)

			read, rev, err := k.read(ctx, s, id)
			require.NoError(t, err)
			stale, _, err := k.read(ctx, s, id)
			require.NoError(t, err)
			first := *rev
			require.Positive(t, first)
			require.NoError(t, k.update(ctx, s, read))
			assert.Equal(t, first+1, *rev, "a read resource carries the revision it was written at")
			require.NoError(t, k.update(ctx, s, read), "and can be written again")
			assert.ErrorIs(t, k.update(ctx, s, stale), store.ErrConflict, "a write of what changed since it was read")

			blank, blankRev := k.blank(s, id, n.UUID)
			require.NoError(t, k.update(ctx, s, blank), "a resource not read is written as it is")
			assert.Zero(t, *blankRev, "and stays unrevised")
			require.NoError(t, k.update(ctx, s, blank), "so writing it again is no conflict")
			_, rev, err = k.read(ctx, s, id)
			require.NoError(t, err)
			assert.Equal(t, first+4, *rev, "every write moves the stored revision")
		})
	}
}
