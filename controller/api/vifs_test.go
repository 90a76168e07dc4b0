package api

import (
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestVIFs: VIFs go to a free port group first, then to PXE-enabled
// ports, then to other ports, as Ironic's network interfaces choose; with
// Ironic's refusals; undeploying a node detaches them.
func TestVIFs(t *testing.T) { forEachStoreEnv(t, testVIFs) }

func testVIFs(t *testing.T, e *testEnv) {
	node := e.availableNode("v1", nil)["uuid"].(string)
	mk := func(path string, body map[string]any) string {
		t.Helper()
		body["node_uuid"] = node
		r := e.do("POST", path, latest, body)
		require.Equal(t, 201, r.status, string(r.body))
		return r.json(t)["uuid"].(string)
	}
	p1 := mk("/v1/ports", map[string]any{"address": "52:54:00:00:00:01", "pxe_enabled": false})
	p2 := mk("/v1/ports", map[string]any{"address": "52:54:00:00:00:02", "pxe_enabled": true})
	pg1 := mk("/v1/portgroups", map[string]any{"address": "52:54:00:00:00:10", "name": "bond0"})
	mk("/v1/portgroups", map[string]any{"name": "empty"})
	p3 := mk("/v1/ports", map[string]any{"address": "52:54:00:00:00:03", "portgroup_uuid": pg1})

	vifOf := func(path string) any {
		info, _ := e.do("GET", path, latest, nil).json(t)["internal_info"].(map[string]any)
		return info["tenant_vif_port_id"]
	}
	attach := func(body map[string]any) resp { return e.do("POST", "/v1/nodes/v1/vifs", latest, body) }

	require.Equal(t, 204, attach(map[string]any{"id": "vif-1"}).status)
	assert.Equal(t, "vif-1", vifOf("/v1/portgroups/"+pg1), "a port group first")
	require.Equal(t, 204, attach(map[string]any{"id": "vif-2", "extra_key": "allowed"}).status)
	assert.Equal(t, "vif-2", vifOf("/v1/ports/"+p2), "then a PXE-enabled port")
	require.Equal(t, 204, attach(map[string]any{"id": "vif-3"}).status)
	assert.Equal(t, "vif-3", vifOf("/v1/ports/"+p1))
	assert.Nil(t, vifOf("/v1/ports/"+p3), "a port of a group with a VIF is not used")

	list := e.do("GET", "/v1/nodes/v1/vifs", latest, nil)
	require.Equal(t, 200, list.status)
	assert.Equal(t, map[string]any{"vifs": []any{map[string]any{"id": "vif-3"}, map[string]any{"id": "vif-2"},
		map[string]any{"id": "vif-1"}}}, list.json(t), "ports, then port groups")

	refusals := map[string]struct {
		method, path, ver string
		body              any
		status            int
		fault             string
	}{
		"attached twice":    {"POST", "/v1/nodes/v1/vifs", latest, map[string]any{"id": "vif-1"}, 409, "Unable to attach VIF because VIF vif-1 is already attached to Ironic Portgroup " + pg1},
		"attached to port":  {"POST", "/v1/nodes/v1/vifs", latest, map[string]any{"id": "vif-2"}, 409, "Unable to attach VIF because VIF vif-2 is already attached to Ironic Port " + p2},
		"no free port":      {"POST", "/v1/nodes/v1/vifs", latest, map[string]any{"id": "vif-4"}, 400, "Unable to attach VIF vif-4, not enough free physical ports."},
		"no id":             {"POST", "/v1/nodes/v1/vifs", latest, map[string]any{"port_uuid": p1}, 400, "Schema error for vif: 'id' is a required property"},
		"id not a string":   {"POST", "/v1/nodes/v1/vifs", latest, map[string]any{"id": 5}, 400, "Schema error for vif: 5 is not of type 'string'"},
		"id not a name":     {"POST", "/v1/nodes/v1/vifs", latest, map[string]any{"id": "a b"}, 400, "Expected UUID or name for id: a b"},
		"port and group":    {"POST", "/v1/nodes/v1/vifs", latest, map[string]any{"id": "x", "port_uuid": p1, "portgroup_uuid": pg1}, 400, "Cannot specify both port_uuid and portgroup_uuid"},
		"not attached":      {"DELETE", "/v1/nodes/v1/vifs/vif-9", latest, nil, 400, "Unable to detach VIF vif-9 from node " + node + " because it is not attached to it."},
		"before 1.28":       {"GET", "/v1/nodes/v1/vifs", "1.27", nil, 404, "The resource could not be found."},
		"unknown node":      {"GET", "/v1/nodes/nope/vifs", latest, nil, 404, "Node nope could not be found."},
		"not a JSON object": {"POST", "/v1/nodes/v1/vifs", latest, "[]", 400, "Malformed JSON body"},
	}
	for name, tc := range refusals {
		t.Run(name, func(t *testing.T) {
			r := e.do(tc.method, tc.path, tc.ver, tc.body)
			require.Equal(t, tc.status, r.status, string(r.body))
			assert.Contains(t, r.fault(t), tc.fault)
		})
	}

	require.Equal(t, 204, e.do("DELETE", "/v1/nodes/v1/vifs/vif-3", latest, nil).status)
	assert.Nil(t, vifOf("/v1/ports/"+p1))
	r := attach(map[string]any{"id": "vif-5", "port_uuid": p1})
	require.Equal(t, 204, r.status, string(r.body))
	assert.Equal(t, "vif-5", vifOf("/v1/ports/"+p1), "the port asked for")
	r = e.do("PATCH", "/v1/ports/"+p1, latest, []map[string]any{{"op": "add", "path": "/extra/k", "value": "v"}})
	require.Equal(t, 200, r.status, string(r.body))
	assert.Equal(t, "vif-5", vifOf("/v1/ports/"+p1), "a port update keeps its VIF")

	// Undeploying detaches every VIF.
	require.Equal(t, 202, e.provision("v1", "active", nil).status)
	e.waitState("v1", "active")
	assert.Len(t, e.do("GET", "/v1/nodes/v1/vifs", latest, nil).json(t)["vifs"], 3)
	require.Equal(t, 202, e.provision("v1", "deleted", nil).status)
	e.waitState("v1", "available")
	assert.Equal(t, []any{}, e.do("GET", "/v1/nodes/v1/vifs", latest, nil).json(t)["vifs"])
}

// TestVIFsConcurrent: VIFs attached at once never share a port; those
// beyond the free ports are refused.
func TestVIFsConcurrent(t *testing.T) { forEachStoreEnv(t, testVIFsConcurrent) }

func testVIFsConcurrent(t *testing.T, e *testEnv) {
	node := e.createNode("vc", nil)["uuid"].(string)
	const ports, vifs = 4, 8
	for i := range ports {
		r := e.do("POST", "/v1/ports", latest, map[string]any{"node_uuid": node, "address": fmt.Sprintf("52:54:00:00:01:%02x", i)})
		require.Equal(t, 201, r.status, string(r.body))
	}
	statuses := make([]int, vifs)
	var wg sync.WaitGroup
	for i := range vifs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			statuses[i] = e.do("POST", "/v1/nodes/vc/vifs", latest, map[string]any{"id": fmt.Sprintf("vif-%d", i)}).status
		}()
	}
	wg.Wait()
	count := map[int]int{}
	for _, s := range statuses {
		count[s]++
	}
	assert.Equal(t, map[int]int{204: ports, 400: vifs - ports}, count)
	seen := map[any]bool{}
	for _, p := range e.do("GET", "/v1/nodes/vc/ports?detail=true", latest, nil).json(t)["ports"].([]any) {
		v := p.(map[string]any)["internal_info"].(map[string]any)["tenant_vif_port_id"]
		require.NotNil(t, v)
		assert.False(t, seen[v], "VIF %v on two ports", v)
		seen[v] = true
	}

	// One VIF attached by several requests at once ends on one port at
	// most, and only a request that answered 204 put it there.
	node2 := e.createNode("vc2", nil)["uuid"].(string)
	for i := range ports {
		r := e.do("POST", "/v1/ports", latest, map[string]any{"node_uuid": node2, "address": fmt.Sprintf("52:54:00:00:02:%02x", i)})
		require.Equal(t, 201, r.status, string(r.body))
	}
	ok := 0
	var mu sync.Mutex
	for range vifs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := e.do("POST", "/v1/nodes/vc2/vifs", latest, map[string]any{"id": "same"})
			mu.Lock()
			defer mu.Unlock()
			if r.status == 204 {
				ok++
			} else {
				assert.Equal(t, 409, r.status, string(r.body))
			}
		}()
	}
	wg.Wait()
	on := 0
	for _, p := range e.do("GET", "/v1/nodes/vc2/ports?detail=true", latest, nil).json(t)["ports"].([]any) {
		if p.(map[string]any)["internal_info"].(map[string]any)["tenant_vif_port_id"] == "same" {
			on++
		}
	}
	assert.LessOrEqual(t, on, 1, "a VIF on two ports")
	assert.Equal(t, ok, on)
}
