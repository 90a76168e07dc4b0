package transfer

import (
	"bytes"
	"context"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/controller/store"
	"github.com/anvil-metal/anvil/controller/store/postgres/pgserver"
)

// busyFleet is a store that keeps being written while it is exported: once
// the export's snapshot has begun, a node and a port are added and a node
// is changed, as a running controller would.
type busyFleet struct {
	store.Store
	snap snapshotReader
}

func (b busyFleet) ReadSnapshot(ctx context.Context, fn func(st store.Store) error) error {
	return b.snap.ReadSnapshot(ctx, func(view store.Store) error {
		return fn(writesAfterFirstRead{Store: view, outside: b.Store})
	})
}

// writesAfterFirstRead writes through outside right after the first node
// page is read through Store (the snapshot).
type writesAfterFirstRead struct {
	store.Store
	outside store.Store
}

func (w writesAfterFirstRead) ListNodes(ctx context.Context, f store.NodeFilter, p store.Page) ([]*store.Node, error) {
	nodes, err := w.Store.ListNodes(ctx, f, p)
	if err != nil || p.Marker != "" {
		return nodes, err
	}
	late := &store.Node{UUID: uuid.NewString(), Driver: "fake-hardware", ProvisionState: "enroll"}
	if err := w.outside.CreateNode(ctx, late); err != nil {
		return nil, err
	}
	if err := w.outside.CreatePort(ctx, &store.Port{UUID: uuid.NewString(), Address: "52:54:00:99:99:99", NodeUUID: late.UUID}); err != nil {
		return nil, err
	}
	_, err = store.MutateNode(ctx, w.outside, nodes[0].UUID, func(n *store.Node) error {
		n.Extra = map[string]any{"changed": "during the export"}
		return nil
	})
	return nodes, err
}

// TestExportIsOneSnapshot: an export of a fleet that controllers keep
// writing is the fleet as it was when the export began, on both stores.
func TestExportIsOneSnapshot(t *testing.T) {
	pg := pgserver.ForTest(t)
	for name, open := range map[string]func(t *testing.T) store.Store{
		"sqlite":   openSQLiteFile,
		"postgres": func(t *testing.T) store.Store { return openPostgres(t, pg) },
	} {
		t.Run(name, func(t *testing.T) {
			st := open(t)
			fillFleet(t, st, 0)
			_, before, sumBefore := exportNow(t, st)

			var buf bytes.Buffer
			sum, err := Export(context.Background(), busyFleet{Store: st, snap: st.(snapshotReader)}, &buf, ExportOptions{})
			require.NoError(t, err)
			assert.Equal(t, sumBefore, sum, "the writes made during the export are not in it")
			assert.Equal(t, before, exportedAt.ReplaceAllString(buf.String(), `"exported_at":""`))

			_, _, sumAfter := exportNow(t, st)
			assert.Equal(t, sumBefore.Nodes+1, sumAfter.Nodes, "the writes happened")
			assert.Equal(t, sumBefore.Ports+1, sumAfter.Ports)
		})
	}
}
