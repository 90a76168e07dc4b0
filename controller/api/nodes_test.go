package api

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestCreateNode(t *testing.T) { forEachStoreEnv(t, testCreateNode) }

func testCreateNode(t *testing.T, e *testEnv) {
	n := e.createNode("node-1", map[string]any{"driver_info": map[string]any{"ipmi_password": "s3cret", "ipmi_address": "127.0.0.1"}})
	assert.Equal(t, "enroll", n["provision_state"])
	assert.Equal(t, map[string]any{"ipmi_password": "******", "ipmi_address": "127.0.0.1"}, n["driver_info"])
	assert.Equal(t, map[string]any{}, n["clean_step"], "empty dicts are {} not null")
	assert.Equal(t, []any{}, n["traits"])
	assert.Regexp(t, `^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}\+00:00$`, n["created_at"])
	assert.Equal(t, false, n["retired"])
	assert.Equal(t, "test-host", n["conductor"])
	for _, k := range []string{"links", "ports", "states", "portgroups", "volume"} {
		assert.Contains(t, n, k)
	}

	tests := map[string]struct {
		ver    string
		body   any
		status int
		fault  string
	}{
		"unknown field":       {latest, map[string]any{"driver": "fake-hardware", "bogus": 1}, 400, "Unexpected arguments: bogus"},
		"missing driver":      {latest, map[string]any{"name": "x"}, 400, "Missing mandatory field: driver"},
		"unknown driver":      {latest, map[string]any{"driver": "nope"}, 400, "No valid host was found"},
		"duplicate name":      {latest, map[string]any{"driver": "fake-hardware", "name": "node-1"}, 409, "A node with name node-1 already exists."},
		"bad name":            {latest, map[string]any{"driver": "fake-hardware", "name": "has space"}, 400, "Expected a logical name"},
		"reserved name":       {latest, map[string]any{"driver": "fake-hardware", "name": "detail"}, 400, "reserved"},
		"uuid-like name":      {latest, map[string]any{"driver": "fake-hardware", "name": "6f2a8e0e-8a0e-4f5a-9d0e-2b1f4c3d2e1a"}, 400, "looks like a UUID"},
		"name needs 1.5":      {"1.4", map[string]any{"driver": "fake-hardware", "name": "old"}, 406, "Request not acceptable."},
		"retired needs 1.61":  {"1.60", map[string]any{"driver": "fake-hardware", "retired": true}, 406, "Request not acceptable."},
		"wrong type":          {latest, map[string]any{"driver": "fake-hardware", "properties": "cpus=4"}, 400, "expected an object"},
		"protected on create": {latest, map[string]any{"driver": "fake-hardware", "protected": true}, 400, "Unexpected arguments: protected"},
		"malformed":           {latest, `{"driver": `, 400, "Malformed JSON body"},
		"not an object":       {latest, `[1,2]`, 400, "Malformed JSON body"},
		"trailing data":       {latest, `{"driver":"fake-hardware"} {}`, 400, "trailing data"},
		"oversized":           {latest, `{"driver":"fake-hardware","extra":{"x":"` + strings.Repeat("a", maxBody) + `"}}`, 413, "larger than"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			r := e.do("POST", "/v1/nodes", tc.ver, tc.body)
			require.Equal(t, tc.status, r.status, string(r.body))
			assert.Contains(t, r.fault(t), tc.fault)
		})
	}
}

func TestGetNodeAndFieldGating(t *testing.T) { forEachStoreEnv(t, testGetNodeAndFieldGating) }

func testGetNodeAndFieldGating(t *testing.T, e *testEnv) {
	n := e.createNode("gate", map[string]any{"retired": true, "retired_reason": "old"})
	id := n["uuid"].(string)

	r := e.do("GET", "/v1/nodes/gate", "1.60", nil)
	require.Equal(t, http.StatusOK, r.status)
	assert.NotContains(t, r.json(t), "retired", "fields newer than the version are hidden")
	r = e.do("GET", "/v1/nodes/gate", latest, nil)
	assert.Equal(t, true, r.json(t)["retired"])

	r = e.do("GET", "/v1/nodes/gate", "", nil)
	assert.Equal(t, http.StatusNotFound, r.status, "names are not identifiers at 1.1")
	r = e.do("GET", "/v1/nodes/"+id, "", nil)
	assert.Equal(t, http.StatusOK, r.status)
	old := r.json(t)
	assert.Equal(t, "enroll", old["provision_state"])
	assert.NotContains(t, old, "name", "name appears at 1.5")
	assert.NotContains(t, old, "driver_internal_info", "driver_internal_info appears at 1.3")

	r = e.do("GET", "/v1/nodes/gate?fields=uuid,provision_state", latest, nil)
	require.Equal(t, http.StatusOK, r.status)
	got := r.json(t)
	assert.ElementsMatch(t, []string{"uuid", "provision_state", "links"}, keys(got))

	assert.Equal(t, 400, e.do("GET", "/v1/nodes/gate?fields=bogus", latest, nil).status)
	assert.Equal(t, 406, e.do("GET", "/v1/nodes/gate?fields=retired", "1.60", nil).status)
	assert.Equal(t, 406, e.do("GET", "/v1/nodes/gate?fields=uuid", "1.7", nil).status)
	assert.Equal(t, 400, e.do("GET", "/v1/nodes/gate?foo=bar", latest, nil).status)
	r = e.do("GET", "/v1/nodes/nope", latest, nil)
	assert.Equal(t, 404, r.status)
	assert.Equal(t, "Node nope could not be found.", r.fault(t))
}

func keys(m map[string]any) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func TestListNodesFiltersAndPaging(t *testing.T) { forEachStoreEnv(t, testListNodesFiltersAndPaging) }

func testListNodesFiltersAndPaging(t *testing.T, e *testEnv) {
	for i := 0; i < 5; i++ {
		extra := map[string]any{"resource_class": "gold"}
		if i%2 == 1 {
			extra = map[string]any{"resource_class": "silver", "maintenance": true}
		}
		e.createNode(fmt.Sprintf("n%d", i), extra)
	}
	names := func(path string) []string {
		r := e.do("GET", path, latest, nil)
		require.Equal(t, http.StatusOK, r.status, string(r.body))
		var out []string
		for _, n := range r.json(t)["nodes"].([]any) {
			out = append(out, n.(map[string]any)["name"].(string))
		}
		return out
	}
	assert.Equal(t, []string{"n0", "n1", "n2", "n3", "n4"}, names("/v1/nodes"))
	assert.Equal(t, []string{"n1", "n3"}, names("/v1/nodes?maintenance=True"))
	assert.Equal(t, []string{"n0", "n2", "n4"}, names("/v1/nodes?maintenance=no"))
	assert.Equal(t, []string{"n0", "n2", "n4"}, names("/v1/nodes?resource_class=gold"))
	assert.Equal(t, []string{"n4", "n3", "n2", "n1", "n0"}, names("/v1/nodes?sort_key=name&sort_dir=desc"))
	assert.Empty(t, names("/v1/nodes?provision_state=active"))
	assert.Equal(t, 5, len(names("/v1/nodes?retired=false")))

	plain := e.do("GET", "/v1/nodes", latest, nil).json(t)["nodes"].([]any)[0].(map[string]any)
	assert.ElementsMatch(t, []string{"uuid", "instance_uuid", "maintenance", "power_state", "provision_state", "name", "links"}, keys(plain))
	detail := e.do("GET", "/v1/nodes/detail", latest, nil).json(t)["nodes"].([]any)[0].(map[string]any)
	assert.Contains(t, detail, "driver_info")
	detail2 := e.do("GET", "/v1/nodes?detail=true", latest, nil).json(t)["nodes"].([]any)[0].(map[string]any)
	assert.Contains(t, detail2, "driver_info")

	// keyset paging follows "next" until a short page
	var seen []string
	path := "/v1/nodes?limit=2"
	for path != "" {
		body := e.do("GET", path, latest, nil).json(t)
		for _, n := range body["nodes"].([]any) {
			seen = append(seen, n.(map[string]any)["name"].(string))
		}
		path = ""
		if next, ok := body["next"].(string); ok {
			u, err := url.Parse(next)
			require.NoError(t, err)
			assert.Equal(t, "2", u.Query().Get("limit"))
			path = u.RequestURI()
		}
	}
	assert.Equal(t, []string{"n0", "n1", "n2", "n3", "n4"}, seen)

	bad := map[string]int{
		"/v1/nodes?limit=0": 400, "/v1/nodes?limit=x": 400, "/v1/nodes?foo=bar": 400,
		"/v1/nodes?sort_key=driver_info": 400, "/v1/nodes?sort_dir=up": 400, "/v1/nodes?provision_state=bogus": 400,
		"/v1/nodes?maintenance=maybe": 400, "/v1/nodes?marker=5c2f1a36-1111-4b5e-9d1c-4b7c1b2d9e01": 400,
		"/v1/nodes/detail?fields=uuid": 400, "/v1/nodes?detail=true&fields=uuid": 400,
	}
	for p, status := range bad {
		r := e.do("GET", p, latest, nil)
		assert.Equal(t, status, r.status, p)
		assert.NotEmpty(t, r.fault(t), p)
	}
	assert.Equal(t, 406, e.do("GET", "/v1/nodes?provision_state=enroll", "1.8", nil).status, "filter gated at 1.9")
}

func TestPatchNode(t *testing.T) { forEachStoreEnv(t, testPatchNode) }

func testPatchNode(t *testing.T, e *testEnv) {
	e.createNode("p1", map[string]any{"driver_info": map[string]any{"ipmi_address": "127.0.0.1"}})
	patch := func(ops ...map[string]any) resp { return e.do("PATCH", "/v1/nodes/p1", latest, ops) }
	op := func(o, path string, v any) map[string]any {
		m := map[string]any{"op": o, "path": path}
		if v != nil {
			m["value"] = v
		}
		return m
	}

	r := patch(op("add", "/properties/cpus", 8), op("add", "/driver_info/ipmi_password", "pw"),
		op("replace", "/driver_info/ipmi_address", "127.0.0.2"), op("add", "/extra/a/b", 1))
	assert.Equal(t, 400, r.status, "parent /extra/a does not exist: %s", r.body)
	r = patch(op("add", "/properties/cpus", 8), op("add", "/driver_info/ipmi_password", "pw"),
		op("replace", "/driver_info/ipmi_address", "127.0.0.2"), op("add", "/description", "rack 4"))
	require.Equal(t, 200, r.status, string(r.body))
	n := r.json(t)
	assert.Equal(t, map[string]any{"cpus": float64(8)}, n["properties"])
	assert.Equal(t, map[string]any{"ipmi_address": "127.0.0.2", "ipmi_password": "******"}, n["driver_info"])
	stored, err := e.st.GetNode(t.Context(), "p1")
	require.NoError(t, err)
	assert.Equal(t, "pw", stored.DriverInfo["ipmi_password"], "the secret is stored, only masked in views")

	r = patch(op("add", "/retired", "True"), op("add", "/retired_reason", "EOL"))
	require.Equal(t, 200, r.status, string(r.body))
	assert.Equal(t, true, r.json(t)["retired"], "CLI sends the string True")
	r = patch(op("remove", "/retired", nil))
	require.Equal(t, 200, r.status)
	assert.Nil(t, r.json(t)["retired_reason"], "unretiring clears the reason")

	r = patch(op("add", "/maintenance", "true"))
	require.Equal(t, 200, r.status)
	r = patch(op("replace", "/maintenance", false))
	require.Equal(t, 200, r.status)
	assert.Equal(t, false, r.json(t)["maintenance"])

	tests := map[string]struct {
		ops    []map[string]any
		status int
		fault  string
	}{
		"remove missing":        {[]map[string]any{op("remove", "/properties/nope", nil)}, 400, "can't remove a non-existent object 'nope'"},
		"replace missing":       {[]map[string]any{op("replace", "/extra/nope", 1)}, 400, "non-existent"},
		"not patchable":         {[]map[string]any{op("replace", "/provision_state", "active")}, 400, "Cannot patch /provision_state"},
		"move op":               {[]map[string]any{op("move", "/extra/a", nil)}, 400, "Schema error for patch"},
		"bad path":              {[]map[string]any{op("add", "properties", 1)}, 400, "does not match"},
		"missing value":         {[]map[string]any{op("add", "/extra/x", nil)}, 400, "needs a value"},
		"bad bool":              {[]map[string]any{op("replace", "/maintenance", "perhaps")}, 400, "not a boolean"},
		"reason without retire": {[]map[string]any{op("add", "/retired_reason", "x")}, 400, "only be set when the node is retired"},
		"protect in enroll":     {[]map[string]any{op("add", "/protected", true)}, 409, "protected"},
		"unknown driver":        {[]map[string]any{op("replace", "/driver", "nope")}, 400, "No valid host"},
		"bad name":              {[]map[string]any{op("replace", "/name", "a b")}, 400, "logical name"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			r := e.do("PATCH", "/v1/nodes/p1", latest, tc.ops)
			require.Equal(t, tc.status, r.status, string(r.body))
			assert.Contains(t, r.fault(t), tc.fault)
		})
	}
	assert.Equal(t, 400, e.do("PATCH", "/v1/nodes/p1", latest, `{"op":"add"}`).status, "a patch is a list")
	after, err := e.st.GetNode(t.Context(), "p1")
	require.NoError(t, err)
	assert.Equal(t, stored.Properties, after.Properties, "refused patches change nothing")
}

func TestRetirement(t *testing.T) { forEachStoreEnv(t, testRetirement) }

func testRetirement(t *testing.T, e *testEnv) {
	e.createNode("r1", nil)
	require.Equal(t, 202, e.provision("r1", "manage", nil).status)
	e.waitState("r1", "manageable")
	require.Equal(t, 202, e.provision("r1", "provide", nil).status)
	e.waitState("r1", "available")

	r := e.do("PATCH", "/v1/nodes/r1", latest, []map[string]any{{"op": "add", "path": "/retired", "value": true}})
	require.Equal(t, 409, r.status)
	assert.Equal(t, "Node "+e.do("GET", "/v1/nodes/r1", latest, nil).json(t)["uuid"].(string)+" can not have 'retired' set in provision state 'available'", r.fault(t))

	// retire an active node; undeploying it cleans and ends in manageable
	require.Equal(t, 202, e.provision("r1", "active", nil).status)
	e.waitState("r1", "active")
	r = e.do("PATCH", "/v1/nodes/r1", latest, []map[string]any{{"op": "add", "path": "/retired", "value": "True"}})
	require.Equal(t, 200, r.status, string(r.body))
	require.Equal(t, 202, e.provision("r1", "deleted", nil).status)
	n := e.waitState("r1", "manageable")
	assert.Equal(t, true, n["retired"])

	r = e.provision("r1", "provide", nil)
	require.Equal(t, 400, r.status)
	assert.Contains(t, r.fault(t), "because it is retired")

	retired := e.do("GET", "/v1/nodes?retired=true", latest, nil).json(t)["nodes"].([]any)
	assert.Len(t, retired, 1)
}

func TestDeleteNode(t *testing.T) { forEachStoreEnv(t, testDeleteNode) }

func testDeleteNode(t *testing.T, e *testEnv) {
	e.createNode("d1", nil)
	require.Equal(t, 202, e.provision("d1", "manage", nil).status)
	e.waitState("d1", "manageable")
	require.Equal(t, 202, e.provision("d1", "provide", nil).status)
	e.waitState("d1", "available")
	require.Equal(t, 202, e.provision("d1", "active", nil).status)
	e.waitState("d1", "active")
	r := e.do("DELETE", "/v1/nodes/d1", latest, nil)
	require.Equal(t, 409, r.status)
	assert.Contains(t, r.fault(t), "Valid provision states to perform deletion")
	require.Equal(t, 202, e.do("PUT", "/v1/nodes/d1/maintenance", latest, map[string]any{"reason": "gone"}).status)
	assert.Equal(t, 204, e.do("DELETE", "/v1/nodes/d1", latest, nil).status, "maintenance allows deleting in any state")
	assert.Equal(t, 404, e.do("GET", "/v1/nodes/d1", latest, nil).status)
}

// TestLargePageIsStreamedWhole: a detailed page far larger than one write
// chunk arrives as one valid document with every node, in order, and the
// next link after them.
func TestLargePageIsStreamedWhole(t *testing.T) {
	e := newEnv(t)
	const n = 150
	for i := 0; i < n; i++ {
		// Long properties make each node several kB, so the page spans
		// many chunks.
		e.createNode(fmt.Sprintf("big-%03d", i), map[string]any{"properties": map[string]any{"notes": strings.Repeat("x", 2000)}})
	}
	r := e.do("GET", "/v1/nodes/detail?limit=120", latest, nil)
	require.Equal(t, 200, r.status)
	require.Greater(t, len(r.body), 3*pageChunk, "the page spans several chunks")
	page := r.json(t)
	nodes := page["nodes"].([]any)
	require.Len(t, nodes, 120)
	for i, v := range nodes {
		assert.Equal(t, fmt.Sprintf("big-%03d", i), v.(map[string]any)["name"])
	}
	assert.Contains(t, page["next"], "marker=")
	assert.Equal(t, "application/json", r.header.Get("Content-Type"))
}
