package postgres

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/controller/store/sqlstore"
	"github.com/anvil-metal/anvil/controller/store/storetest"
)

// testLegacyMigration: a database at schema 3 holding the nodes the
// release before the operation record wrote (the SQLite fixture's rows,
// copied column for column as the backends' shared layout allows)
// migrates on open, each node's working state moving to its operation
// column.
func testLegacyMigration(t *testing.T, url string) {
	ctx := context.Background()
	rows := storetest.LegacyRows(t)
	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, `CREATE TABLE schema_migrations (version integer PRIMARY KEY, applied_at timestamptz NOT NULL)`)
	require.NoError(t, err)
	for v := 1; v <= 3; v++ {
		_, err := conn.Exec(ctx, sqlstore.Migration(sqlstore.Postgres(), v))
		require.NoError(t, err)
		_, err = conn.Exec(ctx, `INSERT INTO schema_migrations VALUES ($1, now())`, v)
		require.NoError(t, err)
	}
	for _, row := range rows {
		args := make([]any, len(row))
		for i, v := range row {
			switch {
			case i == 6 || i == 7: // maintenance, retired: SQLite integers
				args[i] = v.(int64) != 0
			case i >= 18 && i <= 20 && v != nil: // timestamps: SQLite text
				ts, err := time.Parse("2006-01-02T15:04:05.000000Z", v.(string))
				require.NoError(t, err)
				args[i] = ts
			default:
				args[i] = v
			}
		}
		_, err := conn.Exec(ctx, `INSERT INTO nodes (`+storetest.LegacyNodeCols+`) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9,
			$10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21, $22)`, args...)
		require.NoError(t, err)
	}
	s := openStore(t, url)
	v, err := s.SchemaVersion(ctx)
	require.NoError(t, err)
	require.Equal(t, sqlstore.LatestSchemaVersion(), v)
	storetest.CheckLegacyMigrated(t, s, rows)
}

// testReleaseDatabase: a database written by the last release with a store
// of its own per database (schema 5; testdata/release5/postgres.sql is its
// pg_dump) opens with the unified store and reads back as written.
func testReleaseDatabase(t *testing.T, url string) {
	ctx := context.Background()
	dump, err := os.ReadFile(filepath.Join(storetest.ReleaseFixtureDir, "postgres.sql"))
	require.NoError(t, err)
	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, string(dump)) // no arguments: the simple protocol, which runs a script
	require.NoError(t, err)
	_, err = conn.Exec(ctx, `SET search_path = public`)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, storetest.ReleaseOrphanSQL)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, storetest.ReleaseChassisSQL)
	require.NoError(t, err)
	require.NoError(t, conn.Close(ctx)) // the dump empties search_path for its session
	s := openStore(t, url)
	storetest.CheckRelease(t, s)
}

// testDiskRecordsMigration: a database written before the disk guard's
// records moved into the operation record (the records in
// driver_internal_info) migrates on open.
func testDiskRecordsMigration(t *testing.T, srcURL, url string) {
	ctx := context.Background()
	src := openStore(t, srcURL)
	before := storetest.PopulateLegacyDiskRecords(t, src)
	db, err := sql.Open("pgx", url)
	require.NoError(t, err)
	storetest.BeforeDiskRecords(t, src.DB(), db, sqlstore.Postgres(), func(n int) string { return fmt.Sprintf("$%d", n) })
	require.NoError(t, db.Close())
	s := openStore(t, url)
	v, err := s.SchemaVersion(ctx)
	require.NoError(t, err)
	require.Equal(t, sqlstore.LatestSchemaVersion(), v)
	storetest.CheckDiskRecordsMoved(t, s, before)
}
