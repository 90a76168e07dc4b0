package api

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestListNodesByNameSubstring: name_contains (anvil's extension, for the
// dashboard's search) matches part of a name, ignoring case, literally.
func TestListNodesByNameSubstring(t *testing.T) { forEachStoreEnv(t, testListNodesByNameSubstring) }

func testListNodesByNameSubstring(t *testing.T, e *testEnv) {
	for _, n := range []string{"rack1-node01", "rack1-node02", "Rack2-node01", "spare"} {
		e.createNode(n, nil)
	}
	for q, want := range map[string][]string{
		"rack1":  {"rack1-node01", "rack1-node02"},
		"RACK":   {"rack1-node01", "rack1-node02", "Rack2-node01"},
		"node01": {"rack1-node01", "Rack2-node01"},
		"%25":    nil,
	} {
		r := e.do("GET", "/v1/nodes?fields=name&name_contains="+q, latest, nil)
		require.Equal(t, 200, r.status, string(r.body))
		var got []string
		for _, n := range r.json(t)["nodes"].([]any) {
			got = append(got, n.(map[string]any)["name"].(string))
		}
		assert.Equal(t, want, got, q)
	}
}

// TestListNodesByText: text_contains (anvil's extension, the dashboard's
// search) matches part of a name, a description or a UUID, ignoring case,
// literally, and pages like any list.
func TestListNodesByText(t *testing.T) { forEachStoreEnv(t, testListNodesByText) }

func testListNodesByText(t *testing.T, e *testEnv) {
	for n, desc := range map[string]string{"rack1-node01": "Spare PSU", "rack1-node02": "", "gpu-box": "in rack7, row 2", "spare": "100% busy"} {
		body := map[string]any{"description": desc}
		if desc == "" {
			body = nil
		}
		e.createNode(n, body)
	}
	uuid := e.do("GET", "/v1/nodes/gpu-box", latest, nil).json(t)["uuid"].(string)
	for q, want := range map[string][]string{
		"RACK":      {"gpu-box", "rack1-node01", "rack1-node02"},
		"spare":     {"rack1-node01", "spare"},
		"%25":       {"spare"},
		"row%202":   {"gpu-box"},
		uuid[9:18]:  {"gpu-box"},
		"no-such-x": nil,
	} {
		r := e.do("GET", "/v1/nodes?fields=name&sort_key=name&text_contains="+q, latest, nil)
		require.Equal(t, 200, r.status, string(r.body))
		var got []string
		for _, n := range r.json(t)["nodes"].([]any) {
			got = append(got, n.(map[string]any)["name"].(string))
		}
		assert.Equal(t, want, got, q)
	}
	r := e.do("GET", "/v1/nodes?fields=name&sort_key=name&limit=1&text_contains=rack", latest, nil).json(t)
	require.Len(t, r["nodes"], 1)
	assert.Contains(t, r["next"], "text_contains=rack", "the next page keeps the filter")
}
