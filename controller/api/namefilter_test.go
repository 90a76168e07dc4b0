package api

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestListNodesByNameSubstring: name_contains (anvil's extension, for the
// dashboard's search) matches part of a name, ignoring case, literally.
func TestListNodesByNameSubstring(t *testing.T) {
	e := newEnv(t)
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
