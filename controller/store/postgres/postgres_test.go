package postgres

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/controller/store"
	"github.com/anvil-metal/anvil/controller/store/postgres/pgserver"
	"github.com/anvil-metal/anvil/controller/store/sqlite"
	"github.com/anvil-metal/anvil/controller/store/sqlstore"
	"github.com/anvil-metal/anvil/controller/store/storetest"
)

// TestPostgres runs everything against one throwaway PostgreSQL server (a
// cluster costs seconds to create; a database costs milliseconds), with a
// fresh database per subtest.
func TestPostgres(t *testing.T) {
	srv := pgserver.ForTest(t)

	t.Run("Suite", func(t *testing.T) {
		storetest.Run(t, func(t *testing.T) store.Store { return openStore(t, srv.NewDatabase(t)) })
	})
	t.Run("DHCPLeases", func(t *testing.T) {
		storetest.RunDHCPLeases(t, func(t *testing.T) store.Store { return openStore(t, srv.NewDatabase(t)) })
	})
	t.Run("Snapshot", func(t *testing.T) {
		storetest.RunSnapshot(t, func(t *testing.T) store.Store { return openStore(t, srv.NewDatabase(t)) })
	})
	t.Run("TwoControllers", func(t *testing.T) { testTwoControllers(t, srv.NewDatabase(t)) })
	t.Run("TwoControllersRace", func(t *testing.T) { testTwoControllersRace(t, srv.NewDatabase(t)) })
	t.Run("NoLostUpdates", func(t *testing.T) { testNoLostUpdates(t, srv.NewDatabase(t)) })
	t.Run("TwoControllersRaceRepeatableRead", func(t *testing.T) {
		// A database (here: the URL) may default to a stricter isolation
		// level: lost races are then serialization failures, which must
		// still read as conflicts.
		testTwoControllersRace(t, srv.NewDatabase(t)+"&default_transaction_isolation=repeatable%20read")
	})
	t.Run("Notifications", func(t *testing.T) { testNotifications(t, srv.NewDatabase(t)) })
	t.Run("ConcurrentMigrations", func(t *testing.T) { testConcurrentMigrations(t, srv.NewDatabase(t)) })
	t.Run("ReopenKeepsDataAndMigratesOnce", func(t *testing.T) { testReopen(t, srv.NewDatabase(t)) })
	t.Run("RefusesNewerSchema", func(t *testing.T) { testRefusesNewerSchema(t, srv.NewDatabase(t)) })
	t.Run("LegacyMigration", func(t *testing.T) { testLegacyMigration(t, srv.NewDatabase(t)) })
	t.Run("ReleaseDatabase", func(t *testing.T) { testReleaseDatabase(t, srv.NewDatabase(t)) })
	t.Run("DiskRecordsMigration", func(t *testing.T) { testDiskRecordsMigration(t, srv.NewDatabase(t), srv.NewDatabase(t)) })
	t.Run("DocumentsAreStoredVerbatim", func(t *testing.T) { testDocumentsVerbatim(t, srv.NewDatabase(t)) })
	t.Run("KeysetPagingMatchesSQLite", func(t *testing.T) {
		// A database whose default collation is not byte order (ICU's
		// English: a < B < b) shows that the schema, not the cluster's
		// locale, fixes the order.
		url, err := srv.NewDatabaseWith(t, "TEMPLATE template0 LOCALE_PROVIDER icu ICU_LOCALE 'en-US'")
		if err != nil {
			t.Logf("no ICU collation in this PostgreSQL build (%v); using the default database", err)
			url = srv.NewDatabase(t)
		}
		testPagingMatchesSQLite(t, url)
	})
}

func TestOpenRejectsBadURL(t *testing.T) {
	_, err := Open(context.Background(), "postgres://anvil:s3cret@[::1/db")
	require.Error(t, err)
	assert.NotContains(t, err.Error(), "s3cret", "the password must not leak into logs")
}

func openStore(t *testing.T, url string) *Store {
	t.Helper()
	s, err := Open(context.Background(), url)
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	return s
}

func event(nodeUUID, msg string) *store.Event {
	return &store.Event{UUID: uuid.NewString(), NodeUUID: nodeUUID, CreatedAt: time.Now().UTC(), Severity: "INFO",
		EventType: "provisioning", Event: msg}
}

func eventNames(t *testing.T, s store.Store, nodeUUID string) []string {
	t.Helper()
	events, err := s.ListEvents(context.Background(), nodeUUID, 0)
	require.NoError(t, err)
	var out []string
	for _, e := range events {
		out = append(out, e.Event)
	}
	return out
}

// testTwoControllers is two controllers sharing a fleet: each sees the
// other's writes at once (no cache), and a controller holding a node it
// read before the other wrote loses with ErrConflict.
func testTwoControllers(t *testing.T, url string) {
	ctx := context.Background()
	a, b := openStore(t, url), openStore(t, url)

	n := storetest.NewNode("shared-1")
	require.NoError(t, a.CreateNode(ctx, n))
	staleA, err := a.GetNode(ctx, n.UUID)
	require.NoError(t, err)

	onB, err := b.GetNode(ctx, "shared-1")
	require.NoError(t, err, "b sees a's insert")
	onB.ProvisionState = "manageable"
	require.NoError(t, b.UpdateNode(ctx, onB, event(n.UUID, "by b")))

	got, err := a.GetNode(ctx, n.UUID)
	require.NoError(t, err)
	assert.Equal(t, "manageable", got.ProvisionState, "a sees b's update")
	assert.Equal(t, int64(2), got.Revision)

	staleA.ProvisionState = "error"
	err = a.UpdateNode(ctx, staleA, event(n.UUID, "stale from a"))
	require.ErrorIs(t, err, store.ErrConflict, "a's copy predates b's write")
	assert.Equal(t, int64(1), staleA.Revision, "a refused update leaves the caller's revision alone")
	assert.Equal(t, []string{"by b"}, eventNames(t, a, n.UUID), "the refused update wrote no event")

	// The conductor's way out: re-read and retry.
	_, err = store.MutateNode(ctx, a, n.UUID, func(n *store.Node) error { n.ProvisionState = "available"; return nil })
	require.NoError(t, err)
	got, err = b.GetNode(ctx, n.UUID)
	require.NoError(t, err)
	assert.Equal(t, "available", got.ProvisionState)

	assert.ErrorIs(t, b.CreateNode(ctx, storetest.NewNode("shared-1")), store.ErrDuplicateName,
		"names are unique across controllers")
	p := &store.Port{UUID: uuid.NewString(), Address: "52:54:00:00:00:01", NodeUUID: n.UUID}
	require.NoError(t, a.CreatePort(ctx, p))
	ports, err := b.ListPorts(ctx, store.ResourceFilter{Address: &p.Address}, store.Page{})
	require.NoError(t, err)
	require.Len(t, ports, 1)
	assert.ErrorIs(t, b.CreatePort(ctx, &store.Port{UUID: uuid.NewString(), Address: p.Address, NodeUUID: n.UUID}),
		store.ErrDuplicateAddr)

	assert.ErrorIs(t, b.DeleteNode(ctx, onB), store.ErrConflict, "b's copy predates a's write")
	require.NoError(t, b.DeleteNode(ctx, got))
	_, err = a.GetNode(ctx, n.UUID)
	assert.ErrorIs(t, err, store.ErrNotFound)
	assert.ErrorIs(t, a.UpdateNode(ctx, got), store.ErrNotFound, "updating a node the other controller deleted")
	_, err = a.GetPort(ctx, p.UUID)
	assert.ErrorIs(t, err, store.ErrNotFound)
}

// testTwoControllersRace has both controllers write the same revision at
// the same moment, many times: exactly one write wins each round, and only
// the winner's event is in the history.
func testTwoControllersRace(t *testing.T, url string) {
	ctx := context.Background()
	stores := []*Store{openStore(t, url), openStore(t, url)}
	n := storetest.NewNode("")
	require.NoError(t, stores[0].CreateNode(ctx, n))
	var want []string
	for round := 0; round < 25; round++ {
		var copies [2]*store.Node
		for i, s := range stores {
			c, err := s.GetNode(ctx, n.UUID)
			require.NoError(t, err)
			copies[i] = c
		}
		var errs [2]error
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i, s := range stores {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				copies[i].Extra = map[string]any{"writer": float64(i)}
				errs[i] = s.UpdateNode(ctx, copies[i], event(n.UUID, fmt.Sprintf("round %d by %d", round, i)))
			}()
		}
		close(start)
		wg.Wait()
		winner := slices.IndexFunc(errs[:], func(err error) bool { return err == nil })
		require.NotEqual(t, -1, winner, "round %d: nobody won: %v", round, errs)
		require.ErrorIs(t, errs[1-winner], store.ErrConflict, "round %d", round)
		want = append(want, fmt.Sprintf("round %d by %d", round, winner))
		got, err := stores[1-winner].GetNode(ctx, n.UUID)
		require.NoError(t, err)
		assert.Equal(t, float64(winner), got.Extra["writer"], "round %d", round)
		assert.Equal(t, int64(round+2), got.Revision)
	}
	assert.Equal(t, want, eventNames(t, stores[0], n.UUID))
}

// testNoLostUpdates increments a counter in the node document from several
// goroutines on two controllers; with optimistic concurrency every
// increment must survive.
func testNoLostUpdates(t *testing.T, url string) {
	ctx := context.Background()
	stores := []*Store{openStore(t, url), openStore(t, url)}
	n := storetest.NewNode("counter")
	n.Extra = map[string]any{"count": float64(0)}
	require.NoError(t, stores[0].CreateNode(ctx, n))
	const workers, increments = 3, 10
	var wg sync.WaitGroup
	errs := make(chan error, len(stores)*workers*increments)
	for _, s := range stores {
		for w := 0; w < workers; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < increments; i++ {
					_, err := store.MutateNode(ctx, s, "counter", func(n *store.Node) error {
						n.Extra["count"] = n.Extra["count"].(float64) + 1
						return nil
					})
					if err != nil {
						errs <- err
					}
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	got, err := stores[1].GetNode(ctx, "counter")
	require.NoError(t, err)
	total := len(stores) * workers * increments
	assert.Equal(t, float64(total), got.Extra["count"])
	assert.Equal(t, int64(total+1), got.Revision)
}

// testConcurrentMigrations starts several controllers at once against an
// empty database, as a fleet restarting after an upgrade would.
func testConcurrentMigrations(t *testing.T, url string) {
	ctx := context.Background()
	const controllers = 4
	stores := make([]*Store, controllers)
	errs := make([]error, controllers)
	var wg sync.WaitGroup
	for i := range stores {
		wg.Add(1)
		go func() {
			defer wg.Done()
			stores[i], errs[i] = Open(ctx, url)
		}()
	}
	wg.Wait()
	for i, s := range stores {
		require.NoError(t, errs[i], "controller %d", i)
		t.Cleanup(func() { s.Close() })
	}
	v, err := stores[0].SchemaVersion(ctx)
	require.NoError(t, err)
	assert.Equal(t, sqlstore.LatestSchemaVersion(), v)
	var rows int
	require.NoError(t, stores[0].DB().QueryRowContext(ctx, `SELECT count(*) FROM schema_migrations`).Scan(&rows))
	assert.Equal(t, sqlstore.LatestSchemaVersion(), rows, "each migration recorded once")
}

func testReopen(t *testing.T, url string) {
	ctx := context.Background()
	s, err := Open(ctx, url)
	require.NoError(t, err)
	n := storetest.NewNode("survivor")
	require.NoError(t, s.CreateNode(ctx, n))
	require.NoError(t, s.Close())

	s = openStore(t, url)
	v, err := s.SchemaVersion(ctx)
	require.NoError(t, err)
	assert.Equal(t, sqlstore.LatestSchemaVersion(), v)
	got, err := s.GetNode(ctx, "survivor")
	require.NoError(t, err)
	assert.Equal(t, n.UUID, got.UUID)
}

func testRefusesNewerSchema(t *testing.T, url string) {
	ctx := context.Background()
	s := openStore(t, url)
	_, err := s.DB().ExecContext(ctx, `INSERT INTO schema_migrations (version, applied_at) VALUES (999, now())`)
	require.NoError(t, err)
	_, err = Open(ctx, url)
	assert.ErrorContains(t, err, "newer than this controller")
}

// testDocumentsVerbatim is why documents are bytea, not jsonb: jsonb
// refuses \u0000 in a string (a BMC password can hold anything), and it
// would hand the agent's inventory back re-encoded.
func testDocumentsVerbatim(t *testing.T, url string) {
	ctx := context.Background()
	s := openStore(t, url)
	n := storetest.NewNode("nul")
	n.DriverInfo = map[string]any{"ipmi_password": "a\x00b", "big": 1e300, "unicode": "ünï\u2028"}
	require.NoError(t, s.CreateNode(ctx, n))
	got, err := s.GetNode(ctx, "nul")
	require.NoError(t, err)
	assert.Equal(t, n.DriverInfo, got.DriverInfo)

	inv := []byte(`{"z": 1, "a": [1.50, 2e3],  "s": "\u0000"}`)
	require.NoError(t, s.PutInventory(ctx, n.UUID, inv))
	back, err := s.GetInventory(ctx, n.UUID)
	require.NoError(t, err)
	assert.Equal(t, string(inv), string(back))
}

// testPagingMatchesSQLite loads the same nodes into this store and into the
// SQLite store and walks every sort key both ways, in pages and at once:
// the two backends must list the nodes in the same order (NULLs first,
// byte order for text, ties by id).
func testPagingMatchesSQLite(t *testing.T, url string) {
	ctx := context.Background()
	pg := openStore(t, url)
	lite, err := sqlite.Open(ctx, ":memory:")
	require.NoError(t, err)
	t.Cleanup(func() { lite.Close() })

	strp := func(s string) *string { return &s }
	base := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	names := []*string{nil, strp("b"), strp("B"), nil, strp("ä"), strp("a-1"), strp("a"), strp("Z"), nil, strp("a_1")}
	powers := []*string{nil, strp("power on"), strp("power off"), strp("power on")}
	classes := []*string{strp("gold"), nil, strp("Gold"), strp("gold"), strp("")}
	for i, name := range names {
		n := storetest.NewNode("")
		n.Name = name
		n.PowerState = powers[i%len(powers)]
		n.ResourceClass = classes[i%len(classes)]
		n.Maintenance = i%3 == 0
		n.Retired = i%4 == 1
		n.ProvisionState = []string{"enroll", "available", "active"}[i%3]
		n.Driver = []string{"ipmi", "redfish"}[i%2]
		n.ConductorGroup = []string{"", "rack-1"}[i%2]
		n.CreatedAt = base.Add(time.Duration(i%4) * time.Second) // duplicates: ties go by id
		if i%3 != 0 {
			n.Owner = strp(fmt.Sprintf("project-%d", i%2))
			n.InstanceUUID = strp(fmt.Sprintf("%08d-0000-0000-0000-000000000000", 10-i))
			ts := base.Add(time.Duration(i%5) * time.Minute)
			n.ProvisionUpdatedAt = &ts
		}
		twin := *n
		require.NoError(t, pg.CreateNode(ctx, n))
		require.NoError(t, lite.CreateNode(ctx, &twin))
	}

	walk := func(s store.Store, f store.NodeFilter, p store.Page) []string {
		var got []string
		for {
			page, err := s.ListNodes(ctx, f, p)
			require.NoError(t, err)
			for _, n := range page {
				got = append(got, n.UUID)
			}
			if p.Limit == 0 || len(page) < p.Limit {
				return got
			}
			p.Marker = page[len(page)-1].UUID
		}
	}
	filters := map[string]store.NodeFilter{"all": {}, "not maintenance": {Maintenance: new(bool)}}
	for _, key := range store.SortKeys {
		for _, desc := range []bool{false, true} {
			for _, limit := range []int{0, 1, 3} {
				for fname, f := range filters {
					p := store.Page{SortKey: key, Desc: desc, Limit: limit}
					want := walk(lite, f, p)
					assert.Equal(t, want, walk(pg, f, p), "sort %s desc=%v limit=%d filter %s", key, desc, limit, fname)
				}
			}
		}
	}
}

// testNotifications: a notification reaches the controller it names, sent
// from another controller's store, and no other.
func testNotifications(t *testing.T, url string) {
	a, b := openStore(t, url), openStore(t, url)
	ctx, cancel := context.WithCancel(context.Background())
	got := make(chan string, 10)
	done := make(chan error, 1)
	listening := make(chan struct{})
	go func() {
		done <- a.ListenNodes(ctx, "ctl-a", func(node string) { got <- node })
	}()
	// LISTEN takes effect asynchronously: notify until the first arrives.
	go func() {
		defer close(listening)
		for i := 0; i < 100; i++ {
			if err := b.NotifyNode(ctx, "warm-up", "ctl-a"); err != nil {
				return
			}
			select {
			case node := <-got:
				assert.Equal(t, "warm-up", node)
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
		t.Error("no notification arrived")
	}()
	<-listening
	require.NoError(t, b.NotifyNode(ctx, "node-for-b", "ctl-b"))
	require.NoError(t, b.NotifyNode(ctx, "node-for-a", "ctl-a"))
	for {
		select {
		case node := <-got:
			if node == "warm-up" { // sent before the first one arrived
				continue
			}
			assert.Equal(t, "node-for-a", node, "notifications for another holder are ignored")
		case <-time.After(10 * time.Second):
			t.Fatal("notification not delivered")
		}
		break
	}
	cancel()
	require.NoError(t, <-done, "ending the context ends ListenNodes cleanly")
}

func BenchmarkStore(b *testing.B) {
	srv := pgserver.ForTest(b)
	storetest.Bench(b, func(b *testing.B) store.Store {
		s, err := Open(context.Background(), srv.NewDatabase(b))
		require.NoError(b, err)
		return s
	})
}
