package api

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestNodeFieldsLinks: "links" is a field of a node as Ironic shows it
// (node_convert_with_links checks fields against the node with its
// links), so ?fields= may name it, on one node and in lists.
func TestNodeFieldsLinks(t *testing.T) {
	e := newEnv(t)
	n := e.createNode("lnk", nil)
	id := n["uuid"].(string)
	for name, tc := range map[string]struct {
		path string
		keys []string
	}{
		"one node, links only":    {"/v1/nodes/lnk?fields=links", []string{"links"}},
		"one node, with a field":  {"/v1/nodes/lnk?fields=links,name", []string{"links", "name"}},
		"list, links only":        {"/v1/nodes?fields=links", []string{"links"}},
		"list, with other fields": {"/v1/nodes?fields=uuid,links,driver", []string{"uuid", "links", "driver"}},
	} {
		t.Run(name, func(t *testing.T) {
			r := e.do("GET", tc.path, latest, nil)
			require.Equal(t, http.StatusOK, r.status, "%s", r.body)
			got := r.json(t)
			if nodes, ok := got["nodes"].([]any); ok {
				require.Len(t, nodes, 1)
				got = nodes[0].(map[string]any)
			}
			assert.ElementsMatch(t, tc.keys, keys(got))
			links, ok := got["links"].([]any)
			require.True(t, ok, "links: %v", got["links"])
			require.NotEmpty(t, links)
			assert.Contains(t, links[0].(map[string]any)["href"], "/v1/nodes/"+id)
		})
	}
	r := e.do("GET", "/v1/nodes/lnk?fields=links", "1.7", nil)
	assert.Equal(t, http.StatusNotAcceptable, r.status, "fields needs 1.8, links or not")
}
