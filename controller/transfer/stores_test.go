package transfer

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/controller/api"
	"github.com/anvil-metal/anvil/controller/conductor"
	"github.com/anvil-metal/anvil/controller/store"
	"github.com/anvil-metal/anvil/controller/store/postgres"
	"github.com/anvil-metal/anvil/controller/store/postgres/pgserver"
	"github.com/anvil-metal/anvil/controller/store/sqlite"
)

// Both stores write an import's history in batches.
var (
	_ eventBatcher = (*sqlite.Store)(nil)
	_ eventBatcher = (*postgres.Store)(nil)
)

func openSQLiteFile(t *testing.T) store.Store {
	t.Helper()
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "anvil.db"))
	require.NoError(t, err)
	t.Cleanup(func() { st.Close() })
	return st
}

func openPostgres(t *testing.T, srv *pgserver.Server) store.Store {
	t.Helper()
	st, err := postgres.Open(context.Background(), srv.NewDatabase(t))
	require.NoError(t, err)
	t.Cleanup(func() { st.Close() })
	return st
}

// exportedAt is the one line two exports of the same fleet differ by.
var exportedAt = regexp.MustCompile(`"exported_at":"[^"]*"`)

// exportNow exports with the real clock; it returns the document and the
// document without its exported_at, for comparisons.
func exportNow(t *testing.T, src Source) (string, string, Summary) {
	t.Helper()
	var buf bytes.Buffer
	sum, err := Export(context.Background(), src, &buf, ExportOptions{})
	require.NoError(t, err)
	require.Regexp(t, `^\{"format":"anvil-export","version":1,"exported_at":"20`, buf.String())
	return buf.String(), exportedAt.ReplaceAllString(buf.String(), `"exported_at":""`), sum
}

// moveFleet exports src, imports into dst, exports dst, and requires the
// two documents (but for exported_at) and the two APIs' views to be the
// same.
func moveFleet(t *testing.T, src, dst store.Store) Summary {
	t.Helper()
	doc, first, sum := exportNow(t, src)
	got, err := Import(context.Background(), dst, strings.NewReader(doc), ImportOptions{})
	require.NoError(t, err)
	assert.Equal(t, sum, got)
	_, second, again := exportNow(t, dst)
	assert.Equal(t, sum, again)
	require.Equal(t, first, second)
	assert.Equal(t, apiView(t, src), apiView(t, dst), "the API shows the same fleet")
	return sum
}

// apiView is what the real API serves about the fleet: every node with
// its history and inventory, and every port, portgroup and allocation.
func apiView(t *testing.T, st store.Store) map[string]string {
	t.Helper()
	srv := httptest.NewServer(api.New(api.Config{Store: st, Conductor: conductor.New(st, conductor.Config{Host: "view"}),
		PublicURL: "http://anvil.test"}))
	defer srv.Close()
	get := func(path string) string {
		req, err := http.NewRequest(http.MethodGet, srv.URL+path, nil)
		require.NoError(t, err)
		req.Header.Set("X-OpenStack-Ironic-API-Version", "latest")
		res, err := srv.Client().Do(req)
		require.NoError(t, err)
		defer res.Body.Close()
		body, err := io.ReadAll(res.Body)
		require.NoError(t, err)
		return fmt.Sprintf("%d %s", res.StatusCode, body)
	}
	view := map[string]string{}
	for _, p := range []string{"/v1/ports/detail?limit=1000", "/v1/portgroups/detail?limit=1000", "/v1/allocations?limit=1000"} {
		view[p] = get(p)
	}
	err := eachPage(context.Background(), func(p store.Page) ([]*store.NodeSummary, error) {
		return st.ListNodeSummaries(context.Background(), store.NodeFilter{}, p)
	}, func(n *store.NodeSummary) string { return n.UUID }, func(n *store.NodeSummary) error {
		for _, p := range []string{"", "/history", "/inventory", "/traits", "/states"} {
			view["/v1/nodes/"+n.UUID+p] = get("/v1/nodes/" + n.UUID + p)
		}
		return nil
	})
	require.NoError(t, err)
	require.Contains(t, view["/v1/nodes/"+fleetUUID(kindNode, 2)], `"ipmi_address":"10.0.0.2"`)
	require.Contains(t, view["/v1/nodes/"+fleetUUID(kindNode, 2)+"/inventory"], `"model_name":"EPYC"`)
	return view
}

// fillThroughAPI adds objects the way operators make them: a node enrolled
// and managed through the real API and conductor, and its port.
func fillThroughAPI(t *testing.T, st store.Store) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cond := conductor.New(st, conductor.Config{Host: "ctl-api", CheckInterval: time.Hour}, conductor.FakeDriver{})
	done := make(chan struct{})
	go func() { _ = cond.Run(ctx); close(done) }()
	srv := httptest.NewServer(api.New(api.Config{Store: st, Conductor: cond}))
	defer func() { srv.Close(); cancel(); <-done }()
	send := func(method, path, body string) map[string]any {
		req, err := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("X-OpenStack-Ironic-API-Version", "latest")
		req.Header.Set("Content-Type", "application/json")
		res, err := srv.Client().Do(req)
		require.NoError(t, err)
		defer res.Body.Close()
		require.Less(t, res.StatusCode, 300, "%s %s", method, path)
		var out map[string]any
		_ = json.NewDecoder(res.Body).Decode(&out)
		return out
	}
	n := send(http.MethodPost, "/v1/nodes", `{"driver":"fake-hardware","name":"api-node","driver_info":{"secret":"hunter2"},
		"properties":{"cpus":8},"resource_class":"baremetal.api","extra":{"made":"by the API"}}`)
	send(http.MethodPut, "/v1/nodes/api-node/traits/CUSTOM_API", "")
	send(http.MethodPost, "/v1/ports", fmt.Sprintf(`{"address":"52:54:00:aa:00:01","node_uuid":%q}`, n["uuid"]))
	send(http.MethodPut, "/v1/nodes/api-node/states/provision", `{"target":"manage"}`)
	require.Eventually(t, func() bool {
		n, err := st.GetNode(context.Background(), "api-node")
		require.NoError(t, err)
		return n.ProvisionState == "manageable" && n.Reservation == nil
	}, 10*time.Second, 10*time.Millisecond)
}

// TestSQLiteToPostgres moves a fleet made through store calls and through
// the API from SQLite to PostgreSQL, then back to a new SQLite database.
func TestSQLiteToPostgres(t *testing.T) {
	pg := pgserver.ForTest(t)
	src := openSQLiteFile(t)
	fillFleet(t, src, 0)
	fillThroughAPI(t, src)
	dst := openPostgres(t, pg)
	sum := moveFleet(t, src, dst)
	assert.Equal(t, 5, sum.Nodes)
	assert.Equal(t, 4, sum.Ports)
	assert.Greater(t, sum.Events, 5, "the API walk's history too")

	// A copy of the copy: the PostgreSQL fleet moved on to SQLite.
	moveFleet(t, dst, openSQLiteFile(t))

	_, err := Import(context.Background(), dst, strings.NewReader(doc()), ImportOptions{})
	require.ErrorIs(t, err, ErrNotEmpty, "PostgreSQL target with nodes")
}

// TestPostgresToSQLite moves a fleet made on PostgreSQL, larger than a
// list page, to SQLite.
func TestPostgresToSQLite(t *testing.T) {
	pg := pgserver.ForTest(t)
	src := openPostgres(t, pg)
	fillFleet(t, src, pageSize+7)
	sum := moveFleet(t, src, openSQLiteFile(t))
	assert.Equal(t, 4+pageSize+7, sum.Nodes)
}
