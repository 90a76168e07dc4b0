package api

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// without returns m less the keys named.
func without(m map[string]any, drop ...string) map[string]any {
	out := map[string]any{}
	for k, v := range m {
		out[k] = v
	}
	for _, k := range drop {
		delete(out, k)
	}
	return out
}

// TestNodeFieldsPerMicroversion: what a node shows and accepts at 1.82
// (as Ironic 21.4), 1.83 (parent_node) and 1.86 (firmware_interface): a
// field newer than the request is absent from the view, refused with 406
// on create and PATCH (null on create is let through, as Ironic's
// reject_fields_in_newer_versions does) and in ?fields=.
func TestNodeFieldsPerMicroversion(t *testing.T) {
	forEachStoreEnv(t, func(t *testing.T, e *testEnv) {
		parent := e.createNode("parent", nil)["uuid"].(string)
		for _, tc := range []struct {
			ver                 string
			parent, firmware    bool // shown and accepted
			firmwareDefaultSeen string
		}{
			{"1.82", false, false, ""},
			{"1.83", true, false, ""},
			{"1.85", true, false, ""},
			{"1.86", true, true, "fake"},
		} {
			t.Run(tc.ver, func(t *testing.T) {
				name := "n-" + tc.ver
				r := e.do("POST", "/v1/nodes", tc.ver, map[string]any{"driver": "fake-hardware", "name": name,
					"parent_node": nil, "firmware_interface": nil})
				require.Equal(t, http.StatusCreated, r.status, "null is no value: %s", r.body)
				n := r.json(t)
				_, hasParent := n["parent_node"]
				_, hasFirmware := n["firmware_interface"]
				assert.Equal(t, tc.parent, hasParent, "parent_node shown")
				assert.Equal(t, tc.firmware, hasFirmware, "firmware_interface shown")
				if tc.firmware {
					assert.Equal(t, tc.firmwareDefaultSeen, n["firmware_interface"])
				}

				for field, value := range map[string]any{"parent_node": parent, "firmware_interface": "no-firmware"} {
					allowed := map[string]bool{"parent_node": tc.parent, "firmware_interface": tc.firmware}[field]
					create := e.do("POST", "/v1/nodes", tc.ver, map[string]any{"driver": "fake-hardware", field: value})
					patch := e.do("PATCH", "/v1/nodes/"+name, tc.ver, []map[string]any{{"op": "add", "path": "/" + field, "value": value}})
					fields := e.do("GET", "/v1/nodes/"+name+"?fields="+field, tc.ver, nil)
					if allowed {
						require.Equal(t, http.StatusCreated, create.status, "%s: %s", field, create.body)
						assert.Equal(t, value, create.json(t)[field])
						require.Equal(t, http.StatusOK, patch.status, "%s: %s", field, patch.body)
						assert.Equal(t, value, patch.json(t)[field])
						require.Equal(t, http.StatusOK, fields.status)
						assert.Equal(t, value, fields.json(t)[field])
						continue
					}
					for what, r := range map[string]resp{"create": create, "patch": patch, "fields": fields} {
						assert.Equal(t, http.StatusNotAcceptable, r.status, "%s %s: %s", what, field, r.body)
						assert.Equal(t, "Request not acceptable.", r.fault(t), "%s %s", what, field)
					}
				}
			})
		}
	})
}

// TestParentNode: parent_node takes a UUID or a name and stores the UUID;
// a node that does not exist, or the node itself, is refused with
// Ironic's 400; null detaches.
func TestParentNode(t *testing.T) {
	forEachStoreEnv(t, func(t *testing.T, e *testEnv) {
		host := e.createNode("host", nil)["uuid"].(string)
		dpu := e.createNode("dpu", map[string]any{"parent_node": "host"})
		assert.Equal(t, host, dpu["parent_node"], "a name is stored as the parent's UUID")
		nic := e.createNode("nic", map[string]any{"parent_node": host})
		assert.Equal(t, host, nic["parent_node"])

		for name, tc := range map[string]struct {
			parent any
			status int
			fault  string
		}{
			"no such name": {"nope", 400, "Unable to apply the requested parent_node 'nope'. Requested value was invalid."},
			"no such UUID": {"4e3c3bd5-7d0e-4f3a-9f7e-2b7a0f0e6a11", 400,
				"Unable to apply the requested parent_node '4e3c3bd5-7d0e-4f3a-9f7e-2b7a0f0e6a11'. Requested value was invalid."},
			"itself":   {"nic", 400, "Unable to apply the requested parent_node 'nic'. Requested value was invalid."},
			"empty":    {"", 400, "Unable to apply the requested parent_node ''. Requested value was invalid."},
			"too long": {"x123456789x123456789x123456789x1234567", 400, "Invalid value for parent_node: longer than 36 characters"},
			"a number": {7, 400, "Invalid value for parent_node: expected a string, got number"},
		} {
			r := e.do("PATCH", "/v1/nodes/nic", latest, []map[string]any{{"op": "replace", "path": "/parent_node", "value": tc.parent}})
			assert.Equal(t, tc.status, r.status, "%s: %s", name, r.body)
			assert.Equal(t, tc.fault, r.fault(t), name)
			if name != "itself" {
				r = e.do("POST", "/v1/nodes", latest, map[string]any{"driver": "fake-hardware", "parent_node": tc.parent})
				assert.Equal(t, tc.status, r.status, "create, %s: %s", name, r.body)
				assert.Equal(t, tc.fault, r.fault(t), "create, %s", name)
			}
		}
		r := e.do("PATCH", "/v1/nodes/nic", latest, []map[string]any{{"op": "replace", "path": "/parent_node", "value": "dpu"}})
		require.Equal(t, http.StatusOK, r.status, string(r.body))
		assert.Equal(t, dpu["uuid"], r.json(t)["parent_node"])
		r = e.do("PATCH", "/v1/nodes/nic", latest, []map[string]any{{"op": "remove", "path": "/parent_node"}})
		require.Equal(t, http.StatusOK, r.status, string(r.body))
		assert.Nil(t, r.json(t)["parent_node"])
	})
}

// TestChildNodeLists: Ironic's lists leave child nodes out unless
// include_children=True or parent_node= is given (at any version: the
// filter is the database's); /children lists a parent's; the list
// arguments need 1.83. Deleting a parent leaves its children with its
// UUID, as Ironic does.
func TestChildNodeLists(t *testing.T) {
	forEachStoreEnv(t, func(t *testing.T, e *testEnv) {
		host := e.createNode("host", nil)["uuid"].(string)
		other := e.createNode("other", nil)["uuid"].(string)
		dpu := e.createNode("dpu", map[string]any{"parent_node": host})["uuid"].(string)
		nic := e.createNode("nic", map[string]any{"parent_node": host})["uuid"].(string)

		names := func(path, ver string) []string {
			r := e.do("GET", path, ver, nil)
			require.Equal(t, http.StatusOK, r.status, "%s: %s", path, r.body)
			var out []string
			for _, n := range r.json(t)["nodes"].([]any) {
				out = append(out, n.(map[string]any)["name"].(string))
			}
			return out
		}
		for _, tc := range []struct {
			path, ver string
			want      []string
		}{
			{"/v1/nodes", "1.82", []string{"host", "other"}},
			{"/v1/nodes", latest, []string{"host", "other"}},
			{"/v1/nodes/detail", latest, []string{"host", "other"}},
			{"/v1/nodes?include_children=True", latest, []string{"host", "other", "dpu", "nic"}},
			{"/v1/nodes?include_children=false", latest, []string{"host", "other"}},
			{"/v1/nodes?parent_node=" + host, latest, []string{"dpu", "nic"}},
			{"/v1/nodes/detail?parent_node=" + host, latest, []string{"dpu", "nic"}},
			{"/v1/nodes?parent_node=" + other, latest, nil},
			{"/v1/nodes?parent_node=host", latest, nil}, // the column holds UUIDs, as Ironic's
			{"/v1/nodes?parent_node=" + host + "&include_children=True", latest, []string{"host", "other", "dpu", "nic"}},
		} {
			assert.Equal(t, tc.want, names(tc.path, tc.ver), "%s at %s", tc.path, tc.ver)
		}
		for _, q := range []string{"include_children=True", "parent_node=" + host} {
			r := e.do("GET", "/v1/nodes?"+q, "1.82", nil)
			assert.Equal(t, http.StatusNotAcceptable, r.status, q)
			assert.Equal(t, "Request not acceptable. The minimal required API version should be 1.83", r.fault(t), q)
		}
		r := e.do("GET", "/v1/nodes?include_children=maybe", latest, nil)
		assert.Equal(t, http.StatusBadRequest, r.status)

		r = e.do("GET", "/v1/nodes/host/children", latest, nil)
		require.Equal(t, http.StatusOK, r.status, string(r.body))
		assert.Equal(t, map[string]any{"children": []any{dpu, nic},
			"links": map[string]any{"href": e.srv.URL + "/v1/nodes?parent_node=" + host, "rel": "children"}}, r.json(t))
		r = e.do("GET", "/v1/nodes/dpu/children", latest, nil)
		require.Equal(t, http.StatusOK, r.status)
		assert.Equal(t, []any{}, r.json(t)["children"])
		assert.Equal(t, http.StatusNotFound, e.do("GET", "/v1/nodes/nope/children", latest, nil).status)
		assert.Equal(t, http.StatusBadRequest, e.do("GET", "/v1/nodes/host/children?limit=1", latest, nil).status)
		assert.Equal(t, http.StatusNotFound, e.do("GET", "/v1/nodes/host/children/"+dpu+"/children", latest, nil).status)

		// the parent deleted: the children keep its UUID and stay out of
		// the default list
		require.Equal(t, http.StatusNoContent, e.do("DELETE", "/v1/nodes/host", latest, nil).status)
		got := e.do("GET", "/v1/nodes/dpu", latest, nil).json(t)
		assert.Equal(t, host, got["parent_node"])
		assert.Equal(t, []string{"other"}, names("/v1/nodes", latest))
		assert.Equal(t, []string{"dpu", "nic"}, names("/v1/nodes?parent_node="+host, latest))
	})
}

// TestFirmwareInterface: each hardware type's firmware interfaces as
// Ironic 23's (redfish: redfish, or no-firmware; ipmi: no-firmware;
// fake-hardware: fake, or no-firmware), in GET /v1/drivers/{name} from
// 1.86, and the default a new node gets.
func TestFirmwareInterface(t *testing.T) {
	forEachStore(t, func(t *testing.T, kind storeKind) {
		e := newDriversEnv(t, kind)
		for _, tc := range []struct {
			driver, def string
			enabled     []any
		}{
			{"redfish", "redfish", []any{"no-firmware", "redfish"}},
			{"ipmi", "no-firmware", []any{"no-firmware"}},
			{"fake-hardware", "fake", []any{"fake", "no-firmware"}},
		} {
			d := e.do("GET", "/v1/drivers/"+tc.driver, latest, nil).json(t)
			assert.Equal(t, tc.def, d["default_firmware_interface"], tc.driver)
			assert.Equal(t, tc.enabled, d["enabled_firmware_interfaces"], tc.driver)
			old := e.do("GET", "/v1/drivers/"+tc.driver, "1.85", nil).json(t)
			assert.NotContains(t, old, "default_firmware_interface", tc.driver)
			assert.NotContains(t, old, "enabled_firmware_interfaces", tc.driver)
			n := e.createNode("fw-"+tc.driver, map[string]any{"driver": tc.driver})
			assert.Equal(t, tc.def, n["firmware_interface"], tc.driver)
		}
		list := e.do("GET", "/v1/drivers?detail=True", latest, nil).json(t)["drivers"].([]any)
		for _, d := range list {
			assert.Contains(t, d, "default_firmware_interface")
		}
		r := e.do("GET", "/v1/drivers/redfish?fields=default_firmware_interface", "1.85", nil)
		assert.Equal(t, http.StatusBadRequest, r.status, "no such field before 1.86")
	})
}

// TestChildNodeInBandStepFails: a step for the child nodes runs out of
// band on each child; one no child's driver offers (an agent step: a child
// has no agent of the parent's operation) fails the parent's clean,
// naming the child, and the child is left as it was.
func TestChildNodeInBandStepFails(t *testing.T) {
	e := newEnv(t)
	e.createNode("host", nil)
	dpu := e.createNode("dpu", map[string]any{"parent_node": "host"})["uuid"].(string)
	require.Equal(t, http.StatusAccepted, e.provision("host", "manage", nil).status)
	e.waitState("host", "manageable")
	r := e.provision("host", "clean", map[string]any{"clean_steps": []any{
		map[string]any{"interface": "deploy", "step": "erase_devices_metadata", "execute_on_child_nodes": true}}})
	require.Equal(t, http.StatusAccepted, r.status, string(r.body))
	n := e.waitState("host", "clean failed")
	assert.Contains(t, n["last_error"], "while executing step deploy.erase_devices_metadata on child node "+dpu+
		", the step is not an out-of-band step of its driver fake-hardware")
	child := e.do("GET", "/v1/nodes/dpu", latest, nil).json(t)
	assert.Equal(t, "enroll", child["provision_state"])
	assert.Nil(t, child["reservation"])
}
