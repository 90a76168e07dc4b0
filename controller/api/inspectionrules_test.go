package api

import (
	"net/http"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const rulesVer = "1.96"

func ruleBody(extra map[string]any) map[string]any {
	b := map[string]any{
		"description": "QEMU machines",
		"priority":    50,
		"conditions": []any{map[string]any{"op": "eq",
			"args": map[string]any{"values": []any{"{inventory[system_vendor][manufacturer]}", "QEMU"}}}},
		"actions": []any{map[string]any{"op": "set-attribute", "args": map[string]any{"path": "/resource_class", "value": "vm"}},
			map[string]any{"op": "add-trait", "args": map[string]any{"name": "CUSTOM_{item}"}, "loop": []any{"VM", "QEMU"}}},
	}
	for k, v := range extra {
		b[k] = v
	}
	return b
}

func TestInspectionRulesCRUD(t *testing.T) { forEachStoreEnv(t, testInspectionRulesCRUD) }

func testInspectionRulesCRUD(t *testing.T, e *testEnv) {
	r := e.do("POST", "/v1/inspection_rules", rulesVer, ruleBody(nil))
	require.Equal(t, http.StatusCreated, r.status, string(r.body))
	created := r.json(t)
	id := created["uuid"].(string)
	assert.Equal(t, e.srv.URL+"/v1/inspection_rules/"+id, r.header.Get("Location"))
	assert.Equal(t, []string{"actions", "conditions", "created_at", "description", "links", "phase", "priority", "sensitive",
		"updated_at", "uuid"}, sortedKeys(created))
	assert.Equal(t, "main", created["phase"])
	assert.Equal(t, false, created["sensitive"])
	assert.Nil(t, created["updated_at"])
	assert.Equal(t, []any{map[string]any{"op": "eq", "args": map[string]any{"values": []any{"{inventory[system_vendor][manufacturer]}", "QEMU"}}}},
		created["conditions"], "no loop: no loop or multiple shown")
	assert.Equal(t, map[string]any{"op": "add-trait", "args": map[string]any{"name": "CUSTOM_{item}"}, "loop": []any{"VM", "QEMU"}},
		created["actions"].([]any)[1])
	assert.Equal(t, []any{map[string]any{"href": e.srv.URL + "/v1/inspection_rules/" + id, "rel": "self"},
		map[string]any{"href": e.srv.URL + "/inspection_rules/" + id, "rel": "bookmark"}}, created["links"])

	got := e.do("GET", "/v1/inspection_rules/"+id, rulesVer, nil).json(t)
	assert.Equal(t, created, got)
	only := e.do("GET", "/v1/inspection_rules/"+id+"?fields=priority", rulesVer, nil).json(t)
	assert.Equal(t, []string{"links", "priority"}, sortedKeys(only))

	// a sensitive rule never shows its conditions and actions
	sid := uuid.NewString()
	r = e.do("POST", "/v1/inspection_rules", rulesVer, ruleBody(map[string]any{"uuid": sid, "sensitive": true, "priority": 90,
		"conditions": []any{map[string]any{"op": "!is-empty", "args": map[string]any{"value": "{inventory[bmc_address]}"}, "loop": []any{1}}},
		"actions":    []any{map[string]any{"op": "set-attribute", "args": map[string]any{"path": "driver_info/ipmi_password", "value": "s3cret"}}}}))
	require.Equal(t, http.StatusCreated, r.status, string(r.body))
	assert.NotContains(t, string(r.body), "s3cret")
	sens := e.do("GET", "/v1/inspection_rules/"+sid, rulesVer, nil)
	assert.NotContains(t, string(sens.body), "s3cret")
	assert.Nil(t, sens.json(t)["actions"])
	assert.Nil(t, sens.json(t)["conditions"])
	detail := e.do("GET", "/v1/inspection_rules?detail=true", rulesVer, nil)
	assert.NotContains(t, string(detail.body), "s3cret")

	list := e.do("GET", "/v1/inspection_rules", rulesVer, nil).json(t)["inspection_rules"].([]any)
	require.Len(t, list, 2)
	assert.Equal(t, []string{"description", "links", "phase", "priority", "uuid"}, sortedKeys(list[0].(map[string]any)))
	byPrio := e.do("GET", "/v1/inspection_rules?sort_key=priority&sort_dir=desc&limit=1", rulesVer, nil).json(t)
	assert.Equal(t, sid, byPrio["inspection_rules"].([]any)[0].(map[string]any)["uuid"])
	assert.Contains(t, byPrio["next"], "/v1/inspection_rules?")
	assert.Len(t, e.do("GET", "/v1/inspection_rules?phase=main", rulesVer, nil).json(t)["inspection_rules"], 2)
	assert.Len(t, e.do("GET", "/v1/inspection_rules?phase=other", rulesVer, nil).json(t)["inspection_rules"], 0)

	// PATCH
	r = e.do("PATCH", "/v1/inspection_rules/"+id, rulesVer, []map[string]any{{"op": "replace", "path": "/priority", "value": 7},
		{"op": "add", "path": "/actions/0/args/value", "value": "vm-large"}})
	require.Equal(t, http.StatusOK, r.status, string(r.body))
	patched := r.json(t)
	assert.Equal(t, float64(7), patched["priority"])
	assert.Equal(t, "vm-large", patched["actions"].([]any)[0].(map[string]any)["args"].(map[string]any)["value"])
	assert.NotNil(t, patched["updated_at"])
	r = e.do("PATCH", "/v1/inspection_rules/"+sid, rulesVer, []map[string]any{{"op": "replace", "path": "/sensitive", "value": false}})
	assert.Equal(t, http.StatusBadRequest, r.status)
	assert.Equal(t, "Couldn't apply patch '[{'op': 'replace', 'path': '/sensitive', 'value': False}]'. Reason: Inspection rules cannot have the sensitive flag unset.", r.fault(t))
	r = e.do("PATCH", "/v1/inspection_rules/"+sid, rulesVer, []map[string]any{{"op": "remove", "path": "/sensitive"}})
	assert.Equal(t, http.StatusBadRequest, r.status)
	r = e.do("PATCH", "/v1/inspection_rules/"+id, rulesVer, []map[string]any{{"op": "replace", "path": "/uuid", "value": uuid.NewString()}})
	assert.Equal(t, "'/uuid' is an internal attribute and can not be updated", r.fault(t))
	r = e.do("PATCH", "/v1/inspection_rules/"+id, rulesVer, []map[string]any{{"op": "replace", "path": "/actions/0/op", "value": "nope"}})
	assert.Equal(t, http.StatusBadRequest, r.status)
	assert.Contains(t, r.fault(t), "Schema error: 'nope' is not one of")
	r = e.do("PATCH", "/v1/inspection_rules/"+id, rulesVer, []map[string]any{{"op": "replace", "path": "/priority", "value": 10000}})
	assert.Equal(t, "Priority must be between 0 and 9999 for user-defined rules.", r.fault(t))

	// create errors
	r = e.do("POST", "/v1/inspection_rules", rulesVer, ruleBody(map[string]any{"uuid": sid}))
	assert.Equal(t, http.StatusConflict, r.status)
	assert.Equal(t, "A rule with UUID "+sid+" already exists.", r.fault(t))
	for body, want := range map[string]string{
		`{"conditions": []}`: "Schema error: 'actions' is a required property",
		`{"actions": [{"op": "fail", "args": {"msg": "m"}}], "priority": -1}`:                             "Schema error: -1 is less than the minimum of 0",
		`{"actions": [{"op": "fail", "args": {}}]}`:                                                       "Invalid parameters for action operator fail: missing required argument(s): msg",
		`{"actions": [{"op": "fail", "args": {"msg": "m"}}], "uuid": "not-a-uuid"}`:                       `Expected a UUID for uuid: "not-a-uuid"`,
		`{"actions": [{"op": "fail", "args": {"msg": "m"}}], "conditions": [{"op": "!!eq", "args": {}}]}`: "Schema error: '!!eq' is not one of",
		`[]`: "Malformed JSON body",
	} {
		r := e.do("POST", "/v1/inspection_rules", rulesVer, body)
		assert.Equal(t, http.StatusBadRequest, r.status, body)
		assert.Contains(t, r.fault(t), want, body)
	}

	// not found, bad UUID
	missing := uuid.NewString()
	r = e.do("GET", "/v1/inspection_rules/"+missing, rulesVer, nil)
	assert.Equal(t, http.StatusNotFound, r.status)
	assert.Equal(t, "Rule "+missing+" could not be found.", r.fault(t))
	assert.Equal(t, http.StatusBadRequest, e.do("GET", "/v1/inspection_rules/nope", rulesVer, nil).status)
	assert.Equal(t, http.StatusBadRequest, e.do("GET", "/v1/inspection_rules?sort_key=actions", rulesVer, nil).status)

	// DELETE
	assert.Equal(t, http.StatusNoContent, e.do("DELETE", "/v1/inspection_rules/"+id, rulesVer, nil).status)
	assert.Equal(t, http.StatusNotFound, e.do("DELETE", "/v1/inspection_rules/"+id, rulesVer, nil).status)
}

func TestInspectionRulesVersionGate(t *testing.T) {
	e := newEnv(t)
	for _, c := range []struct {
		method string
		path   string
		status int
	}{
		{"GET", "/v1/inspection_rules", http.StatusNotFound},
		{"GET", "/v1/inspection_rules/" + uuid.NewString(), http.StatusNotFound},
		{"POST", "/v1/inspection_rules", http.StatusMethodNotAllowed},
		{"PATCH", "/v1/inspection_rules/" + uuid.NewString(), http.StatusMethodNotAllowed},
		{"DELETE", "/v1/inspection_rules/" + uuid.NewString(), http.StatusMethodNotAllowed},
	} {
		r := e.do(c.method, c.path, "1.95", ruleBody(nil))
		assert.Equal(t, c.status, r.status, c.method+" "+c.path)
		assert.Contains(t, string(r.body), "The API version does not allow inspection rules")
	}
	v1 := e.do("GET", "/v1", rulesVer, nil).json(t)
	assert.Contains(t, v1, "inspection_rules")
	assert.NotContains(t, e.do("GET", "/v1", "1.95", nil).json(t), "inspection_rules")
}
