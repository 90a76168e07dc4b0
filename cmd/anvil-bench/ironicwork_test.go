package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A listing follows next links (absolute URLs, as both servers write
// them) until a page comes without one, and counts nodes without decoding
// the pages; the checked listing confirms the count by decoding.
func TestListAllFollowsNextLinks(t *testing.T) {
	var srv *httptest.Server
	srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		assert.Equal(t, ironicAPIVersion, r.Header.Get("X-OpenStack-Ironic-API-Version"))
		page := map[string]any{}
		var nodes []map[string]any
		switch r.URL.Query().Get("marker") {
		case "":
			for i := range 3 {
				nodes = append(nodes, map[string]any{"uuid": fmt.Sprint(i), "chassis_uuid": nil, "instance_uuid": "x"})
			}
			page["next"] = srv.URL + "/v1/nodes/detail?limit=3&marker=2"
		case "2":
			nodes = append(nodes, map[string]any{"uuid": "3", "name": "uuid"})
			page["next"] = srv.URL + "/v1/nodes/detail?limit=3&marker=3"
		default:
			nodes = []map[string]any{}
		}
		page["nodes"] = nodes
		require.NoError(t, json.NewEncoder(w).Encode(page))
	}))
	defer srv.Close()
	w := newWorkload(srv.URL, 1)
	for _, check := range []bool{true, false} {
		nodes, requests, err := w.listAll(context.Background(), check)
		require.NoError(t, err)
		assert.Equal(t, 4, nodes)
		assert.Equal(t, 3, requests, "two pages with nodes and the empty last one")
	}
}

func TestParseIronicRejectsBadFlags(t *testing.T) {
	for _, args := range [][]string{{"-nodes", "10", "-lifecycle", "20"}, {"-only", "nova"}, {"-clients", "0"}} {
		_, err := parseIronic(args)
		assert.Error(t, err, "%v", args)
	}
	c, err := parseIronic(nil)
	require.NoError(t, err)
	assert.Equal(t, 1000, c.nodes)
	assert.Equal(t, 100, c.lifecycle)
}
