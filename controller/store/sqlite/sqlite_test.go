package sqlite

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/controller/store"
	"github.com/anvil-metal/anvil/controller/store/sqlstore"
	"github.com/anvil-metal/anvil/controller/store/storetest"
)

// openFile opens a store on a new database file.
func openFile(t testing.TB) store.Store {
	s, err := Open(context.Background(), filepath.Join(t.TempDir(), "anvil.db"))
	require.NoError(t, err)
	return s
}

func TestSuiteFile(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store { return openFile(t) })
}

func TestSnapshot(t *testing.T) {
	storetest.RunSnapshot(t, func(t *testing.T) store.Store { return openFile(t) })
}

func TestDHCPLeases(t *testing.T) {
	storetest.RunDHCPLeases(t, func(t *testing.T) store.Store { return openFile(t) })
}

func TestSuiteMemory(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store {
		s, err := Open(context.Background(), ":memory:")
		require.NoError(t, err)
		return s
	})
}

func TestReopenKeepsDataAndMigratesOnce(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "anvil.db")
	s, err := Open(ctx, path)
	require.NoError(t, err)
	n := storetest.NewNode("survivor")
	require.NoError(t, s.CreateNode(ctx, n))
	require.NoError(t, s.Close())

	s, err = Open(ctx, path)
	require.NoError(t, err)
	defer s.Close()
	v, err := s.SchemaVersion(ctx)
	require.NoError(t, err)
	assert.Equal(t, sqlstore.LatestSchemaVersion(), v)
	got, err := s.GetNode(ctx, "survivor")
	require.NoError(t, err)
	assert.Equal(t, n.UUID, got.UUID)
}

func TestRefusesNewerSchema(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "anvil.db")
	s, err := Open(ctx, path)
	require.NoError(t, err)
	_, err = s.DB().ExecContext(ctx, `INSERT INTO schema_migrations(version, applied_at) VALUES (999, 'x')`)
	require.NoError(t, err)
	require.NoError(t, s.Close())
	_, err = Open(ctx, path)
	assert.ErrorContains(t, err, "newer than this controller")
}

// TestVolatileWritesRestoreFullSync: a batch of volatile writes is
// committed with synchronous NORMAL, and the writer connection is back at
// FULL before anyone else writes (here: the next node creation), so only
// the volatile writes ever skip the fsync.
func TestVolatileWritesRestoreFullSync(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "anvil.db")
	s, err := Open(ctx, path)
	require.NoError(t, err)
	n := storetest.NewNode("hb")
	require.NoError(t, s.CreateNode(ctx, n))
	for i := 0; i < 5; i++ {
		n.DriverInternalInfo = map[string]any{"agent_last_heartbeat": i}
		require.NoError(t, s.UpdateNode(store.Volatile(ctx), n))
	}
	var mode int
	require.NoError(t, s.DB().QueryRowContext(ctx, `PRAGMA synchronous`).Scan(&mode))
	assert.Equal(t, 2, mode, "FULL (2) again after the volatile batches")
	require.NoError(t, s.Close())

	s, err = Open(ctx, path)
	require.NoError(t, err)
	defer s.Close()
	got, err := s.GetNode(ctx, n.UUID)
	require.NoError(t, err)
	assert.EqualValues(t, 4, got.DriverInternalInfo["agent_last_heartbeat"], "volatile writes are written, only not waited for")
}

// TestOneControllerPerFile: a second store on an open database file is
// refused with a message saying why; closing the first frees the file.
func TestOneControllerPerFile(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "anvil.db")
	first, err := Open(ctx, path)
	require.NoError(t, err)
	_, err = Open(ctx, path)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "in use by another anvil-controller")
	assert.Contains(t, err.Error(), "PostgreSQL")
	require.NoError(t, first.Close())
	again, err := Open(ctx, path)
	require.NoError(t, err, "the lock goes with the store")
	require.NoError(t, again.Close())
}

// A database written by the release before the operation record migrates
// on open: each node's working state moves to its operation column and
// reads back as it was.
func TestLegacyDatabaseMigrates(t *testing.T) {
	rows := storetest.LegacyRows(t)
	src, err := os.ReadFile(storetest.LegacyFixture)
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "anvil.db")
	require.NoError(t, os.WriteFile(path, src, 0o600))
	s, err := Open(context.Background(), path)
	require.NoError(t, err)
	defer s.Close()
	v, err := s.SchemaVersion(context.Background())
	require.NoError(t, err)
	assert.Equal(t, sqlstore.LatestSchemaVersion(), v)
	storetest.CheckLegacyMigrated(t, s, rows)
}

// A database written before the disk guard's records moved into the
// operation record (schema DiskRecordsMigration-1, the records in
// driver_internal_info) migrates on open: the records are in the
// operation record, and the API shows them where it did.
func TestDiskRecordsMigrate(t *testing.T) {
	ctx := context.Background()
	src, err := Open(ctx, filepath.Join(t.TempDir(), "src.db"))
	require.NoError(t, err)
	defer src.Close()
	before := storetest.PopulateLegacyDiskRecords(t, src)
	path := filepath.Join(t.TempDir(), "anvil.db")
	db, err := sql.Open("sqlite", "file:"+path)
	require.NoError(t, err)
	storetest.BeforeDiskRecords(t, src.DB(), db, sqlstore.SQLite(), func(int) string { return "?" })
	require.NoError(t, db.Close())
	s, err := Open(ctx, path)
	require.NoError(t, err)
	defer s.Close()
	v, err := s.SchemaVersion(ctx)
	require.NoError(t, err)
	assert.Equal(t, sqlstore.LatestSchemaVersion(), v)
	storetest.CheckDiskRecordsMoved(t, s, before)
}

func BenchmarkStore(b *testing.B) {
	storetest.Bench(b, func(b *testing.B) store.Store { return openFile(b) })
}

// A database written by the last release with a store of its own per
// database (schema 5, testdata/release5) opens with the unified store and
// reads back as written.
func TestReleaseDatabaseOpens(t *testing.T) {
	src, err := os.ReadFile(filepath.Join(storetest.ReleaseFixtureDir, "anvil.db"))
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "anvil.db")
	require.NoError(t, os.WriteFile(path, src, 0o600))
	db, err := sql.Open("sqlite", "file:"+path)
	require.NoError(t, err)
	_, err = db.Exec(storetest.ReleaseOrphanSQL)
	require.NoError(t, err)
	_, err = db.Exec(storetest.ReleaseChassisSQL)
	require.NoError(t, err)
	require.NoError(t, db.Close())
	s, err := Open(context.Background(), path)
	require.NoError(t, err)
	defer s.Close()
	storetest.CheckRelease(t, s)
}
