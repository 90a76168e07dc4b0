package api

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// writeCase is one request against a resource and what Ironic answers.
type writeCase struct {
	method, path, ver string
	body              any
	status            int
	msg               string // the faultstring, for refusals
}

// runWriteCases runs the cases in name order (later ones may see what
// earlier ones changed).
func (e *testEnv) runWriteCases(t *testing.T, cases map[string]writeCase) {
	t.Helper()
	for _, name := range sortedKeys(cases) {
		tc := cases[name]
		t.Run(name, func(t *testing.T) {
			r := e.do(tc.method, tc.path, tc.ver, tc.body)
			require.Equal(t, tc.status, r.status, string(r.body))
			if tc.msg != "" {
				assert.Equal(t, tc.msg, r.fault(t))
			}
		})
	}
}

// TestPortWritesAsIronic: the port's schema, read-only fields and
// references refuse as Ironic 21.4 does, on POST and PATCH.
func TestPortWritesAsIronic(t *testing.T) { forEachStoreEnv(t, testPortWritesAsIronic) }

func testPortWritesAsIronic(t *testing.T, e *testEnv) {
	n := e.createNode("n1", nil)
	nodeUUID := n["uuid"].(string)
	r := e.do("POST", "/v1/ports", latest, map[string]any{"address": "52:54:00:00:00:01", "node_uuid": nodeUUID})
	require.Equal(t, http.StatusCreated, r.status, string(r.body))
	port := "/v1/ports/" + r.json(t)["uuid"].(string)
	missing := "7c1d0a6b-0000-4000-8000-000000000000"
	e.runWriteCases(t, map[string]writeCase{
		"no address": {"POST", "/v1/ports", latest, map[string]any{"node_uuid": nodeUUID}, 400,
			"Schema error for port: 'address' is a required property"},
		"unknown field": {"POST", "/v1/ports", latest, map[string]any{"address": "52:54:00:00:00:02", "node_uuid": nodeUUID, "zz": 1, "aa": 2}, 400,
			"Schema error for port: Additional properties are not allowed ('aa', 'zz' were unexpected)"},
		"bad MAC": {"POST", "/v1/ports", latest, map[string]any{"address": "nope", "node_uuid": nodeUUID}, 400,
			"Expected valid MAC address for address: nope"},
		"node by name (anvil's extension)": {"POST", "/v1/ports", latest, map[string]any{"address": "52:54:00:00:00:03", "node_uuid": "n1"}, 201, ""},
		"portgroup not UUID": {"POST", "/v1/ports", latest, map[string]any{"address": "52:54:00:00:00:02", "node_uuid": nodeUUID, "portgroup_uuid": "x"}, 400,
			"Expected UUID for portgroup_uuid: x"},
		"no such node": {"POST", "/v1/ports", latest, map[string]any{"address": "52:54:00:00:00:02", "node_uuid": missing}, 400,
			"Node " + missing + " could not be found."},
		"pxe_enabled number": {"POST", "/v1/ports", latest, map[string]any{"address": "52:54:00:00:00:02", "node_uuid": nodeUUID, "pxe_enabled": 3}, 400,
			"Schema error for port: 3 is not of type 'string', 'boolean', 'null'"},
		"pxe_enabled word": {"POST", "/v1/ports", latest, map[string]any{"address": "52:54:00:00:00:02", "node_uuid": nodeUUID, "pxe_enabled": "maybe"}, 400,
			"Invalid pxe_enabled: Unrecognized value 'maybe', acceptable values are: '0', '1', 'f', 'false', 'n', 'no', 'off', 'on', 't', 'true', 'y', 'yes'"},
		"physical_network too long": {"POST", "/v1/ports", latest, map[string]any{"address": "52:54:00:00:00:02", "node_uuid": nodeUUID,
			"physical_network": "0123456789012345678901234567890123456789012345678901234567890123456789"}, 400,
			"Schema error for port: '0123456789012345678901234567890123456789012345678901234567890123456789' is too long"},
		"field above version": {"POST", "/v1/ports", "1.18", map[string]any{"address": "52:54:00:00:00:02", "node_uuid": nodeUUID, "pxe_enabled": true}, 406,
			"Request not acceptable."},
		"duplicate MAC": {"POST", "/v1/ports", latest, map[string]any{"address": "52:54:00:00:00:01", "node_uuid": nodeUUID}, 409,
			"A port with MAC address 52:54:00:00:00:01 already exists."},
		"patch read-only uuid": {"PATCH", port, latest, []any{map[string]any{"op": "replace", "path": "/uuid", "value": missing}}, 400,
			"Cannot patch /uuid. Only the following can be updated: address, extra, is_smartnic, local_link_connection, node_ident, node_uuid, physical_network, portgroup_uuid, pxe_enabled, name, description, vendor, category"},
		"patch remove required": {"PATCH", port, latest, []any{map[string]any{"op": "remove", "path": "/address"}}, 400,
			"Schema error for patch: None is not of type 'string'"},
		"patch wrong type": {"PATCH", port, latest, []any{map[string]any{"op": "replace", "path": "/extra", "value": "x"}}, 400,
			"Schema error for patch: 'x' is not of type 'object', 'null'"},
		"patch missing portgroup": {"PATCH", port, latest, []any{map[string]any{"op": "add", "path": "/portgroup_uuid", "value": missing}}, 400,
			"Portgroup " + missing + " could not be found."},
		"patch ok":          {"PATCH", port, latest, []any{map[string]any{"op": "add", "path": "/extra/a", "value": 1}}, 200, ""},
		"patch pxe as word": {"PATCH", port, latest, []any{map[string]any{"op": "replace", "path": "/pxe_enabled", "value": "no"}}, 200, ""},
	})
	got := e.do("GET", port, latest, nil).json(t)
	assert.Equal(t, map[string]any{"a": 1.0}, got["extra"])
	assert.Equal(t, false, got["pxe_enabled"])
}

// TestPortgroupWritesAsIronic: port groups refuse as Ironic 21.4 does.
func TestPortgroupWritesAsIronic(t *testing.T) { forEachStoreEnv(t, testPortgroupWritesAsIronic) }

func testPortgroupWritesAsIronic(t *testing.T, e *testEnv) {
	nodeUUID := e.createNode("n1", nil)["uuid"].(string)
	r := e.do("POST", "/v1/portgroups", latest, map[string]any{"node_uuid": nodeUUID, "name": "bond0", "address": "52:54:00:00:00:11"})
	require.Equal(t, http.StatusCreated, r.status, string(r.body))
	pgUUID := r.json(t)["uuid"].(string)
	pg := "/v1/portgroups/" + pgUUID
	e.runWriteCases(t, map[string]writeCase{
		"no node": {"POST", "/v1/portgroups", latest, map[string]any{"name": "x"}, 400,
			"Schema error for portgroup: 'node_uuid' is a required property"},
		"invalid name": {"POST", "/v1/portgroups", latest, map[string]any{"node_uuid": nodeUUID, "name": "a b"}, 400,
			"Cannot create portgroup with invalid name 'a b'"},
		"mode before 1.26": {"POST", "/v1/portgroups", "1.25", map[string]any{"node_uuid": nodeUUID, "mode": "802.3ad"}, 406,
			"Request not acceptable."},
		"duplicate name": {"POST", "/v1/portgroups", latest, map[string]any{"node_uuid": nodeUUID, "name": "bond0"}, 409,
			"A portgroup with name bond0 already exists."},
		"patch invalid name": {"PATCH", pg, latest, []any{map[string]any{"op": "replace", "path": "/name", "value": "a b"}}, 400,
			"Portgroup " + pgUUID + ": Cannot change name to invalid name 'a b'"},
		"patch created_at": {"PATCH", pg, latest, []any{map[string]any{"op": "replace", "path": "/created_at", "value": "x"}}, 400,
			"Cannot patch /created_at. Only the following can be updated: address, extra, mode, name, node_uuid, properties, standalone_ports_supported, physical_network, category"},
		"patch mode": {"PATCH", pg, latest, []any{map[string]any{"op": "replace", "path": "/mode", "value": "balance-rr"}}, 200, ""},
	})
	p := e.do("POST", "/v1/ports", latest, map[string]any{"address": "52:54:00:00:00:21", "node_uuid": nodeUUID, "portgroup_uuid": pgUUID})
	require.Equal(t, http.StatusCreated, p.status, string(p.body))
	d := e.do("DELETE", pg, latest, nil)
	assert.Equal(t, 400, d.status)
	assert.Equal(t, "Cannot complete the requested action because portgroup "+pgUUID+" contains ports.", d.fault(t))
}

// TestFieldsOnPortgroupsAndAllocations: fields= selects fields of the
// port group and allocation lists and of a single one, with each field's
// microversion, as Ironic does.
func TestFieldsOnPortgroupsAndAllocations(t *testing.T) {
	forEachStoreEnv(t, testFieldsOnPortgroupsAndAllocations)
}

func testFieldsOnPortgroupsAndAllocations(t *testing.T, e *testEnv) {
	nodeUUID := e.createNode("n1", nil)["uuid"].(string)
	r := e.do("POST", "/v1/portgroups", latest, map[string]any{"node_uuid": nodeUUID, "name": "bond0", "mode": "802.3ad"})
	require.Equal(t, http.StatusCreated, r.status, string(r.body))
	pg := r.json(t)["uuid"].(string)
	r = e.do("POST", "/v1/allocations", latest, map[string]any{"resource_class": "gold", "name": "a1", "owner": "p1"})
	require.Equal(t, http.StatusCreated, r.status, string(r.body))
	alloc := r.json(t)["uuid"].(string)

	keys := func(m map[string]any) []string { return sortedKeys(m) }
	first := func(m map[string]any, list string) map[string]any {
		items := m[list].([]any)
		require.Len(t, items, 1)
		return items[0].(map[string]any)
	}
	assert.Equal(t, []string{"links", "mode", "name"}, keys(e.do("GET", "/v1/portgroups/"+pg+"?fields=name,mode", latest, nil).json(t)))
	assert.Equal(t, []string{"links", "uuid"}, keys(first(e.do("GET", "/v1/portgroups?fields=uuid", latest, nil).json(t), "portgroups")))
	assert.Equal(t, []string{"links", "name", "owner"}, keys(e.do("GET", "/v1/allocations/"+alloc+"?fields=name,owner", latest, nil).json(t)))
	assert.Equal(t, []string{"links", "state"}, keys(first(e.do("GET", "/v1/allocations?fields=state", latest, nil).json(t), "allocations")))

	e.runWriteCases(t, map[string]writeCase{
		"portgroup mode before 1.26": {"GET", "/v1/portgroups/" + pg + "?fields=mode", "1.25", nil, 406, "Request not acceptable."},
		"portgroup unknown field":    {"GET", "/v1/portgroups?fields=nope", latest, nil, 400, `Field(s) "nope" are not valid`},
		"allocation owner at 1.59":   {"GET", "/v1/allocations/" + alloc + "?fields=owner", "1.59", nil, 406, "Request not acceptable."},
		"allocation list owner 1.59": {"GET", "/v1/allocations?fields=uuid,owner", "1.59", nil, 406, "Request not acceptable."},
		"allocation unknown field":   {"GET", "/v1/allocations/" + alloc + "?fields=nope", latest, nil, 400, `Field(s) "nope" are not valid`},
	})
}
