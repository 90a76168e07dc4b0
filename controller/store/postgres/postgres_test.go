package postgres

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/controller/store"
	"github.com/anvil-metal/anvil/controller/store/sqlite"
	"github.com/anvil-metal/anvil/controller/store/storetest"
)

// TestPostgres runs everything against one throwaway PostgreSQL server (a
// cluster costs seconds to create; a database costs milliseconds), with a
// fresh database per subtest.
func TestPostgres(t *testing.T) {
	srv := startServer(t)

	t.Run("Suite", func(t *testing.T) {
		storetest.Run(t, func(t *testing.T) store.Store { return openStore(t, srv.newDatabase(t)) })
	})
	t.Run("TwoControllers", func(t *testing.T) { testTwoControllers(t, srv.newDatabase(t)) })
	t.Run("TwoControllersRace", func(t *testing.T) { testTwoControllersRace(t, srv.newDatabase(t)) })
	t.Run("NoLostUpdates", func(t *testing.T) { testNoLostUpdates(t, srv.newDatabase(t)) })
	t.Run("TwoControllersRaceRepeatableRead", func(t *testing.T) {
		// A database (here: the URL) may default to a stricter isolation
		// level: lost races are then serialization failures, which must
		// still read as conflicts.
		testTwoControllersRace(t, srv.newDatabase(t)+"&default_transaction_isolation=repeatable%20read")
	})
	t.Run("ConcurrentMigrations", func(t *testing.T) { testConcurrentMigrations(t, srv.newDatabase(t)) })
	t.Run("ReopenKeepsDataAndMigratesOnce", func(t *testing.T) { testReopen(t, srv.newDatabase(t)) })
	t.Run("RefusesNewerSchema", func(t *testing.T) { testRefusesNewerSchema(t, srv.newDatabase(t)) })
	t.Run("DocumentsAreStoredVerbatim", func(t *testing.T) { testDocumentsVerbatim(t, srv.newDatabase(t)) })
	t.Run("KeysetPagingMatchesSQLite", func(t *testing.T) {
		// A database whose default collation is not byte order (ICU's
		// English: a < B < b) shows that the schema, not the cluster's
		// locale, fixes the order.
		url, err := srv.createDatabase(t, "TEMPLATE template0 LOCALE_PROVIDER icu ICU_LOCALE 'en-US'")
		if err != nil {
			t.Logf("no ICU collation in this PostgreSQL build (%v); using the default database", err)
			url = srv.newDatabase(t)
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

	require.NoError(t, b.DeleteNode(ctx, n.UUID))
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
	assert.Equal(t, len(migrations), v)
	var rows int
	require.NoError(t, stores[0].pool.QueryRow(ctx, `SELECT count(*) FROM schema_migrations`).Scan(&rows))
	assert.Equal(t, len(migrations), rows, "each migration recorded once")
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
	assert.Equal(t, len(migrations), v)
	got, err := s.GetNode(ctx, "survivor")
	require.NoError(t, err)
	assert.Equal(t, n.UUID, got.UUID)
}

func testRefusesNewerSchema(t *testing.T, url string) {
	ctx := context.Background()
	s := openStore(t, url)
	_, err := s.pool.Exec(ctx, `INSERT INTO schema_migrations (version, applied_at) VALUES (999, now())`)
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

// ---- a throwaway PostgreSQL server ----

// pgServer is a PostgreSQL cluster in a temporary directory, listening on
// loopback, owned by one test.
type pgServer struct {
	port int
	dbs  atomic.Int64 // names the per-test databases
}

// startServer creates a cluster with the distribution's initdb, starts
// postgres on a free loopback port and stops it when t ends. The test is
// skipped, not failed, when PostgreSQL is not installed.
func startServer(t *testing.T) *pgServer {
	t.Helper()
	bin, err := findPGBinDir()
	if errors.Is(err, errNotInstalled) {
		t.Skipf("PostgreSQL server binaries not found (%v); install the postgresql package or set ANVIL_TEST_PG_BINDIR", err)
	}
	require.NoError(t, err)
	cred, err := serverCredential()
	require.NoError(t, err)
	dir := serverDir(t, cred)
	data := filepath.Join(dir, "data")

	initdb := serverCmd(bin, "initdb", dir, cred, "-D", data, "-A", "trust", "-U", "anvil",
		"-E", "UTF8", "--no-locale", "--no-sync")
	if out, err := initdb.CombinedOutput(); err != nil {
		t.Fatalf("initdb: %v\n%s", err, out)
	}

	// The free port is found by binding and releasing it, so another process
	// may take it before postgres binds: then postgres exits and we retry.
	const attempts = 5
	for attempt := 1; ; attempt++ {
		port := freePort(t)
		err := runServer(t, bin, dir, data, port, cred)
		if err == nil {
			return &pgServer{port: port}
		}
		if !errors.Is(err, errPortTaken) || attempt == attempts {
			t.Fatalf("start postgres: %v", err)
		}
		t.Logf("port %d taken, retrying: %v", port, err)
	}
}

var (
	errPortTaken    = errors.New("port taken")
	errNotInstalled = errors.New("not installed")
)

// runServer starts postgres and waits until it accepts connections. On
// success the server is stopped in t's cleanup.
func runServer(t *testing.T, bin, dir, data string, port int, cred *syscall.Credential) error {
	logPath := filepath.Join(dir, fmt.Sprintf("postgres-%d.log", port))
	logFile, err := os.Create(logPath)
	if err != nil {
		return fmt.Errorf("create server log: %w", err)
	}
	defer logFile.Close() // the child has its own descriptor
	cmd := serverCmd(bin, "postgres", dir, cred, "-D", data, "-k", dir, "-p", strconv.Itoa(port),
		"-c", "listen_addresses=127.0.0.1",
		// A throwaway cluster: durability off, and small, because the
		// machine running the tests is shared.
		"-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
		"-c", "shared_buffers=16MB", "-c", "max_connections=60")
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", cmd.Path, err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	serverLog := func() string { b, _ := os.ReadFile(logPath); return string(b) }

	stop := func() {
		// SIGINT is PostgreSQL's "fast" shutdown: sessions are ended and
		// the cluster is shut down cleanly without waiting for clients.
		_ = cmd.Process.Signal(syscall.SIGINT)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	url := fmt.Sprintf("postgres://anvil@127.0.0.1:%d/postgres?sslmode=disable&connect_timeout=2", port)
	for {
		conn, err := pgx.Connect(ctx, url)
		if err == nil {
			conn.Close(ctx)
			t.Cleanup(func() {
				stop()
				if t.Failed() { // the server's side of a failure
					log := serverLog()
					t.Logf("postgres log (last 8 kB):\n%s", log[max(0, len(log)-8192):])
				}
			})
			return nil
		}
		select {
		case <-exited:
			log := serverLog()
			if strings.Contains(log, "could not bind") || strings.Contains(log, "Address already in use") {
				return fmt.Errorf("%w: %s", errPortTaken, log)
			}
			return fmt.Errorf("postgres exited before accepting connections:\n%s", log)
		case <-ctx.Done():
			stop()
			return fmt.Errorf("postgres did not accept connections within a minute (last error: %v):\n%s", err, serverLog())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// newDatabase creates an empty database for t, dropped when t ends, and
// returns its URL.
func (srv *pgServer) newDatabase(t *testing.T) string {
	t.Helper()
	url, err := srv.createDatabase(t, "")
	require.NoError(t, err)
	return url
}

// createDatabase is newDatabase with CREATE DATABASE options.
func (srv *pgServer) createDatabase(t *testing.T, options string) (string, error) {
	t.Helper()
	name := fmt.Sprintf("anvil_test_%d", srv.dbs.Add(1))
	if err := srv.admin(`CREATE DATABASE ` + name + ` ` + options); err != nil {
		return "", err
	}
	t.Cleanup(func() {
		if err := srv.admin(`DROP DATABASE IF EXISTS ` + name + ` WITH (FORCE)`); err != nil {
			t.Errorf("drop test database: %v", err)
		}
	})
	return fmt.Sprintf("postgres://anvil@127.0.0.1:%d/%s?sslmode=disable", srv.port, name), nil
}

// admin runs a statement on the maintenance database; CREATE and DROP
// DATABASE cannot run inside the test's own database.
func (srv *pgServer) admin(sql string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, fmt.Sprintf("postgres://anvil@127.0.0.1:%d/postgres?sslmode=disable", srv.port))
	if err != nil {
		return fmt.Errorf("connect to the maintenance database: %w", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, sql); err != nil {
		return fmt.Errorf("%s: %w", sql, err)
	}
	return nil
}

// findPGBinDir finds a directory holding both initdb and postgres: they
// must come from the same installation, as initdb runs the postgres next to
// it. ANVIL_TEST_PG_BINDIR wins (and, being explicit, fails the test
// rather than skipping it when wrong); then PATH (Debian links only some
// programs into /usr/bin or /usr/local/bin, so links are followed to the
// real directory); then the usual install locations, newest version first.
func findPGBinDir() (string, error) {
	complete := func(dir string) bool {
		for _, name := range []string{"initdb", "postgres"} {
			fi, err := os.Stat(filepath.Join(dir, name))
			if err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
				return false
			}
		}
		return true
	}
	if dir := os.Getenv("ANVIL_TEST_PG_BINDIR"); dir != "" {
		if complete(dir) {
			return dir, nil
		}
		return "", fmt.Errorf("ANVIL_TEST_PG_BINDIR=%s has no initdb and postgres", dir)
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		if real, err := filepath.EvalSymlinks(p); err == nil && complete(filepath.Dir(real)) {
			return filepath.Dir(real), nil
		}
	}
	var candidates []string
	for _, pattern := range []string{"/usr/lib/postgresql/*/bin", "/usr/pgsql-*/bin", "/usr/local/pgsql/bin"} {
		m, _ := filepath.Glob(pattern)
		candidates = append(candidates, m...)
	}
	// Newest major version first: compare the numbers in the paths.
	version := func(p string) int {
		digits := strings.Map(func(r rune) rune {
			if r >= '0' && r <= '9' {
				return r
			}
			return -1
		}, p)
		v, _ := strconv.Atoi(digits)
		return v
	}
	slices.SortFunc(candidates, func(a, b string) int { return version(b) - version(a) })
	for _, dir := range candidates {
		if complete(dir) {
			return dir, nil
		}
	}
	return "", fmt.Errorf("%w: no initdb and postgres in PATH, /usr/lib/postgresql/*/bin, /usr/pgsql-*/bin or /usr/local/pgsql/bin", errNotInstalled)
}

// serverCredential is who runs initdb and postgres. PostgreSQL refuses to
// run as root (initdb: "cannot be run as root"; postgres: "root execution
// of the PostgreSQL server is not permitted"), and CI runs the tests as
// root; then the server runs as an unprivileged account instead: the
// "postgres" account the distribution package creates, else "nobody", else
// the conventional nobody ids. nil means: run as ourselves.
func serverCredential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	for _, name := range []string{"postgres", "nobody"} {
		u, err := user.Lookup(name)
		if err != nil {
			continue
		}
		uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
		gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
		if err1 != nil || err2 != nil || uid == 0 {
			continue
		}
		// An empty Groups list drops root's supplementary groups too.
		return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}, nil
	}
	return &syscall.Credential{Uid: 65534, Gid: 65534, Groups: []uint32{}}, nil
}

// serverDir makes the cluster's directory (data directory and Unix socket
// inside), removed when t ends. As ourselves, t.TempDir does. As root, the
// server's account must own the directory and be able to reach it, and
// t.TempDir's parent is root's private 0700 directory; so the directory is
// made under the first temporary directory whose every ancestor the account
// may search, and handed over to it.
func serverDir(t *testing.T, cred *syscall.Credential) string {
	t.Helper()
	if cred == nil {
		return t.TempDir()
	}
	var base string
	for _, dir := range []string{os.TempDir(), "/tmp", "/var/tmp", "/dev/shm"} {
		if searchable(dir, cred) {
			base = dir
			break
		}
	}
	if base == "" {
		t.Fatalf("no temporary directory that uid %d can reach; set TMPDIR to a world-searchable directory", cred.Uid)
	}
	dir, err := os.MkdirTemp(base, "anvil-pg-")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	require.NoError(t, os.Chown(dir, int(cred.Uid), int(cred.Gid)))
	require.NoError(t, os.Chmod(dir, 0o700)) // PostgreSQL insists on a private data directory
	return dir
}

// searchable reports whether the account can traverse dir and all its
// ancestors.
func searchable(dir string, cred *syscall.Credential) bool {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return false
	}
	for {
		fi, err := os.Stat(dir)
		if err != nil || !fi.IsDir() {
			return false
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok {
			return false
		}
		mode := fi.Mode().Perm()
		switch {
		case st.Uid == cred.Uid:
			if mode&0o100 == 0 {
				return false
			}
		case st.Gid == cred.Gid:
			if mode&0o010 == 0 {
				return false
			}
		case mode&0o001 == 0:
			return false
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return true
		}
		dir = parent
	}
}

// serverCmd prepares one of the server programs: as the server's account
// when cred is set, in dir (the account may not be able to read our working
// directory), with a minimal environment (PG* variables of the developer's
// shell must not redirect the cluster, and an unset or ungenerated locale
// must not break initdb), and killed with SIGQUIT, PostgreSQL's immediate
// shutdown, if the test binary dies without cleaning up.
func serverCmd(bin, name, dir string, cred *syscall.Credential, args ...string) *exec.Cmd {
	cmd := exec.Command(filepath.Join(bin, name), args...)
	cmd.Dir = dir
	cmd.Env = []string{"PATH=" + bin + ":/usr/bin:/bin", "HOME=" + dir, "LC_ALL=C", "TZ=UTC"}
	// Go sets the parent-death signal after switching to cred, so the
	// switch does not clear it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGQUIT}
	return cmd
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
