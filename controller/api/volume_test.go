package api

import (
	"context"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/controller/store"
)

func (e *testEnv) setPower(node, power string) {
	e.t.Helper()
	_, err := store.MutateNode(context.Background(), e.st, node, func(n *store.Node) error { n.PowerState = &power; return nil })
	require.NoError(e.t, err)
}

// TestVolumeAsIronic: volume connectors and targets (1.32+): CRUD, lists,
// node-scoped lists, and every refusal as Ironic 21.4 answers it; a node
// with volume targets fails its storage validation (no boot from volume).
func TestVolumeAsIronic(t *testing.T) { forEachStoreEnv(t, testVolumeAsIronic) }

func testVolumeAsIronic(t *testing.T, e *testEnv) {
	node := e.createNode("n1", nil)["uuid"].(string)
	other := e.createNode("n2", nil)["uuid"].(string)
	e.setPower(node, "power off")
	e.setPower(other, "power on")
	missing := "7c1d0a6b-0000-4000-8000-000000000000"

	r := e.do("POST", "/v1/volume/connectors", latest, map[string]any{"node_uuid": node, "type": "iqn", "connector_id": "iqn.2026-11.org.example:n1"})
	require.Equal(t, http.StatusCreated, r.status, string(r.body))
	conn := r.json(t)["uuid"].(string)
	assert.Equal(t, e.srv.URL+"/v1/volume/connectors/"+conn, r.header.Get("Location"))
	r = e.do("POST", "/v1/volume/targets", latest, map[string]any{"node_uuid": node, "volume_type": "iscsi", "volume_id": "vol-0",
		"boot_index": 0, "properties": map[string]any{"target_lun": 0, "auth_password": "s3cret"}})
	require.Equal(t, http.StatusCreated, r.status, string(r.body))
	target := r.json(t)
	tgt := target["uuid"].(string)
	assert.Equal(t, "******", target["properties"].(map[string]any)["auth_password"], "secrets in properties are masked")
	require.Equal(t, http.StatusCreated, e.do("POST", "/v1/volume/targets", latest, map[string]any{"node_uuid": other,
		"volume_type": "iscsi", "volume_id": "vol-1", "boot_index": 0}).status, "a boot index is per node")

	root := e.do("GET", "/v1/volume", latest, nil).json(t)
	assert.Equal(t, e.srv.URL+"/v1/volume/connectors", root["connectors"].([]any)[0].(map[string]any)["href"])
	nroot := e.do("GET", "/v1/nodes/n1/volume", latest, nil).json(t)
	assert.Equal(t, e.srv.URL+"/v1/nodes/"+node+"/volume/targets", nroot["targets"].([]any)[0].(map[string]any)["href"])
	cs := e.do("GET", "/v1/volume/connectors", latest, nil).json(t)["connectors"].([]any)
	require.Len(t, cs, 1)
	assert.Equal(t, []string{"connector_id", "links", "node_uuid", "type", "uuid"}, sortedKeys(cs[0].(map[string]any)))
	assert.Len(t, e.do("GET", "/v1/volume/targets?node=n2", latest, nil).json(t)["targets"].([]any), 1)
	assert.Len(t, e.do("GET", "/v1/nodes/n1/volume/targets", latest, nil).json(t)["targets"].([]any), 1)
	dt := e.do("GET", "/v1/volume/targets?detail=true", latest, nil).json(t)["targets"].([]any)
	assert.Contains(t, dt[0].(map[string]any), "properties")
	assert.Equal(t, []string{"boot_index", "links"}, sortedKeys(e.do("GET", "/v1/volume/targets/"+tgt+"?fields=boot_index", latest, nil).json(t)))

	v := e.do("GET", "/v1/nodes/n1/validate", latest, nil).json(t)["storage"].(map[string]any)
	assert.Equal(t, false, v["result"])
	assert.Contains(t, v["reason"], "anvil does not boot from volumes")

	patch := func(path string, value any) []any {
		return []any{map[string]any{"op": "replace", "path": path, "value": value}}
	}
	e.runWriteCases(t, map[string]writeCase{
		"below 1.32":           {"GET", "/v1/volume/connectors", "1.31", nil, 404, "The resource could not be found."},
		"root below 1.32":      {"GET", "/v1/volume", "1.31", nil, 404, "The resource could not be found."},
		"POST under a node":    {"POST", "/v1/nodes/n1/volume/connectors", latest, map[string]any{}, 403, "Operation not permitted."},
		"GET one under a node": {"GET", "/v1/nodes/n1/volume/targets/" + tgt, latest, nil, 403, "Operation not permitted."},
		"PUT":                  {"PUT", "/v1/volume/targets/" + tgt, latest, map[string]any{}, 405, "The method PUT is not allowed for this resource."},
		"missing type": {"POST", "/v1/volume/connectors", latest, map[string]any{"node_uuid": node, "connector_id": "x"}, 400,
			"Schema error for connector: 'type' is a required property"},
		"unknown type": {"POST", "/v1/volume/connectors", latest, map[string]any{"node_uuid": node, "type": "nvme", "connector_id": "x"}, 400,
			"Invalid input for field/attribute type. Value: 'nvme'. The type must be one of iqn, ip, mac, wwnn, wwpn, port, portgroup."},
		"no such node": {"POST", "/v1/volume/connectors", latest, map[string]any{"node_uuid": missing, "type": "ip", "connector_id": "x"}, 400,
			"Node " + missing + " could not be found."},
		"duplicate connector": {"POST", "/v1/volume/connectors", latest, map[string]any{"node_uuid": other, "type": "iqn", "connector_id": "iqn.2026-11.org.example:n1"}, 409,
			"A volume connector with type iqn and connector ID iqn.2026-11.org.example:n1 already exists."},
		"boot_index not integer": {"POST", "/v1/volume/targets", latest, map[string]any{"node_uuid": node, "volume_type": "iscsi", "volume_id": "v", "boot_index": 1.5}, 400,
			"Schema error for target: 1.5 is not of type 'integer'"},
		"duplicate boot index": {"POST", "/v1/volume/targets", latest, map[string]any{"node_uuid": node, "volume_type": "iscsi", "volume_id": "v", "boot_index": 0}, 409,
			"A volume target with boot index '0' for the same node already exists."},
		"target not found":   {"GET", "/v1/volume/targets/" + missing, latest, nil, 404, "Volume target " + missing + " could not be found."},
		"connector not UUID": {"GET", "/v1/volume/connectors/x", latest, nil, 400, "Expected UUID for connector_uuid: x"},
		"sort by properties": {"GET", "/v1/volume/targets?sort_key=properties", latest, nil, 400,
			"The sort_key value properties is an invalid field for sorting"},
		"fields with detail": {"GET", "/v1/volume/connectors?fields=uuid&detail=true", latest, nil, 400, "Can't fetch a subset of fields with 'detail' set"},
		"patch uuid": {"PATCH", "/v1/volume/connectors/" + conn, latest, patch("/uuid", missing), 400,
			"Cannot patch /uuid. Only the following can be updated: connector_id, extra, node_uuid, type"},
		"patch node not UUID": {"PATCH", "/v1/volume/connectors/" + conn, latest, patch("/node_uuid", "n2"), 400,
			"Expected a UUID for node_uuid, but received n2."},
		"patch onto powered-on node": {"PATCH", "/v1/volume/targets/" + tgt, latest, patch("/node_uuid", other), 400,
			"The requested action \"volume target update\" can not be performed on node \"" + other + "\" while it is in state \"power on\"."},
		"patch ok":   {"PATCH", "/v1/volume/targets/" + tgt, latest, patch("/boot_index", 3), 200, ""},
		"patch type": {"PATCH", "/v1/volume/connectors/" + conn, latest, patch("/type", "wwpn"), 200, ""},
	})
	assert.Equal(t, 3.0, e.do("GET", "/v1/volume/targets/"+tgt, latest, nil).json(t)["boot_index"])

	e.setPower(node, "power on")
	d := e.do("DELETE", "/v1/volume/connectors/"+conn, latest, nil)
	assert.Equal(t, 400, d.status)
	assert.Equal(t, "The requested action \"volume connector deletion\" can not be performed on node \""+node+"\" while it is in state \"power on\".", d.fault(t))
	e.setPower(node, "power off")
	assert.Equal(t, http.StatusNoContent, e.do("DELETE", "/v1/volume/connectors/"+conn, latest, nil).status)
	assert.Equal(t, http.StatusNoContent, e.do("DELETE", "/v1/volume/targets/"+tgt, latest, nil).status)
	v = e.do("GET", "/v1/nodes/n1/validate", latest, nil).json(t)["storage"].(map[string]any)
	assert.Equal(t, true, v["result"], "without targets the node validates")
}
