package api

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/controller/conductor"
)

// nodeViewsGolden holds the exact responses of the node views for the
// fixture fleet; ANVIL_UPDATE_GOLDEN=1 rewrites it. The views are the
// hottest code of the API and get optimised: this pins every byte.
const nodeViewsGolden = "testdata/nodeviews.golden"

// TestNodeViewsGolden renders lists (detail, plain, fields=, paged,
// sorted) and single nodes at several microversions over the fixture
// fleet and compares the bytes with the golden file: the same bytes on
// either store.
func TestNodeViewsGolden(t *testing.T) { forEachStore(t, testNodeViewsGolden) }

func testNodeViewsGolden(t *testing.T, kind storeKind) {
	st, _, closeStore := openTestStore(context.Background(), t, kind, ":memory:")
	t.Cleanup(closeStore)
	const fleet = 60
	createFixtureNodes(t, st, fleet)
	cond := conductor.New(st, conductor.Config{Host: "golden-host"}, conductor.FakeDriver{})
	srv := httptest.NewServer(New(Config{Store: st, Conductor: cond, PublicURL: "http://anvil.example:6385/"}))
	t.Cleanup(srv.Close)

	active, extra := fixtureNode(10).UUID, fixtureNode(3).UUID
	reqs := []struct{ version, path string }{
		{"1.82", "/v1/nodes/detail"},
		{"1.81", "/v1/nodes/detail?limit=7"},
		{"1.81", "/v1/nodes/detail?limit=5&marker=" + fixtureNode(20).UUID + "&sort_key=name&sort_dir=desc"},
		{"1.81", "/v1/nodes/detail?provision_state=active&maintenance=false"},
		{"1.1", "/v1/nodes/detail?limit=12"},
		{"1.38", "/v1/nodes/detail?limit=12"},
		{"1.52", "/v1/nodes/detail?limit=12"},
		{"1.81", "/v1/nodes"},
		{"1.81", "/v1/nodes?limit=4&sort_key=created_at"},
		{"1.81", "/v1/nodes?detail=true&limit=9"},
		{"1.81", "/v1/nodes?fields=uuid,driver_info,instance_info,driver_internal_info,extra,traits,conductor,provision_state&limit=31"},
		{"1.81", "/v1/nodes?fields=name,reservation&provision_state=active"},
		{"1.1", "/v1/nodes?limit=3"},
		{"1.82", "/v1/nodes/" + active},
		{"1.82", "/v1/nodes/" + extra},
		{"1.81", "/v1/nodes/n-00017"},
		{"1.81", "/v1/nodes/n-00031"},
		{"1.1", "/v1/nodes/" + active},
		{"1.81", "/v1/nodes/" + active + "?fields=driver_internal_info,instance_info,uuid"},
		{"1.81", "/v1/nodes/n-00003?fields=extra,description,name"},
		// 1.83 adds parent_node, 1.86 firmware_interface (fixture nodes
		// stored none: the fake hardware type's default shows)
		{"1.83", "/v1/nodes/" + active},
		{"1.86", "/v1/nodes/detail?limit=3"},
		{"1.86", "/v1/nodes?fields=uuid,parent_node,firmware_interface&limit=3"},
	}
	var got bytes.Buffer
	for _, rq := range reqs {
		req, err := http.NewRequest(http.MethodGet, srv.URL+rq.path, nil)
		require.NoError(t, err)
		req.Header.Set(versionHeader, rq.version)
		res, err := srv.Client().Do(req)
		require.NoError(t, err)
		body, err := io.ReadAll(res.Body)
		res.Body.Close()
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, res.StatusCode, "%s: %s", rq.path, body)
		fmt.Fprintf(&got, "== GET %s (%s) %d %s\n%s", rq.path, rq.version, res.StatusCode, res.Header.Get("Content-Type"), body)
	}
	if os.Getenv("ANVIL_UPDATE_GOLDEN") != "" && kind == onSQLite {
		require.NoError(t, os.WriteFile(nodeViewsGolden, got.Bytes(), 0o644))
	}
	want, err := os.ReadFile(nodeViewsGolden)
	require.NoError(t, err, "ANVIL_UPDATE_GOLDEN=1 creates it")
	if !assert.Equal(t, string(want), got.String()) {
		// a long diff is unreadable: name the first differing byte
		i := 0
		for i < len(want) && i < got.Len() && want[i] == got.Bytes()[i] {
			i++
		}
		t.Logf("first difference at byte %d: want %q, got %q", i, around(want, i), around(got.Bytes(), i))
	}
}

func around(b []byte, i int) []byte { return b[max(0, i-80):min(len(b), i+80)] }
