package api

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// rbVer is the microversion runbooks appeared in.
const rbVer = "1.92"

func runbookBody(name string, steps ...map[string]any) map[string]any {
	if steps == nil {
		steps = []map[string]any{{"interface": "bios", "step": "apply_configuration",
			"args": map[string]any{"settings": []any{map[string]any{"name": "A", "value": "B"}}}, "order": 1}}
	}
	return map[string]any{"name": name, "steps": steps}
}

func names(t *testing.T, r resp, key string) []any {
	t.Helper()
	require.Equal(t, http.StatusOK, r.status, string(r.body))
	out := []any{}
	for _, x := range r.json(t)[key].([]any) {
		out = append(out, x.(map[string]any)["name"])
	}
	return out
}

func TestRunbookCRUD(t *testing.T) { forEachStoreEnv(t, testRunbookCRUD) }

func testRunbookCRUD(t *testing.T, e *testEnv) {
	r := e.do("POST", "/v1/runbooks", rbVer, map[string]any{"name": "CUSTOM_FIRMWARE", "extra": map[string]any{"k": "v"},
		"disable_ramdisk": true, "public": nil, "owner": nil, "uuid": "1BE26C0B-03F2-4D2E-AE87-C02D7F33C123",
		"steps": []map[string]any{
			{"interface": "bios", "step": "apply_configuration", "args": map[string]any{"settings": []any{}, "password": "s3cret"}, "order": "2"},
			{"interface": "management", "step": "clear_job_queue", "order": 1}}})
	require.Equal(t, http.StatusCreated, r.status, string(r.body))
	created := r.json(t)
	id := created["uuid"].(string)
	assert.Equal(t, "1be26c0b-03f2-4d2e-ae87-c02d7f33c123", id, "the body's UUID, canonical")
	assert.Equal(t, e.srv.URL+"/v1/runbooks/"+id, r.header.Get("Location"))
	assert.Equal(t, []any{
		map[string]any{"interface": "bios", "step": "apply_configuration", "order": float64(2), "args": map[string]any{"settings": []any{}, "password": "******"}},
		map[string]any{"interface": "management", "step": "clear_job_queue", "order": float64(1), "args": map[string]any{}},
	}, created["steps"], "written order kept, string order taken, secrets masked, args defaulted")
	assert.Equal(t, []string{"created_at", "disable_ramdisk", "extra", "links", "name", "owner", "public", "steps", "updated_at", "uuid"}, sortedKeys(created))
	assert.Equal(t, true, created["disable_ramdisk"])
	assert.Equal(t, false, created["public"])
	assert.Nil(t, created["owner"])
	assert.Nil(t, created["updated_at"])

	got := e.do("GET", "/v1/runbooks/CUSTOM_FIRMWARE", rbVer, nil).json(t)
	assert.Equal(t, id, got["uuid"])
	assert.Equal(t, map[string]any{"k": "v"}, got["extra"])
	assert.Equal(t, "CUSTOM_FIRMWARE", e.do("GET", "/v1/runbooks/"+id, rbVer, nil).json(t)["name"])
	only := e.do("GET", "/v1/runbooks/"+id+"?fields=name,public", rbVer, nil).json(t)
	assert.Equal(t, []string{"links", "name", "public"}, sortedKeys(only))

	require.Equal(t, 201, e.do("POST", "/v1/runbooks", rbVer, runbookBody("CUSTOM_B")).status)
	pub := runbookBody("CUSTOM_A")
	pub["public"] = true
	require.Equal(t, 201, e.do("POST", "/v1/runbooks", rbVer, pub).status)
	list := e.do("GET", "/v1/runbooks", rbVer, nil).json(t)["runbooks"].([]any)
	require.Len(t, list, 3)
	assert.Equal(t, []string{"links", "name", "uuid"}, sortedKeys(list[0].(map[string]any)))
	detail := e.do("GET", "/v1/runbooks?detail=true", rbVer, nil).json(t)["runbooks"].([]any)
	assert.Contains(t, detail[0], "steps")
	byName := e.do("GET", "/v1/runbooks?sort_key=name&limit=2", rbVer, nil)
	assert.Equal(t, []any{"CUSTOM_A", "CUSTOM_B"}, names(t, byName, "runbooks"))
	require.Contains(t, byName.json(t), "next")
	next := strings.TrimPrefix(byName.json(t)["next"].(string), e.srv.URL)
	assert.Equal(t, []any{"CUSTOM_FIRMWARE"}, names(t, e.do("GET", next, rbVer, nil), "runbooks"))
	assert.Equal(t, []any{"CUSTOM_A", "CUSTOM_B", "CUSTOM_FIRMWARE"},
		names(t, e.do("GET", "/v1/runbooks?sort_key=public&sort_dir=desc&fields=name", rbVer, nil), "runbooks"), "ties by id, descending")
	assert.Equal(t, []any{"CUSTOM_A"}, names(t, e.do("GET", "/v1/runbooks?project=true&fields=name", rbVer, nil), "runbooks"),
		"a caller without a project sees the public ones")
	assert.Len(t, names(t, e.do("GET", "/v1/runbooks?project=false&fields=name", rbVer, nil), "runbooks"), 3)
	fields := e.do("GET", "/v1/runbooks?fields=uuid,owner", rbVer, nil).json(t)["runbooks"].([]any)
	assert.Equal(t, []string{"links", "owner", "uuid"}, sortedKeys(fields[0].(map[string]any)))

	// PATCH: a name, an order inside the list, a new step (its unknown
	// keys pruned, as Ironic's patched_validate_with_schema does), an owner
	p := e.do("PATCH", "/v1/runbooks/CUSTOM_B", rbVer, []map[string]any{
		{"op": "replace", "path": "/name", "value": "CUSTOM_B2"},
		{"op": "replace", "path": "/steps/0/order", "value": 10},
		{"op": "add", "path": "/steps/-", "value": map[string]any{"interface": "raid", "step": "delete_configuration", "order": 0, "priority": 5}},
		{"op": "add", "path": "/owner", "value": "team-a"},
		{"op": "add", "path": "/extra/x", "value": 1}})
	require.Equal(t, http.StatusOK, p.status, string(p.body))
	pj := p.json(t)
	assert.Equal(t, "CUSTOM_B2", pj["name"])
	assert.Equal(t, "team-a", pj["owner"])
	steps := pj["steps"].([]any)
	require.Len(t, steps, 2)
	assert.Equal(t, float64(10), steps[0].(map[string]any)["order"])
	assert.Equal(t, map[string]any{"interface": "raid", "step": "delete_configuration", "order": float64(0), "args": map[string]any{}}, steps[1])
	assert.NotNil(t, pj["updated_at"])
	// a PATCH takes any URL-safe name (Ironic's RUNBOOK_NAME_SCHEMA)
	p = e.do("PATCH", "/v1/runbooks/CUSTOM_B2", rbVer, []map[string]any{{"op": "replace", "path": "/name", "value": "b2.lower-case"}})
	require.Equal(t, http.StatusOK, p.status, string(p.body))
	// making it public drops the owner; then an owner is refused
	p = e.do("PATCH", "/v1/runbooks/b2.lower-case", rbVer, []map[string]any{{"op": "replace", "path": "/public", "value": true}})
	require.Equal(t, http.StatusOK, p.status, string(p.body))
	assert.Nil(t, p.json(t)["owner"])
	assert.Equal(t, true, p.json(t)["public"])
	p = e.do("PATCH", "/v1/runbooks/b2.lower-case", rbVer, []map[string]any{{"op": "add", "path": "/owner", "value": "team-b"}})
	require.Equal(t, http.StatusBadRequest, p.status)
	assert.Equal(t, "Couldn't apply patch '[{'op': 'add', 'path': '/owner', 'value': 'team-b'}]'. Reason: There cannot be an owner for a public runbook", p.fault(t))
	// ...unless it stops being public in the same patch
	p = e.do("PATCH", "/v1/runbooks/b2.lower-case", rbVer, []map[string]any{{"op": "replace", "path": "/public", "value": false},
		{"op": "add", "path": "/owner", "value": "team-b"}, {"op": "replace", "path": "/disable_ramdisk", "value": true}})
	require.Equal(t, http.StatusOK, p.status, string(p.body))
	assert.Equal(t, "team-b", p.json(t)["owner"])
	assert.Equal(t, true, p.json(t)["disable_ramdisk"])
	p = e.do("PATCH", "/v1/runbooks/b2.lower-case", rbVer, []map[string]any{{"op": "remove", "path": "/owner"}, {"op": "remove", "path": "/steps/1"}})
	require.Equal(t, http.StatusOK, p.status, string(p.body))
	assert.Nil(t, p.json(t)["owner"])
	assert.Len(t, p.json(t)["steps"], 1)

	require.Equal(t, http.StatusNoContent, e.do("DELETE", "/v1/runbooks/b2.lower-case", rbVer, nil).status)
	assert.Equal(t, http.StatusNotFound, e.do("GET", "/v1/runbooks/b2.lower-case", rbVer, nil).status)
	assert.Len(t, e.do("GET", "/v1/", rbVer, nil).json(t)["runbooks"], 2)
	assert.NotContains(t, e.do("GET", "/v1/", "1.91", nil).json(t), "runbooks")
}

func TestRunbookRefusals(t *testing.T) { forEachStoreEnv(t, testRunbookRefusals) }

func testRunbookRefusals(t *testing.T, e *testEnv) {
	require.Equal(t, 201, e.do("POST", "/v1/runbooks", rbVer, runbookBody("CUSTOM_X")).status)
	pub := runbookBody("CUSTOM_PUB")
	pub["public"] = true
	require.Equal(t, 201, e.do("POST", "/v1/runbooks", rbVer, pub).status)
	step := func(k string, v any) map[string]any {
		s := map[string]any{"interface": "deploy", "step": "s", "args": map[string]any{}, "order": 1}
		if v == nil {
			delete(s, k)
		} else {
			s[k] = v
		}
		return s
	}
	with := func(k string, v any) map[string]any {
		b := runbookBody("CUSTOM_Y", step("x", nil))
		b[k] = v
		return b
	}
	const post, rb = "POST", "/v1/runbooks"
	for _, c := range []struct {
		name, method, path, ver string
		body                    any
		status                  int
		msg                     string
	}{
		{"old version GET", "GET", rb, "1.91", nil, 404, "The API version does not allow runbooks"},
		{"old version GET one", "GET", rb + "/CUSTOM_X", "1.91", nil, 404, "The API version does not allow runbooks"},
		{"old version POST", post, rb, "1.91", runbookBody("CUSTOM_Y"), 405, "The API version does not allow runbooks"},
		{"old version PATCH", "PATCH", rb + "/CUSTOM_X", "1.1", []any{}, 405, "The API version does not allow runbooks"},
		{"old version DELETE", "DELETE", rb + "/CUSTOM_X", "1.86", nil, 405, "The API version does not allow runbooks"},
		{"no steps", post, rb, rbVer, map[string]any{"name": "CUSTOM_Y"}, 400, "Schema error for runbook: 'steps' is a required property"},
		{"nothing", post, rb, rbVer, map[string]any{}, 400, "Schema error for runbook: 'steps' is a required property"},
		{"no name", post, rb, rbVer, map[string]any{"steps": []any{}}, 400, "Schema error for runbook: 'name' is a required property"},
		{"empty steps", post, rb, rbVer, runbookBody("CUSTOM_Y", []map[string]any{}...), 400, ""},
		{"steps not a list", post, rb, rbVer, map[string]any{"name": 5, "steps": map[string]any{}}, 400, "Schema error for runbook: {} is not of type 'array'"},
		{"not a trait", post, rb, rbVer, runbookBody("lower"), 400,
			"Schema error for runbook: 'lower' is not valid under any of the given schemas. Possible root cause: 'lower' does not match '^CUSTOM_[A-Z0-9_]+$'"},
		{"empty name", post, rb, rbVer, runbookBody(""), 400, "Schema error for runbook: '' should be non-empty"},
		{"name not a string", post, rb, rbVer, map[string]any{"name": 5, "steps": []any{step("x", nil)}}, 400, "Schema error for runbook: 5 is not of type 'string'"},
		{"unknown keys", post, rb, rbVer, with("foo", 1), 400, "Schema error for runbook: Additional properties are not allowed ('foo' was unexpected)"},
		{"description before 1.112", post, rb, rbVer, with("description", "d"), 400,
			"Schema error for runbook: Additional properties are not allowed ('description' was unexpected)"},
		{"step not an object", post, rb, rbVer, map[string]any{"name": "CUSTOM_Y", "steps": []any{1}}, 400, "Schema error for runbook: 1 is not of type 'object'"},
		{"step without interface", post, rb, rbVer, runbookBody("CUSTOM_Y", step("interface", nil)), 400, "Schema error for runbook: 'interface' is a required property"},
		{"step without order", post, rb, rbVer, runbookBody("CUSTOM_Y", step("order", nil)), 400, "Schema error for runbook: 'order' is a required property"},
		{"step with priority", post, rb, rbVer, runbookBody("CUSTOM_Y", step("priority", 1)), 400,
			"Schema error for runbook: Additional properties are not allowed ('priority' was unexpected)"},
		{"bad interface", post, rb, rbVer, runbookBody("CUSTOM_Y", step("interface", "nope")), 400,
			"Schema error for runbook: 'nope' is not one of ['vendor', 'power', 'management', 'firmware', 'deploy', 'bios', 'raid']"},
		{"empty step", post, rb, rbVer, runbookBody("CUSTOM_Y", step("step", "")), 400, "Schema error for runbook: '' should be non-empty"},
		{"args not an object", post, rb, rbVer, runbookBody("CUSTOM_Y", step("args", []any{})), 400, "Schema error for runbook: [] is not of type 'object'"},
		{"negative order", post, rb, rbVer, runbookBody("CUSTOM_Y", step("order", -1)), 400, "Schema error for runbook: -1 is less than the minimum of 0"},
		{"order not digits", post, rb, rbVer, runbookBody("CUSTOM_Y", step("order", "x")), 400, "Schema error for runbook: 'x' does not match '^[0-9]+$'"},
		{"fractional order", post, rb, rbVer, runbookBody("CUSTOM_Y", step("order", 1.5)), 400,
			"Schema error for runbook: 1.5 is not valid under any of the given schemas. Possible root cause: 1.5 is not of type 'integer'"},
		{"boolean order", post, rb, rbVer, runbookBody("CUSTOM_Y", step("order", true)), 400,
			"Schema error for runbook: True is not valid under any of the given schemas. Possible root cause: True is not of type 'integer'"},
		{"huge order", post, rb, rbVer, runbookBody("CUSTOM_Y", step("order", 1e12)), 400,
			"Schema error for runbook: 1000000000000 is greater than the maximum of 2147483647"},
		{"the deepest error loses", post, rb, rbVer, map[string]any{"name": "lower", "steps": []any{step("order", -1)}}, 400,
			"Schema error for runbook: 'lower' is not valid under any of the given schemas. Possible root cause: 'lower' does not match '^CUSTOM_[A-Z0-9_]+$'"},
		{"the later step wins", post, rb, rbVer, map[string]any{"name": "CUSTOM_Y", "steps": []any{1, map[string]any{"interface": "deploy"}}}, 400,
			"Schema error for runbook: 'step' is a required property"},
		{"the later field wins", post, rb, rbVer, runbookBody("CUSTOM_Y", step("interface", "nope"), step("x", nil)), 400,
			"Schema error for runbook: 'nope' is not one of ['vendor', 'power', 'management', 'firmware', 'deploy', 'bios', 'raid']"},
		{"disable_ramdisk not a boolean", post, rb, rbVer, with("disable_ramdisk", "yes"), 400, "Schema error for runbook: 'yes' is not of type 'boolean', 'null'"},
		{"public not a boolean", post, rb, rbVer, with("public", 1), 400, "Schema error for runbook: 1 is not of type 'boolean', 'null'"},
		{"owner too long", post, rb, rbVer, with("owner", strings.Repeat("o", 256)), 400, "Schema error for runbook: '" + strings.Repeat("o", 256) + "' is too long"},
		{"extra not an object", post, rb, rbVer, with("extra", []any{}), 400, "Schema error for runbook: [] is not of type 'object', 'null'"},
		{"duplicate steps", post, rb, rbVer, runbookBody("CUSTOM_Y", step("x", nil), step("order", 2)), 400,
			"Deploy template invalid: Duplicate deploy steps. A template cannot have multiple deploy steps with the same interface and step. Duplicates: interface: deploy, step: s."},
		{"bad uuid", post, rb, rbVer, with("uuid", "nope"), 400, "Expected UUID for uuid: nope"},
		{"an owner without a project", post, rb, rbVer, with("owner", "team-a"), 400,
			"Cannot create a runbook as a project scoped admin with an owner other than your own project."},
		{"duplicate name", post, rb, rbVer, runbookBody("CUSTOM_X"), 409, "A runbook with name CUSTOM_X already exists."},
		{"unknown", "GET", rb + "/CUSTOM_NOPE", rbVer, nil, 404, "Runbook CUSTOM_NOPE could not be found."},
		{"bad sort key", "GET", rb + "?sort_key=steps", rbVer, nil, 400, "The sort_key value steps is an invalid field for sorting"},
		{"unknown sort key", "GET", rb + "?sort_key=nope", rbVer, nil, 400, `The sort_key value "nope" is an invalid field for sorting`},
		{"detail and fields", "GET", rb + "?detail=true&fields=name", rbVer, nil, 400, "Can not specify ?detail=True and fields in the same request."},
		{"bad field", "GET", rb + "?fields=nope", rbVer, nil, 400, `Field(s) "nope" are not valid`},
		{"bad project", "GET", rb + "?project=maybe", rbVer, nil, 400, `Invalid value for project: "maybe" is not a boolean`},
		{"unknown parameter", "GET", rb + "?owner=x", rbVer, nil, 400, "Unknown argument(s): owner"},
		{"unknown marker", "GET", rb + "?marker=2b4a4f8e-6f53-4b4e-9a55-1f5a3f7c2d10", rbVer, nil, 404,
			"Runbook 2b4a4f8e-6f53-4b4e-9a55-1f5a3f7c2d10 could not be found."},
		{"patch read-only", "PATCH", rb + "/CUSTOM_X", rbVer, []map[string]any{{"op": "replace", "path": "/uuid", "value": "x"}}, 400,
			"Cannot patch /uuid. Only the following can be updated: disable_ramdisk, extra, name, owner, public, steps"},
		{"patch bad name", "PATCH", rb + "/CUSTOM_X", rbVer, []map[string]any{{"op": "replace", "path": "/name", "value": "a b"}}, 400,
			`Schema error for patch: 'a b' does not match '^[A-Za-z0-9\\-._~]+$'`},
		{"patch remove name", "PATCH", rb + "/CUSTOM_X", rbVer, []map[string]any{{"op": "remove", "path": "/name"}}, 400,
			"Schema error for patch: 'name' is a required property"},
		{"patch remove steps", "PATCH", rb + "/CUSTOM_X", rbVer, []map[string]any{{"op": "remove", "path": "/steps/0"}}, 400,
			"Schema error for patch: [] should be non-empty"},
		{"patch bad step", "PATCH", rb + "/CUSTOM_X", rbVer, []map[string]any{{"op": "add", "path": "/steps/-", "value": map[string]any{"step": "s", "order": 1}}}, 400,
			"Schema error for patch: 'interface' is a required property"},
		{"patch step not an object", "PATCH", rb + "/CUSTOM_X", rbVer, []map[string]any{{"op": "add", "path": "/steps/-", "value": 7}}, 400,
			"Schema error for patch: 7 is not of type 'object'"},
		{"patch duplicate step", "PATCH", rb + "/CUSTOM_X", rbVer, []map[string]any{{"op": "add", "path": "/steps/-",
			"value": map[string]any{"interface": "bios", "step": "apply_configuration", "order": 2}}}, 400,
			"Deploy template invalid: Duplicate deploy steps. A template cannot have multiple deploy steps with the same interface and step. Duplicates: interface: bios, step: apply_configuration."},
		{"patch bad index", "PATCH", rb + "/CUSTOM_X", rbVer, []map[string]any{{"op": "replace", "path": "/steps/5/order", "value": 1}}, 400,
			"Couldn't apply patch 'replace /steps/5/order'. Reason: index '5' out of range"},
		{"patch owner of a public one", "PATCH", rb + "/CUSTOM_PUB", rbVer, []map[string]any{{"op": "add", "path": "/owner", "value": "t"}}, 400,
			"Couldn't apply patch '[{'op': 'add', 'path': '/owner', 'value': 't'}]'. Reason: There cannot be an owner for a public runbook"},
		{"patch owner and public", "PATCH", rb + "/CUSTOM_X", rbVer, []map[string]any{{"op": "add", "path": "/public", "value": true},
			{"op": "add", "path": "/owner", "value": "t"}}, 400,
			"Couldn't apply patch '[{'op': 'add', 'path': '/public', 'value': True}, {'op': 'add', 'path': '/owner', 'value': 't'}]'. Reason: There cannot be an owner for a public runbook"},
		{"patch name taken", "PATCH", rb + "/CUSTOM_X", rbVer, []map[string]any{{"op": "replace", "path": "/name", "value": "CUSTOM_PUB"}}, 409,
			"A runbook with name CUSTOM_PUB already exists."},
		{"delete unknown", "DELETE", rb + "/CUSTOM_NOPE", rbVer, nil, 404, "Runbook CUSTOM_NOPE could not be found."},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := e.do(c.method, c.path, c.ver, c.body)
			assert.Equal(t, c.status, r.status, string(r.body))
			if c.msg == "" {
				c.msg = "Schema error for runbook: [] should be non-empty"
			}
			assert.Equal(t, c.msg, r.fault(t))
		})
	}
	// a standard trait is a valid name too (Ironic's TRAITS_SCHEMA)
	assert.Equal(t, 201, e.do("POST", "/v1/runbooks", rbVer, runbookBody("HW_CPU_X86_AVX2")).status)
	assert.Equal(t, []any{"CUSTOM_X", "CUSTOM_PUB", "HW_CPU_X86_AVX2"}, names(t, e.do("GET", "/v1/runbooks?fields=name", rbVer, nil), "runbooks"),
		"no refused write left anything behind")
}

// TestCleanWithRunbook: a manual clean names a runbook instead of its
// steps; the node must carry the runbook's name as a trait, the steps run
// in their order, and the refusals are Ironic's.
func TestCleanWithRunbook(t *testing.T) {
	e, f := newBIOSEnv(t)
	id := e.createNode("rb", map[string]any{"deploy_interface": "fake"})["uuid"].(string)
	require.Equal(t, 202, e.provision("rb", "manage", nil).status)
	e.waitState("rb", "manageable")
	require.Equal(t, 201, e.do("POST", "/v1/runbooks", rbVer, runbookBody("CUSTOM_BIOS_TUNE",
		map[string]any{"interface": "bios", "step": "apply_configuration", "order": 20,
			"args": map[string]any{"settings": []any{map[string]any{"name": "ProcVirtualization", "value": "Disabled"}}}},
		map[string]any{"interface": "bios", "step": "factory_reset", "order": "5"})).status)
	put := func(ver string, body map[string]any) resp {
		return e.do("PUT", "/v1/nodes/rb/states/provision", ver, body)
	}
	clean := map[string]any{"target": "clean", "runbook": "CUSTOM_BIOS_TUNE"}

	for name, c := range map[string]struct {
		ver    string
		body   map[string]any
		status int
		msg    string
	}{
		"below 1.92":    {"1.91", clean, 406, "Request not acceptable."},
		"unknown":       {rbVer, map[string]any{"target": "clean", "runbook": "CUSTOM_NOPE"}, 404, "Runbook CUSTOM_NOPE could not be found."},
		"no trait":      {rbVer, clean, 400, "This runbook has not been approved for use on this node " + id + ". Please ask an administrator to add it to your node traits."},
		"empty runbook": {rbVer, map[string]any{"target": "clean", "runbook": ""}, 400, `"clean_steps" is required when setting target provision state to clean`},
		"not a string":  {rbVer, map[string]any{"target": "clean", "runbook": 5}, 400, ""},
		"unknown by UUID": {rbVer, map[string]any{"target": "clean", "runbook": "2b4a4f8e-6f53-4b4e-9a55-1f5a3f7c2d10"}, 404,
			"Runbook 2b4a4f8e-6f53-4b4e-9a55-1f5a3f7c2d10 could not be found."},
	} {
		t.Run(name, func(t *testing.T) {
			r := put(c.ver, c.body)
			assert.Equal(t, c.status, r.status, string(r.body))
			if c.msg != "" {
				assert.Equal(t, c.msg, r.fault(t))
			}
		})
	}
	require.Equal(t, 204, e.do("PUT", "/v1/nodes/rb/traits/CUSTOM_BIOS_TUNE", latest, nil).status)
	r := put(rbVer, map[string]any{"target": "clean", "runbook": "CUSTOM_BIOS_TUNE",
		"clean_steps": []any{map[string]any{"interface": "bios", "step": "factory_reset"}}})
	require.Equal(t, 400, r.status)
	assert.Equal(t, `Please provide either "clean_steps" or a runbook, but not both.`, r.fault(t))
	r = put(rbVer, map[string]any{"target": "provide", "runbook": "CUSTOM_BIOS_TUNE"})
	require.Equal(t, 400, r.status, "a runbook's disable_ramdisk is the request's, which only a clean takes")
	assert.Equal(t, "manageable", e.do("GET", "/v1/nodes/rb", latest, nil).json(t)["provision_state"], "nothing started")

	rbID := e.do("GET", "/v1/runbooks/CUSTOM_BIOS_TUNE", rbVer, nil).json(t)["uuid"].(string)
	r = put(rbVer, map[string]any{"target": "clean", "runbook": rbID, "clean_steps": []any{}})
	require.Equal(t, 202, r.status, "by UUID; no steps of its own: %s", r.body)
	n := e.waitState("rb", "manageable")
	assert.Nil(t, n["last_error"])
	hist := historyText(e, "rb")
	assert.Contains(t, hist, "manageable -> cleaning (clean requested with runbook CUSTOM_BIOS_TUNE ("+rbID+"))")
	var at []int
	for i, s := range []string{"bios.factory_reset started (1/2)", "bios.apply_configuration started (2/2)"} {
		k := strings.Index(hist, "clean step "+s)
		require.GreaterOrEqual(t, k, 0, "step %d: %s\n%s", i, s, hist)
		at = append(at, k)
	}
	assert.IsIncreasing(t, at, "the steps run by order")
	assert.Equal(t, "Disabled", f.BIOS(id).Current["ProcVirtualization"], "the runbook's arguments reached the step, after the reset")
}

// TestServiceWithRunbook: an active node is serviced by a runbook instead
// of service_steps (1.92 with 1.87). As in Ironic the runbook's
// disable_ramdisk is always given, so below 1.108 it is refused; from
// 1.108 its steps run in order and the node returns to active.
func TestServiceWithRunbook(t *testing.T) {
	e, f := newBIOSEnv(t)
	id := e.createNode("srb", map[string]any{"deploy_interface": "fake"})["uuid"].(string)
	e.makeActive(id)
	require.Equal(t, 201, e.do("POST", "/v1/runbooks", rbVer, runbookBody("CUSTOM_SVC_TUNE",
		map[string]any{"interface": "bios", "step": "apply_configuration", "order": 2,
			"args": map[string]any{"settings": []any{map[string]any{"name": "ProcVirtualization", "value": "Disabled"}}}},
		map[string]any{"interface": "bios", "step": "factory_reset", "order": 1})).status)
	put := func(ver string, body map[string]any) resp {
		return e.do("PUT", "/v1/nodes/srb/states/provision", ver, body)
	}
	svc := map[string]any{"target": "service", "runbook": "CUSTOM_SVC_TUNE"}

	r := put("1.108", svc)
	require.Equal(t, 400, r.status, string(r.body))
	assert.Contains(t, r.fault(t), "This runbook has not been approved for use on this node")
	require.Equal(t, 204, e.do("PUT", "/v1/nodes/srb/traits/CUSTOM_SVC_TUNE", latest, nil).status)
	r = put("1.107", svc)
	require.Equal(t, 406, r.status, string(r.body))
	assert.Equal(t, "disable_ramdisk is not acceptable in this API version", r.fault(t))
	r = put("1.108", map[string]any{"target": "service", "runbook": "CUSTOM_SVC_TUNE",
		"service_steps": []any{map[string]any{"interface": "bios", "step": "factory_reset"}}})
	require.Equal(t, 400, r.status, string(r.body))
	assert.Equal(t, `Please provide either "service_steps" or a runbook, but not both.`, r.fault(t))
	assert.Equal(t, "active", e.do("GET", "/v1/nodes/srb", latest, nil).json(t)["provision_state"], "nothing started")

	r = put("1.108", svc)
	require.Equal(t, 202, r.status, string(r.body))
	n := e.waitState("srb", "active")
	assert.Nil(t, n["last_error"])
	hist := historyText(e, "srb")
	assert.Contains(t, hist, "active -> servicing (service requested with runbook CUSTOM_SVC_TUNE (")
	reset := strings.Index(hist, "service step bios.factory_reset started")
	apply := strings.Index(hist, "service step bios.apply_configuration started")
	require.True(t, reset >= 0 && apply > reset, "the steps run by order:\n%s", hist)
	assert.Equal(t, "Disabled", f.BIOS(id).Current["ProcVirtualization"])
}
