package api

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/controller/store"
	"github.com/anvil-metal/anvil/controller/store/postgres"
	"github.com/anvil-metal/anvil/controller/store/postgres/pgserver"
	"github.com/anvil-metal/anvil/controller/store/sqlite"
	"github.com/anvil-metal/anvil/controller/store/sqlstore"
)

// storeKind names the database an API test runs on.
type storeKind string

const (
	onSQLite   storeKind = "sqlite"
	onPostgres storeKind = "postgres"
)

// storeKinds are the stores forEachStore runs a test on, in order.
var storeKinds = []storeKind{onSQLite, onPostgres}

// sharedPG is the one PostgreSQL cluster of this test binary: a cluster
// costs seconds to create, a database in it milliseconds, so tests share
// the cluster and each gets a fresh database. It is started on first use
// (a run of SQLite-only tests never pays for initdb) and stopped by
// TestMain.
type sharedPG struct {
	once sync.Once
	srv  *pgserver.Server
	err  error
}

// testPG is set once by TestMain; tests only read it.
var testPG *sharedPG

func TestMain(m *testing.M) {
	testPG = &sharedPG{}
	code := m.Run()
	if testPG.srv != nil {
		testPG.srv.Stop()
	}
	os.Exit(code)
}

// server returns the shared cluster, skipping t (as pgserver.ForTest does)
// when PostgreSQL is not installed.
func (p *sharedPG) server(t testing.TB) *pgserver.Server {
	t.Helper()
	p.once.Do(func() { p.srv, p.err = pgserver.Start(pgserver.Options{}) })
	if errors.Is(p.err, pgserver.ErrNotInstalled) {
		t.Skipf("%v; install the postgresql package or set ANVIL_TEST_PG_BINDIR", p.err)
	}
	require.NoError(t, p.err, "start the shared PostgreSQL cluster")
	t.Cleanup(func() {
		if t.Failed() { // the server's side of a failure
			log := p.srv.Log()
			t.Logf("postgres log (last 8 kB):\n%s", log[max(0, len(log)-8192):])
		}
	})
	return p.srv
}

// openTestStore opens a store of kind: SQLite at path (":memory:" for a
// private in-memory database), or a fresh PostgreSQL database dropped when
// t ends. It returns the store the API and conductor use (on PostgreSQL it
// also carries notifications), its SQL store for tests that write directly,
// and a function that closes it.
func openTestStore(ctx context.Context, t testing.TB, kind storeKind, path string) (store.Store, *sqlstore.Store, func()) {
	t.Helper()
	switch kind {
	case onSQLite:
		st, err := sqlite.Open(ctx, path)
		require.NoError(t, err)
		return st, st, func() { st.Close() }
	case onPostgres:
		require.Equal(t, ":memory:", path, "a PostgreSQL test database is always fresh")
		st, err := postgres.Open(ctx, testPG.server(t).NewDatabase(t))
		require.NoError(t, err)
		return st, st.Store, func() { st.Close() }
	}
	panic(fmt.Sprintf("unknown store kind %q", kind))
}

// forEachStore runs test once per store kind, as subtests named after the
// store, each on its own fresh database.
func forEachStore(t *testing.T, test func(t *testing.T, kind storeKind)) {
	t.Helper()
	for _, kind := range storeKinds {
		t.Run(string(kind), func(t *testing.T) { test(t, kind) })
	}
}

// forEachStoreEnv runs test once per store kind on a newEnv-style
// environment.
func forEachStoreEnv(t *testing.T, test func(t *testing.T, e *testEnv)) {
	t.Helper()
	forEachStore(t, func(t *testing.T, kind storeKind) { test(t, newEnvOn(t, kind)) })
}
