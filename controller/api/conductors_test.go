package api

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/controller/store"
)

func TestConductorsSole(t *testing.T) { forEachStoreEnv(t, testConductorsSole) }

func testConductorsSole(t *testing.T, e *testEnv) {
	list := e.do("GET", "/v1/conductors", latest, nil)
	require.Equal(t, http.StatusOK, list.status, string(list.body))
	cs := list.json(t)["conductors"].([]any)
	require.Len(t, cs, 1, "a sole controller lists itself")
	assert.Equal(t, map[string]any{"hostname": "test-host", "conductor_group": "", "alive": true,
		"links": []any{map[string]any{"href": e.srv.URL + "/v1/conductors/test-host", "rel": "self"},
			map[string]any{"href": e.srv.URL + "/conductors/test-host", "rel": "bookmark"}}}, cs[0])
	one := e.do("GET", "/v1/conductors/test-host", latest, nil).json(t)
	assert.Equal(t, []any{"fake-hardware"}, one["drivers"])
	assert.NotNil(t, one["created_at"])
	assert.NotNil(t, one["updated_at"])

	n := e.createNode("owned", nil)
	assert.Equal(t, "test-host", n["conductor"])
	e.createNode("elsewhere", nil)
	_, err := store.MutateNode(context.Background(), e.st, "elsewhere", func(n *store.Node) error {
		peer := "peer-b" // a peer is working on it
		n.Reservation = &peer
		return nil
	})
	require.NoError(t, err)
	assert.Equal(t, "peer-b", e.do("GET", "/v1/nodes/elsewhere", latest, nil).json(t)["conductor"])
	byConductor := func(c string) []any {
		var out []any
		for _, x := range e.do("GET", "/v1/nodes?conductor="+c, latest, nil).json(t)["nodes"].([]any) {
			out = append(out, x.(map[string]any)["name"])
		}
		return out
	}
	assert.Equal(t, []any{"owned"}, byConductor("test-host"))
	assert.Equal(t, []any{"elsewhere"}, byConductor("peer-b"))
	assert.Empty(t, byConductor("nobody"))
	assert.Contains(t, e.do("GET", "/v1/", latest, nil).json(t), "conductors")
	assert.NotContains(t, e.do("GET", "/v1/", "1.48", nil).json(t), "conductors")
}

func TestConductorsWithPeers(t *testing.T) { forEachStoreEnv(t, testConductorsWithPeers) }

func testConductorsWithPeers(t *testing.T, e *testEnv) {
	ctx := context.Background()
	require.NoError(t, e.st.RecordController(ctx, store.Controller{Holder: "peer-b/1", Hostname: "peer-b",
		Drivers: []string{"fake-hardware", "ipmi"}}, time.Hour))
	require.NoError(t, e.st.RecordController(ctx, store.Controller{Holder: "peer-a/1", Hostname: "peer-a",
		Drivers: []string{"fake-hardware"}}, time.Millisecond))
	time.Sleep(5 * time.Millisecond)
	// a restarted peer-b registers anew: the newest registration counts
	require.NoError(t, e.st.RecordController(ctx, store.Controller{Holder: "peer-b/2", Hostname: "peer-b",
		Drivers: []string{"redfish"}}, time.Hour))

	cs := e.do("GET", "/v1/conductors?detail=true&sort_key=hostname", latest, nil).json(t)["conductors"].([]any)
	require.Len(t, cs, 3)
	byHost := map[string]map[string]any{}
	var order []string
	for _, c := range cs {
		m := c.(map[string]any)
		byHost[m["hostname"].(string)] = m
		order = append(order, m["hostname"].(string))
	}
	assert.Equal(t, []string{"peer-a", "peer-b", "test-host"}, order)
	assert.Equal(t, false, byHost["peer-a"]["alive"], "its registration expired")
	assert.Equal(t, true, byHost["peer-b"]["alive"])
	assert.Equal(t, []any{"redfish"}, byHost["peer-b"]["drivers"])
	assert.Equal(t, false, e.do("GET", "/v1/conductors/peer-a", latest, nil).json(t)["alive"])

	page := e.do("GET", "/v1/conductors?sort_key=hostname&limit=2", latest, nil).json(t)
	assert.Len(t, page["conductors"], 2)
	require.Contains(t, page, "next")
	rest := e.do("GET", "/v1/conductors?sort_key=hostname&limit=2&marker=peer-b", latest, nil).json(t)
	assert.Equal(t, "test-host", rest["conductors"].([]any)[0].(map[string]any)["hostname"])
	assert.NotContains(t, rest, "next")
	sel := e.do("GET", "/v1/conductors?fields=hostname,drivers", latest, nil).json(t)["conductors"].([]any)
	assert.Equal(t, []string{"drivers", "hostname", "links"}, sortedKeys(sel[0].(map[string]any)))
	desc := e.do("GET", "/v1/conductors?sort_key=hostname&sort_dir=desc", latest, nil).json(t)["conductors"].([]any)
	assert.Equal(t, "test-host", desc[0].(map[string]any)["hostname"])

	// a driver's hosts are the live conductors running it
	assert.Equal(t, []any{"test-host"}, e.do("GET", "/v1/drivers/fake-hardware", latest, nil).json(t)["hosts"],
		"peer-a runs it too but is not alive; peer-b's newest registration does not")
	require.NoError(t, e.st.RecordController(ctx, store.Controller{Holder: "peer-c/1", Hostname: "peer-c",
		Drivers: []string{"fake-hardware"}}, time.Hour))
	assert.Equal(t, []any{"peer-c", "test-host"}, e.do("GET", "/v1/drivers?detail=true", latest, nil).json(t)["drivers"].([]any)[0].(map[string]any)["hosts"])
}

func TestConductorRefusals(t *testing.T) { forEachStoreEnv(t, testConductorRefusals) }

func testConductorRefusals(t *testing.T, e *testEnv) {
	for _, c := range []struct {
		path, ver string
		status    int
		msg       string
	}{
		{"/v1/conductors", "1.48", 404, "Resource could not be found."},
		{"/v1/conductors/test-host", "1.48", 404, "Resource could not be found."},
		{"/v1/conductors/nope", latest, 404, "Conductor nope could not be found."},
		{"/v1/conductors?marker=nope", latest, 404, "Conductor nope could not be found."},
		{"/v1/conductors?sort_key=alive", latest, 400, "The sort_key value alive is an invalid field for sorting"},
		{"/v1/conductors?detail=true&fields=hostname", latest, 400, "Can not specify ?detail=True and fields in the same request."},
		{"/v1/conductors?fields=nope", latest, 400, `Field(s) "nope" are not valid`},
		{"/v1/conductors?limit=0", latest, 400, "Limit must be positive"},
		{"/v1/conductors?bogus=1", latest, 400, "Unknown argument(s): bogus"},
	} {
		r := e.do("GET", c.path, c.ver, nil)
		assert.Equal(t, c.status, r.status, c.path)
		assert.Equal(t, c.msg, r.fault(t), c.path)
	}
}
