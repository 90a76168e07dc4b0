package api

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestPortNamesAsIronic: a port's name (1.88) is unique, in Ironic's
// words; GET and PATCH find a port by it (at any version, as Ironic's
// Port.get does), DELETE takes only a UUID.
func TestPortNamesAsIronic(t *testing.T) { forEachStoreEnv(t, testPortNamesAsIronic) }

func testPortNamesAsIronic(t *testing.T, e *testEnv) {
	n := e.createNode("pn", nil)["uuid"].(string)
	r := e.do("POST", "/v1/ports", "1.88", map[string]any{"node_uuid": n, "address": "52:54:00:00:01:01", "name": "eth0"})
	require.Equal(t, http.StatusCreated, r.status, string(r.body))
	id := r.json(t)["uuid"].(string)
	e.runWriteCases(t, map[string]writeCase{
		"a duplicate name on create": {"POST", "/v1/ports", "1.88",
			map[string]any{"node_uuid": n, "address": "52:54:00:00:01:02", "name": "eth0"}, 409, "A port with name eth0 already exists."},
		"b second port": {"POST", "/v1/ports", "1.88",
			map[string]any{"node_uuid": n, "address": "52:54:00:00:01:03", "name": "eth1"}, 201, ""},
		"c duplicate name on patch": {"PATCH", "/v1/ports/eth1", "1.88",
			[]map[string]any{{"op": "replace", "path": "/name", "value": "eth0"}}, 409, "A port with name eth0 already exists."},
		"d get by name at 1.1": {"GET", "/v1/ports/eth0", "", nil, 200, ""},
		"e patch by name": {"PATCH", "/v1/ports/eth0", "1.97",
			[]map[string]any{{"op": "add", "path": "/description", "value": "uplink"}}, 200, ""},
		"f neither UUID nor name": {"GET", "/v1/ports/a:b", "1.88", nil, 400, "Expected UUID or name for port_ident: a:b"},
		"g unknown name":          {"GET", "/v1/ports/eth9", "1.88", nil, 404, "Port eth9 could not be found."},
		"h delete by name":        {"DELETE", "/v1/ports/eth0", "1.88", nil, 400, "Expected UUID for port_uuid: eth0"},
		"i too long":              {"POST", "/v1/ports", "1.88", map[string]any{"node_uuid": n, "address": "52:54:00:00:01:04", "name": string(make([]byte, 256))}, 400, ""},
		"j delete by UUID":        {"DELETE", "/v1/ports/" + id, "1.88", nil, 204, ""},
	})
	assert.Equal(t, http.StatusNotFound, e.do("GET", "/v1/ports/eth0", "1.88", nil).status)
}

// TestPortNodeIdent: from 1.94 a port is created with node_ident, the
// node's UUID or name, instead of node_uuid; exactly one of the two.
func TestPortNodeIdent(t *testing.T) {
	e := newEnv(t)
	n := e.createNode("ni", nil)["uuid"].(string)
	e.runWriteCases(t, map[string]writeCase{
		"before 1.94": {"POST", "/v1/ports", "1.93", map[string]any{"node_ident": "ni", "address": "52:54:00:00:02:01"}, 406, "Request not acceptable."},
		"both": {"POST", "/v1/ports", "1.94", map[string]any{"node_ident": "ni", "node_uuid": n, "address": "52:54:00:00:02:01"}, 400,
			"Schema error for port: {'address': '52:54:00:00:02:01', 'node_ident': 'ni', 'node_uuid': '" + n +
				"'} is valid under each of {'required': ['node_ident']}, {'required': ['node_uuid']}"},
		"neither": {"POST", "/v1/ports", "1.94", map[string]any{"address": "52:54:00:00:02:01"}, 400,
			"Schema error for port: {'address': '52:54:00:00:02:01'} is not valid under any of the given schemas"},
		"unknown node": {"POST", "/v1/ports", "1.94", map[string]any{"node_ident": "nope", "address": "52:54:00:00:02:01"}, 400, "Node nope could not be found."},
	})
	r := e.do("POST", "/v1/ports", "1.94", map[string]any{"node_ident": "ni", "address": "52:54:00:00:02:02"})
	require.Equal(t, http.StatusCreated, r.status, string(r.body))
	assert.Equal(t, n, r.json(t)["node_uuid"])
	assert.NotContains(t, r.json(t), "node_ident")
	id := r.json(t)["uuid"].(string)
	r = e.do("PATCH", "/v1/ports/"+id, "1.94", []map[string]any{{"op": "add", "path": "/node_ident", "value": "ni"}})
	require.Equal(t, http.StatusBadRequest, r.status, "a port has no node_ident to patch")
	assert.Contains(t, r.fault(t), "Cannot patch /node_ident.")
}

// TestOVNVTEPConnections: local_link_connection's OVN VTEP keys are taken
// on create from 1.90 to 1.104 only, and shown only there (elsewhere the
// connection shows empty), as Ironic; a PATCH is not checked, as in Ironic.
func TestOVNVTEPConnections(t *testing.T) {
	e := newEnv(t)
	n := e.createNode("vt", nil)["uuid"].(string)
	vtep := map[string]any{"port_id": "p1", "vtep-logical-switch": "ls1", "vtep-physical-switch": "ps1"}
	var id string
	for _, c := range []struct {
		ver    string
		status int
	}{{"1.89", 406}, {"1.90", 201}, {"1.104", 201}, {"1.105", 406}, {"1.110", 406}} {
		r := e.do("POST", "/v1/ports", c.ver, map[string]any{"node_uuid": n, "address": "52:54:00:00:03:" + c.ver[2:4],
			"local_link_connection": vtep})
		require.Equal(t, c.status, r.status, "create at %s: %s", c.ver, r.body)
		if c.status == 201 && id == "" {
			id = r.json(t)["uuid"].(string)
		}
	}
	for ver, shown := range map[string]bool{"1.89": false, "1.90": true, "1.104": true, "1.105": false} {
		got := e.do("GET", "/v1/ports/"+id, ver, nil).json(t)["local_link_connection"]
		if shown {
			assert.Equal(t, vtep, got, ver)
		} else {
			assert.Equal(t, map[string]any{}, got, ver)
		}
	}
	r := e.do("PATCH", "/v1/ports/"+id, "1.110", []map[string]any{{"op": "add", "path": "/local_link_connection/vtep-logical-switch", "value": "ls2"}})
	assert.Equal(t, http.StatusOK, r.status, "Ironic checks no PATCH: %s", r.body)
}

// TestJSONSuffix: below 1.91 (with a version header) a path's ".json"
// suffix is dropped and a lookup that finds nothing tries the name with
// it; from 1.91 it is part of the name, as Ironic's JsonExtensionMiddleware.
func TestJSONSuffix(t *testing.T) {
	e := newEnv(t)
	e.createNode("foo", nil)
	e.createNode("bar.json", nil)
	r := e.do("POST", "/v1/portgroups", latest, map[string]any{"node_uuid": "foo", "name": "pg.json"})
	require.Equal(t, http.StatusCreated, r.status, string(r.body))
	tests := []struct {
		path, ver string
		status    int
		name      string
	}{
		{"/v1/nodes/foo.json", "1.90", 200, "foo"},
		{"/v1/nodes/foo.json/", "1.90", 200, "foo"},
		{"/v1/nodes/foo.json", "1.91", 404, ""},
		{"/v1/nodes/foo.json", "", 404, ""}, // no header, no stripping (Ironic's too)
		{"/v1/nodes/bar.json", "1.91", 200, "bar.json"},
		{"/v1/nodes/bar.json", "1.90", 200, "bar.json"}, // bar is not found: bar.json is
		{"/v1/nodes/foo/states.json", "1.90", 200, ""},
		{"/v1/nodes.json", "1.90", 200, ""},
		{"/v1/nodes.json", "1.91", 404, ""},
		{"/v1/portgroups/pg.json", "1.90", 200, "pg.json"},
		{"/v1/portgroups/pg.json", "1.110", 200, "pg.json"},
	}
	for _, tc := range tests {
		r := e.do("GET", tc.path, tc.ver, nil)
		require.Equal(t, tc.status, r.status, "%s at %q: %s", tc.path, tc.ver, r.body)
		if tc.name != "" {
			assert.Equal(t, tc.name, r.json(t)["name"], tc.path)
		}
	}
	r = e.do("DELETE", "/v1/nodes/bar.json", "1.90", nil)
	assert.Equal(t, http.StatusNoContent, r.status, "a delete finds bar.json too: %s", r.body)
}

// TestPatchEscapesFrom198: from 1.98 a patch path may name keys with '~'
// and '/' as RFC 6901's ~0 and ~1; below, such paths are refused.
func TestPatchEscapesFrom198(t *testing.T) {
	e := newEnv(t)
	e.createNode("esc", nil)
	patch := func(ver, path string) resp {
		return e.do("PATCH", "/v1/nodes/esc", ver, []map[string]any{{"op": "add", "path": path, "value": "v"}})
	}
	for path, key := range map[string]string{"/extra/a~1b": "a/b", "/extra/a~0b": "a~b", "/extra/~0~1~01": "~/~1"} {
		r := patch("1.97", path)
		require.Equal(t, http.StatusBadRequest, r.status, path)
		assert.Equal(t, "Schema error for patch: "+pyRepr(path)+` does not match '^(/[\\w-]+)+$'`, r.fault(t))
		r = patch("1.98", path)
		require.Equal(t, http.StatusOK, r.status, "%s: %s", path, r.body)
		assert.Equal(t, "v", r.json(t)["extra"].(map[string]any)[key], path)
	}
	for _, path := range []string{"/extra/a~2b", "/extra/a~", "/extra/a.b"} {
		assert.Equal(t, http.StatusBadRequest, patch("1.98", path).status, path)
	}
	r := e.do("PATCH", "/v1/nodes/esc", "1.98", []map[string]any{{"op": "remove", "path": "/extra/a~1b"}})
	require.Equal(t, http.StatusOK, r.status, string(r.body))
	assert.NotContains(t, r.json(t)["extra"], "a/b")
}

// TestPortListFilters: shard (1.82) and conductor_groups (1.99) select
// the ports and port groups of nodes in those shards or groups, case-blind,
// with Ironic's exclusions.
func TestPortListFilters(t *testing.T) { forEachStoreEnv(t, testPortListFilters) }

func testPortListFilters(t *testing.T, e *testEnv) {
	a := e.createNode("fa", map[string]any{"shard": "S1", "conductor_group": "g1"})["uuid"].(string)
	b := e.createNode("fb", map[string]any{"shard": "s2", "conductor_group": "g2"})["uuid"].(string)
	for i, n := range []string{a, b} {
		r := e.do("POST", "/v1/ports", latest, map[string]any{"node_uuid": n, "address": []string{"52:54:00:00:04:01", "52:54:00:00:04:02"}[i],
			"description": []string{"first port", "second port"}[i]})
		require.Equal(t, http.StatusCreated, r.status, string(r.body))
		r = e.do("POST", "/v1/portgroups", latest, map[string]any{"node_uuid": n, "name": []string{"pga", "pgb"}[i]})
		require.Equal(t, http.StatusCreated, r.status, string(r.body))
	}
	nodesOf := func(path string) []string {
		r := e.do("GET", path, latest, nil)
		require.Equal(t, http.StatusOK, r.status, string(r.body))
		var out []string
		for _, k := range []string{"ports", "portgroups"} {
			for _, x := range asList(r.json(t)[k]) {
				out = append(out, x.(map[string]any)["node_uuid"].(string))
			}
		}
		return out
	}
	assert.Equal(t, []string{a}, nodesOf("/v1/ports/detail?shard=s1"))
	assert.Equal(t, []string{a, b}, nodesOf("/v1/ports/detail?shard=s1,S2"))
	assert.Equal(t, []string{b}, nodesOf("/v1/ports/detail?conductor_groups=G2"))
	assert.Equal(t, []string{b}, nodesOf("/v1/ports/detail?description_contains=second"))
	assert.Equal(t, []string{a, b}, nodesOf("/v1/ports/detail?shard="), "an empty list filters nothing")
	pga := e.do("GET", "/v1/portgroups/pga", latest, nil).json(t)["uuid"].(string)
	r := e.do("POST", "/v1/ports", latest, map[string]any{"node_uuid": a, "address": "52:54:00:00:04:03", "portgroup_uuid": pga})
	require.Equal(t, http.StatusCreated, r.status, string(r.body))
	assert.Equal(t, []string{a}, nodesOf("/v1/ports/detail?portgroup=pga"), "the group's one port")
	assert.Equal(t, []string{a}, nodesOf("/v1/ports/detail?portgroup="+pga))
	assert.Equal(t, http.StatusNotFound, e.do("GET", "/v1/ports?portgroup=nope", latest, nil).status)
	assert.Equal(t, http.StatusNotAcceptable, e.do("GET", "/v1/ports?portgroup=pga", "1.23", nil).status)
	assert.Equal(t, []string{b}, nodesOf("/v1/portgroups/detail?shard=s2"))
	assert.Equal(t, []string{a}, nodesOf("/v1/portgroups/detail?conductor_groups=g1,g3"))
	e.runWriteCases(t, map[string]writeCase{
		"ports by node and shard": {"GET", "/v1/ports?node=fa&shard=s1", latest, nil, 403, "Operation not permitted."},
		"ports by node and group": {"GET", "/v1/ports?node=fa&portgroup=pga", latest, nil, 403, "Operation not permitted."},
		"ports by groups and address": {"GET", "/v1/ports?address=52:54:00:00:04:01&conductor_groups=g1", latest, nil, 400,
			"Filtering by conductor_groups cannot be combined with node_ident, portgroup_ident, or node address filters."},
		"node's ports by groups": {"GET", "/v1/nodes/fa/ports?conductor_groups=g1", latest, nil, 400,
			"Filtering by conductor_groups cannot be combined with node_ident, portgroup_ident, or node address filters."},
		"port groups by node and shard": {"GET", "/v1/portgroups?node=fa&shard=s1", latest, nil, 400,
			"Filtering by node, address, or shard simultaneously is not supported."},
		"port groups by shard and groups": {"GET", "/v1/portgroups?shard=s1&conductor_groups=g1", latest, nil, 400,
			"Filtering by node, address, or shard simultaneously is not supported."},
	})
}

func asList(v any) []any {
	l, _ := v.([]any)
	return l
}

// TestPortgroupPhysicalNetwork: a port group's physical network (1.102)
// becomes its ports' when patched, and from 1.102 a port in a group
// cannot change its own.
func TestPortgroupPhysicalNetwork(t *testing.T) {
	e := newEnv(t)
	n := e.createNode("pp", nil)["uuid"].(string)
	r := e.do("POST", "/v1/portgroups", latest, map[string]any{"node_uuid": n, "name": "bond0", "physical_network": "net1", "category": "lag"})
	require.Equal(t, http.StatusCreated, r.status, string(r.body))
	pg := r.json(t)["uuid"].(string)
	assert.Equal(t, "lag", r.json(t)["category"])
	r = e.do("POST", "/v1/ports", latest, map[string]any{"node_uuid": n, "address": "52:54:00:00:05:01", "portgroup_uuid": pg})
	require.Equal(t, http.StatusCreated, r.status, string(r.body))
	port := r.json(t)["uuid"].(string)
	r = e.do("POST", "/v1/ports", latest, map[string]any{"node_uuid": n, "address": "52:54:00:00:05:02", "physical_network": "other"})
	require.Equal(t, http.StatusCreated, r.status, string(r.body))
	loose := r.json(t)["uuid"].(string)

	r = e.do("PATCH", "/v1/portgroups/bond0", latest, []map[string]any{{"op": "replace", "path": "/physical_network", "value": "net2"}})
	require.Equal(t, http.StatusOK, r.status, string(r.body))
	assert.Equal(t, "net2", e.do("GET", "/v1/ports/"+port, latest, nil).json(t)["physical_network"], "the group's port follows")
	assert.Equal(t, "other", e.do("GET", "/v1/ports/"+loose, latest, nil).json(t)["physical_network"], "others do not")

	setNet := []map[string]any{{"op": "replace", "path": "/physical_network", "value": "mine"}}
	r = e.do("PATCH", "/v1/ports/"+port, "1.102", setNet)
	require.Equal(t, http.StatusBadRequest, r.status, string(r.body))
	assert.Equal(t, "physical_network cannot be changed while the port belongs to a portgroup.", r.fault(t))
	assert.Equal(t, http.StatusOK, e.do("PATCH", "/v1/ports/"+port, "1.101", setNet).status, "before 1.102 it may")
	assert.Equal(t, http.StatusOK, e.do("PATCH", "/v1/ports/"+loose, "1.102", setNet).status, "a port in no group may")
}

// TestInstanceName: instance_name (1.104) is set by clients, else by a
// PATCH of instance_info's display_name (at any version, as Ironic's
// compatibility with Nova), and selects nodes in lists.
func TestInstanceName(t *testing.T) { forEachStoreEnv(t, testInstanceName) }

func testInstanceName(t *testing.T, e *testEnv) {
	e.createNode("in1", nil)
	e.createNode("in2", map[string]any{"instance_name": "named"})
	setInfo := []map[string]any{{"op": "add", "path": "/instance_info/display_name", "value": "from-nova"}}
	for _, n := range []string{"in1", "in2"} {
		r := e.do("PATCH", "/v1/nodes/"+n, "1.50", setInfo)
		require.Equal(t, http.StatusOK, r.status, string(r.body))
		assert.NotContains(t, r.json(t), "instance_name", "not shown at 1.50")
	}
	assert.Equal(t, "from-nova", e.do("GET", "/v1/nodes/in1", latest, nil).json(t)["instance_name"], "an unnamed instance takes display_name")
	assert.Equal(t, "named", e.do("GET", "/v1/nodes/in2", latest, nil).json(t)["instance_name"], "a named one keeps its name")

	r := e.do("GET", "/v1/nodes?instance_name=named", latest, nil)
	require.Equal(t, http.StatusOK, r.status, string(r.body))
	nodes := asList(r.json(t)["nodes"])
	require.Len(t, nodes, 1)
	assert.Equal(t, "in2", nodes[0].(map[string]any)["name"])

	r = e.do("PATCH", "/v1/nodes/in2", latest, []map[string]any{{"op": "replace", "path": "/instance_name", "value": ""}})
	assert.Equal(t, http.StatusBadRequest, r.status, "an empty name is refused (minLength 1)")
	r = e.do("PATCH", "/v1/nodes/in2", latest, []map[string]any{{"op": "remove", "path": "/instance_name"}})
	require.Equal(t, http.StatusOK, r.status, string(r.body))
	assert.Nil(t, r.json(t)["instance_name"])
}

// TestRequestIDHeaders: every answer names its request in both
// OpenStack-Request-Id and X-OpenStack-Request-Id (1.107), the same id,
// at every version and outside /v1.
func TestRequestIDHeaders(t *testing.T) {
	e := newEnv(t)
	for _, c := range []struct{ path, ver string }{{"/v1/nodes", ""}, {"/v1/nodes", "1.106"}, {"/v1/nodes", "1.107"},
		{"/v1/nodes/missing", latest}, {"/", ""}} {
		r := e.do("GET", c.path, c.ver, nil)
		id := r.header.Get("X-OpenStack-Request-Id")
		assert.Regexp(t, `^req-[0-9a-f-]{36}$`, id, c.path)
		assert.Equal(t, id, r.header.Get("OpenStack-Request-Id"), c.path)
	}
	assert.Empty(t, globalRequestID(&http.Request{Header: http.Header{"X-Openstack-Request-Id": {"not-an-id"}}}))
	gid := "req-0a1b2c3d-0000-4000-8000-000000000001"
	assert.Equal(t, gid, globalRequestID(&http.Request{Header: http.Header{"X-Openstack-Request-Id": {gid}}}))
}

// TestNoopVIFsWithoutPorts: a noop-network node with no ports takes a VIF
// as Ironic's noop interface does (openstacksdk's functional test does
// this): attached, listed nowhere, detached without complaint.
func TestNoopVIFsWithoutPorts(t *testing.T) {
	e := newEnv(t)
	e.createNode("nv", map[string]any{"network_interface": "noop"})
	vif := "200712fc-fdfb-47da-89a6-2d19f76c7618"
	r := e.do("POST", "/v1/nodes/nv/vifs", latest, map[string]any{"id": vif})
	require.Equal(t, http.StatusNoContent, r.status, string(r.body))
	r = e.do("GET", "/v1/nodes/nv/vifs", latest, nil)
	require.Equal(t, http.StatusOK, r.status)
	assert.Equal(t, map[string]any{"vifs": []any{}}, r.json(t))
	assert.Equal(t, http.StatusNoContent, e.do("DELETE", "/v1/nodes/nv/vifs/"+vif, latest, nil).status)

	// with a port, anvil records the VIF on it, as before
	r = e.do("POST", "/v1/ports", latest, map[string]any{"node_uuid": "nv", "address": "52:54:00:00:06:01"})
	require.Equal(t, http.StatusCreated, r.status, string(r.body))
	require.Equal(t, http.StatusNoContent, e.do("POST", "/v1/nodes/nv/vifs", latest, map[string]any{"id": vif}).status)
	assert.Equal(t, map[string]any{"vifs": []any{map[string]any{"id": vif}}}, e.do("GET", "/v1/nodes/nv/vifs", latest, nil).json(t))
	r = e.do("POST", "/v1/nodes/nv/vifs", latest, map[string]any{"id": "other"})
	assert.Equal(t, http.StatusBadRequest, r.status, "no free port: %s", r.body)
}

// FuzzPatchEscapes feeds arbitrary patch bodies to the 1.98 decoder and
// the applier: a client error or a clean application, never a panic, and
// a path's keys unescape to what RFC 6901 says.
func FuzzPatchEscapes(f *testing.F) {
	for _, seed := range []string{
		`[{"op":"add","path":"/extra/a~1b","value":1}]`,
		`[{"op":"add","path":"/extra/~0~1","value":1}]`,
		`[{"op":"remove","path":"/extra/a~01"}]`,
		`[{"op":"add","path":"/extra/a~2","value":1}]`,
		`[{"op":"add","path":"/extra/a~","value":1}]`,
		`[{"op":"replace","path":"/ex~1tra","value":{}}]`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		ops, err := decodePatchAt(body, true)
		if err != nil {
			assertClientError(t, err)
			return
		}
		for _, op := range ops {
			for _, k := range patchTokens(op.Path) {
				if k == "" {
					t.Fatalf("empty key from %q", op.Path)
				}
			}
		}
		doc := map[string]any{"extra": map[string]any{"a/b": 1.0, "a~1": 2.0}, "name": "n"}
		if err := applyPatch(doc, ops); err != nil {
			assertClientError(t, err)
		}
	})
}

// TestInstanceNameGoesWithTheInstance: tearing an instance down clears
// its name with instance_info, as Ironic's do_node_tear_down does.
func TestInstanceNameGoesWithTheInstance(t *testing.T) {
	e := newEnv(t)
	e.createNode("ig", map[string]any{"automated_clean": false})
	require.Equal(t, 202, e.provision("ig", "manage", nil).status)
	e.waitState("ig", "manageable")
	require.Equal(t, 202, e.provision("ig", "provide", nil).status)
	e.waitState("ig", "available")
	require.Equal(t, 202, e.provision("ig", "active", nil).status)
	e.waitState("ig", "active")
	r := e.do("PATCH", "/v1/nodes/ig", latest, []map[string]any{{"op": "add", "path": "/instance_name", "value": "web-1"}})
	require.Equal(t, http.StatusOK, r.status, string(r.body))
	require.Equal(t, 202, e.provision("ig", "deleted", nil).status)
	n := e.waitState("ig", "available")
	assert.Nil(t, n["instance_name"])
	assert.Equal(t, map[string]any{}, n["instance_info"])
}
