package api

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestChassisAsIronic: chassis CRUD, lists (detail, fields, paging,
// sorting), a chassis' nodes, chassis_uuid on nodes, and every refusal,
// as Ironic 21.4 answers them.
func TestChassisAsIronic(t *testing.T) { forEachStoreEnv(t, testChassisAsIronic) }

func testChassisAsIronic(t *testing.T, e *testEnv) {
	r := e.do("POST", "/v1/chassis", latest, map[string]any{"description": "rack 1", "extra": map[string]any{"row": "a"}})
	require.Equal(t, http.StatusCreated, r.status, string(r.body))
	c1 := r.json(t)
	id1 := c1["uuid"].(string)
	assert.Equal(t, e.srv.URL+"/v1/chassis/"+id1, r.header.Get("Location"))
	assert.Equal(t, []string{"created_at", "description", "extra", "links", "nodes", "updated_at", "uuid"}, sortedKeys(c1))
	assert.Equal(t, e.srv.URL+"/v1/chassis/"+id1+"/nodes", c1["nodes"].([]any)[0].(map[string]any)["href"])
	const id2 = "1be26c0b-03f2-4d2e-ae87-c02d7f33c123"
	require.Equal(t, http.StatusCreated, e.do("POST", "/v1/chassis", latest, map[string]any{"uuid": id2}).status)
	missing := "7c1d0a6b-0000-4000-8000-000000000000"

	// lists
	list := e.do("GET", "/v1/chassis", latest, nil).json(t)["chassis"].([]any)
	require.Len(t, list, 2)
	assert.Equal(t, []string{"description", "links", "uuid"}, sortedKeys(list[0].(map[string]any)))
	detail := e.do("GET", "/v1/chassis/detail", latest, nil).json(t)["chassis"].([]any)
	assert.Contains(t, detail[0].(map[string]any), "extra")
	page := e.do("GET", "/v1/chassis?limit=1", latest, nil).json(t)
	require.Len(t, page["chassis"].([]any), 1)
	assert.Contains(t, page["next"], "marker="+id1)
	byUUID := e.do("GET", "/v1/chassis?sort_key=uuid&sort_dir=desc", latest, nil).json(t)["chassis"].([]any)
	want := []string{id1, id2}
	if id1 < id2 {
		want = []string{id2, id1}
	}
	assert.Equal(t, want, []string{byUUID[0].(map[string]any)["uuid"].(string), byUUID[1].(map[string]any)["uuid"].(string)})
	assert.Equal(t, []string{"extra", "links"}, sortedKeys(e.do("GET", "/v1/chassis/"+id1+"?fields=extra", latest, nil).json(t)))

	// nodes in a chassis
	n1 := e.createNode("n1", map[string]any{"chassis_uuid": id1})
	assert.Equal(t, id1, n1["chassis_uuid"])
	e.createNode("n2", nil)
	in := e.do("GET", "/v1/chassis/"+id1+"/nodes", latest, nil).json(t)["nodes"].([]any)
	require.Len(t, in, 1)
	assert.Equal(t, "n1", in[0].(map[string]any)["name"])
	filtered := e.do("GET", "/v1/nodes?chassis_uuid="+id1, latest, nil).json(t)["nodes"].([]any)
	require.Len(t, filtered, 1)
	r = e.do("PATCH", "/v1/nodes/n2", latest, []any{map[string]any{"op": "add", "path": "/chassis_uuid", "value": id2}})
	require.Equal(t, http.StatusOK, r.status, string(r.body))
	assert.Equal(t, id2, r.json(t)["chassis_uuid"])

	e.runWriteCases(t, map[string]writeCase{
		"unknown field": {"POST", "/v1/chassis", latest, map[string]any{"name": "x"}, 400,
			"Schema error for chassis: Additional properties are not allowed ('name' was unexpected)"},
		"description too long": {"POST", "/v1/chassis", latest, map[string]any{"description": strings.Repeat("d", 256)}, 400,
			"Schema error for chassis: '" + strings.Repeat("d", 256) + "' is too long"},
		"extra not an object": {"POST", "/v1/chassis", latest, map[string]any{"extra": []any{1}}, 400,
			"Schema error for chassis: [1] is not of type 'object', 'null'"},
		"uuid not a UUID":         {"POST", "/v1/chassis", latest, map[string]any{"uuid": "x"}, 400, "Expected UUID for uuid: x"},
		"duplicate uuid":          {"POST", "/v1/chassis", latest, map[string]any{"uuid": id2}, 409, "A chassis with UUID " + id2 + " already exists."},
		"not found":               {"GET", "/v1/chassis/" + missing, latest, nil, 404, "Chassis " + missing + " could not be found."},
		"not a UUID":              {"GET", "/v1/chassis/x", latest, nil, 400, "Expected UUID for chassis_uuid: x"},
		"nodes of none":           {"GET", "/v1/chassis/" + missing + "/nodes", latest, nil, 404, "Chassis " + missing + " could not be found."},
		"unknown field=":          {"GET", "/v1/chassis?fields=name", latest, nil, 400, `Field(s) "name" are not valid`},
		"detail at 1.42":          {"GET", "/v1/chassis?detail=true", "1.42", nil, 400, "Invalid query parameter ?detail=True received."},
		"detail and fields":       {"GET", "/v1/chassis?detail=true&fields=uuid", latest, nil, 400, "Can not specify ?detail=True and fields in the same request."},
		"bad chassis_uuid filter": {"GET", "/v1/nodes?chassis_uuid=x", latest, nil, 400, "Expected UUID for chassis_uuid: x"},
		"fields at 1.7":           {"GET", "/v1/chassis?fields=uuid", "1.7", nil, 406, "Request not acceptable."},
		"sort by extra":           {"GET", "/v1/chassis?sort_key=extra", latest, nil, 400, "The sort_key value extra is an invalid field for sorting"},
		"sort by unknown":         {"GET", "/v1/chassis?sort_key=foo", latest, nil, 400, `The sort_key value "foo" is an invalid field for sorting`},
		"bad marker":              {"GET", "/v1/chassis?marker=" + missing, latest, nil, 400, "Marker " + missing + " could not be found."},
		"PUT":                     {"PUT", "/v1/chassis/" + id1, latest, map[string]any{}, 405, "The method PUT is not allowed for this resource."},
		"patch uuid": {"PATCH", "/v1/chassis/" + id1, latest, []any{map[string]any{"op": "replace", "path": "/uuid", "value": missing}}, 400,
			"Cannot overwrite UUID for an existing Chassis."},
		"patch created_at": {"PATCH", "/v1/chassis/" + id1, latest, []any{map[string]any{"op": "replace", "path": "/created_at", "value": "x"}}, 400,
			"Cannot patch /created_at. Only the following can be updated: uuid, extra, description"},
		"patch description": {"PATCH", "/v1/chassis/" + id1, latest, []any{map[string]any{"op": "replace", "path": "/description", "value": "rack 9"}}, 200, ""},
		"node in missing chassis": {"POST", "/v1/nodes", latest, map[string]any{"driver": "fake-hardware", "chassis_uuid": missing}, 400,
			"Chassis " + missing + " could not be found."},
		"node chassis not UUID": {"PATCH", "/v1/nodes/n2", latest, []any{map[string]any{"op": "replace", "path": "/chassis_uuid", "value": "x"}}, 400,
			"Expected UUID for chassis_uuid: x"},
		"node leaves chassis at 1.24": {"PATCH", "/v1/nodes/n2", "1.24", []any{map[string]any{"op": "remove", "path": "/chassis_uuid"}}, 406,
			"Request not acceptable."},
		"delete with nodes": {"DELETE", "/v1/chassis/" + id1, latest, nil, 400,
			"Cannot complete the requested action because chassis " + id1 + " contains nodes."},
	})
	assert.Equal(t, "rack 9", e.do("GET", "/v1/chassis/"+id1, latest, nil).json(t)["description"])

	// emptied, a chassis goes
	require.Equal(t, http.StatusOK, e.do("PATCH", "/v1/nodes/n1", latest, []any{map[string]any{"op": "remove", "path": "/chassis_uuid"}}).status)
	assert.Equal(t, http.StatusNoContent, e.do("DELETE", "/v1/chassis/"+id1, latest, nil).status)
	assert.Equal(t, http.StatusNotFound, e.do("DELETE", "/v1/chassis/"+id1, latest, nil).status)
	n, err := e.st.GetNode(context.Background(), "n2")
	require.NoError(t, err)
	assert.Equal(t, id2, *n.ChassisUUID)
}
