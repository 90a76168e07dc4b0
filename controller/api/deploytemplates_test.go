package api

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/controller/simagent"
	"github.com/anvil-metal/anvil/protocol"
)

func templateBody(name string, steps ...map[string]any) map[string]any {
	if steps == nil {
		steps = []map[string]any{{"interface": "bios", "step": "apply_configuration",
			"args": map[string]any{"settings": []any{map[string]any{"name": "A", "value": "B"}}}, "priority": 150}}
	}
	return map[string]any{"name": name, "steps": steps}
}

func TestDeployTemplateCRUD(t *testing.T) { forEachStoreEnv(t, testDeployTemplateCRUD) }

func testDeployTemplateCRUD(t *testing.T, e *testEnv) {
	r := e.do("POST", "/v1/deploy_templates", latest, map[string]any{"name": "CUSTOM_HYPERTHREADING_ON",
		"extra": map[string]any{"k": "v"}, "description": "ignored by 21.4",
		"steps": []map[string]any{{"interface": "bios", "step": "apply_configuration",
			"args": map[string]any{"settings": []any{}, "password": "s3cret"}, "priority": "150"}}})
	require.Equal(t, http.StatusCreated, r.status, string(r.body))
	created := r.json(t)
	id := created["uuid"].(string)
	assert.Equal(t, e.srv.URL+"/v1/deploy_templates/"+id, r.header.Get("Location"))
	assert.Equal(t, []any{map[string]any{"interface": "bios", "step": "apply_configuration", "priority": float64(150),
		"args": map[string]any{"settings": []any{}, "password": "******"}}}, created["steps"], "string priority taken, secrets masked")
	assert.Nil(t, created["updated_at"])
	assert.NotContains(t, created, "description")

	got := e.do("GET", "/v1/deploy_templates/CUSTOM_HYPERTHREADING_ON", latest, nil).json(t)
	assert.Equal(t, id, got["uuid"])
	assert.Equal(t, map[string]any{"k": "v"}, got["extra"])
	assert.Equal(t, "CUSTOM_HYPERTHREADING_ON", e.do("GET", "/v1/deploy_templates/"+id, latest, nil).json(t)["name"])
	only := e.do("GET", "/v1/deploy_templates/"+id+"?fields=name", latest, nil).json(t)
	assert.Equal(t, []string{"links", "name"}, sortedKeys(only))

	require.Equal(t, 201, e.do("POST", "/v1/deploy_templates", latest, templateBody("CUSTOM_B")).status)
	require.Equal(t, 201, e.do("POST", "/v1/deploy_templates", latest, templateBody("CUSTOM_A")).status)
	list := e.do("GET", "/v1/deploy_templates", latest, nil).json(t)["deploy_templates"].([]any)
	require.Len(t, list, 3)
	assert.Equal(t, []string{"links", "name", "uuid"}, sortedKeys(list[0].(map[string]any)))
	detail := e.do("GET", "/v1/deploy_templates?detail=true", latest, nil).json(t)["deploy_templates"].([]any)
	assert.Contains(t, detail[0], "steps")
	byName := e.do("GET", "/v1/deploy_templates?sort_key=name&limit=2", latest, nil).json(t)
	names := []any{}
	for _, x := range byName["deploy_templates"].([]any) {
		names = append(names, x.(map[string]any)["name"])
	}
	assert.Equal(t, []any{"CUSTOM_A", "CUSTOM_B"}, names)
	require.Contains(t, byName, "next")
	assert.Contains(t, byName["next"], "marker=")
	fields := e.do("GET", "/v1/deploy_templates?fields=uuid,extra", latest, nil).json(t)["deploy_templates"].([]any)
	assert.Equal(t, []string{"extra", "links", "uuid"}, sortedKeys(fields[0].(map[string]any)))

	// PATCH: replace a name, change a step inside the list, add one
	p := e.do("PATCH", "/v1/deploy_templates/CUSTOM_A", latest, []map[string]any{
		{"op": "replace", "path": "/name", "value": "CUSTOM_A2"},
		{"op": "replace", "path": "/steps/0/priority", "value": 10},
		{"op": "add", "path": "/steps/-", "value": map[string]any{"interface": "raid", "step": "delete_configuration", "args": map[string]any{}, "priority": 0}},
		{"op": "add", "path": "/extra/x", "value": 1}})
	require.Equal(t, http.StatusOK, p.status, string(p.body))
	pj := p.json(t)
	assert.Equal(t, "CUSTOM_A2", pj["name"])
	steps := pj["steps"].([]any)
	require.Len(t, steps, 2)
	assert.Equal(t, float64(10), steps[0].(map[string]any)["priority"])
	assert.Equal(t, "delete_configuration", steps[1].(map[string]any)["step"])
	assert.NotNil(t, pj["updated_at"])
	p = e.do("PATCH", "/v1/deploy_templates/CUSTOM_A2", latest, []map[string]any{{"op": "remove", "path": "/steps/1"}})
	require.Equal(t, http.StatusOK, p.status, string(p.body))
	assert.Len(t, p.json(t)["steps"], 1)

	require.Equal(t, http.StatusNoContent, e.do("DELETE", "/v1/deploy_templates/CUSTOM_A2", latest, nil).status)
	assert.Equal(t, http.StatusNotFound, e.do("GET", "/v1/deploy_templates/CUSTOM_A2", latest, nil).status)
	assert.Len(t, e.do("GET", "/v1/", latest, nil).json(t)["deploy_templates"], 2)
	assert.NotContains(t, e.do("GET", "/v1/", "1.54", nil).json(t), "deploy_templates")
}

func TestDeployTemplateRefusals(t *testing.T) { forEachStoreEnv(t, testDeployTemplateRefusals) }

func testDeployTemplateRefusals(t *testing.T, e *testEnv) {
	require.Equal(t, 201, e.do("POST", "/v1/deploy_templates", latest, templateBody("CUSTOM_X")).status)
	step := func(k string, v any) map[string]any {
		s := map[string]any{"interface": "deploy", "step": "s", "args": map[string]any{}, "priority": 1}
		if v == nil {
			delete(s, k)
		} else {
			s[k] = v
		}
		return s
	}
	for _, c := range []struct {
		name, method, path, ver string
		body                    any
		status                  int
		msg                     string
	}{
		{"old version GET", "GET", "/v1/deploy_templates", "1.54", nil, 404, "The API version does not allow deploy templates"},
		{"old version POST", "POST", "/v1/deploy_templates", "1.54", templateBody("CUSTOM_Y"), 405, "The API version does not allow deploy templates"},
		{"not a trait", "POST", "/v1/deploy_templates", latest, templateBody("hyperthreading"), 400,
			"Schema error for template: 'hyperthreading' is not valid under any of the given schemas. Possible root cause: 'hyperthreading' does not match '^CUSTOM_[A-Z0-9_]+$'"},
		{"no steps", "POST", "/v1/deploy_templates", latest, map[string]any{"name": "CUSTOM_Y"}, 400, "Schema error for template: 'steps' is a required property"},
		{"empty steps", "POST", "/v1/deploy_templates", latest, map[string]any{"name": "CUSTOM_Y", "steps": []any{}}, 400, "Schema error for template: [] is too short"},
		{"unknown key", "POST", "/v1/deploy_templates", latest, map[string]any{"name": "CUSTOM_Y", "steps": []any{step("x", nil)}, "foo": 1}, 400,
			"Schema error for template: Additional properties are not allowed ('foo' was unexpected)"},
		{"bad interface", "POST", "/v1/deploy_templates", latest, templateBody("CUSTOM_Y", step("interface", "vendor")), 400,
			"Schema error for template: Invalid deploy step 0: interface vendor is not one of power, management, deploy, firmware, bios, raid"},
		{"negative priority", "POST", "/v1/deploy_templates", latest, templateBody("CUSTOM_Y", step("priority", -1)), 400,
			"Schema error for template: Invalid deploy step 0: priority must be a non-negative integer"},
		{"args missing", "POST", "/v1/deploy_templates", latest, templateBody("CUSTOM_Y", step("args", nil)), 400,
			"Schema error for template: Invalid deploy step 0: args is required"},
		{"args not an object", "POST", "/v1/deploy_templates", latest, templateBody("CUSTOM_Y", step("args", []any{})), 400,
			"Schema error for template: Invalid deploy step 0: args must be an object"},
		{"duplicate steps", "POST", "/v1/deploy_templates", latest, templateBody("CUSTOM_Y", step("x", nil), step("x", nil)), 400,
			"Deploy template invalid: Duplicate deploy steps. A deploy template cannot have multiple deploy steps with the same interface and step. Duplicates: interface: deploy, step: s."},
		{"bad uuid", "POST", "/v1/deploy_templates", latest, map[string]any{"name": "CUSTOM_Y", "steps": []any{step("x", nil)}, "uuid": "nope"}, 400,
			`Expected a UUID for uuid: "nope"`},
		{"duplicate name", "POST", "/v1/deploy_templates", latest, templateBody("CUSTOM_X"), 409, "A deploy template with name CUSTOM_X already exists."},
		{"unknown", "GET", "/v1/deploy_templates/CUSTOM_NOPE", latest, nil, 404, "Deploy template CUSTOM_NOPE could not be found."},
		{"bad sort key", "GET", "/v1/deploy_templates?sort_key=steps", latest, nil, 400, "The sort_key value steps is an invalid field for sorting"},
		{"detail and fields", "GET", "/v1/deploy_templates?detail=true&fields=name", latest, nil, 400, "Can not specify ?detail=True and fields in the same request."},
		{"bad field", "GET", "/v1/deploy_templates?fields=nope", latest, nil, 400, `Field(s) "nope" are not valid`},
		{"unknown marker", "GET", "/v1/deploy_templates?marker=2b4a4f8e-6f53-4b4e-9a55-1f5a3f7c2d10", latest, nil, 404,
			"Deploy template 2b4a4f8e-6f53-4b4e-9a55-1f5a3f7c2d10 could not be found."},
		{"patch read-only", "PATCH", "/v1/deploy_templates/CUSTOM_X", latest, []map[string]any{{"op": "replace", "path": "/uuid", "value": "x"}}, 400,
			"Cannot patch /uuid. Only the following can be updated: extra, name, steps, description"},
		{"patch bad name", "PATCH", "/v1/deploy_templates/CUSTOM_X", latest, []map[string]any{{"op": "replace", "path": "/name", "value": "lower"}}, 400,
			"Schema error for template: 'lower' is not valid under any of the given schemas. Possible root cause: 'lower' does not match '^CUSTOM_[A-Z0-9_]+$'"},
		{"patch remove steps", "PATCH", "/v1/deploy_templates/CUSTOM_X", latest, []map[string]any{{"op": "remove", "path": "/steps/0"}}, 400,
			"Schema error for template: [] is too short"},
		{"patch bad index", "PATCH", "/v1/deploy_templates/CUSTOM_X", latest, []map[string]any{{"op": "replace", "path": "/steps/5/priority", "value": 1}}, 400,
			"Couldn't apply patch 'replace /steps/5/priority'. Reason: index '5' out of range"},
		{"delete unknown", "DELETE", "/v1/deploy_templates/CUSTOM_NOPE", latest, nil, 404, "Deploy template CUSTOM_NOPE could not be found."},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := e.do(c.method, c.path, c.ver, c.body)
			assert.Equal(t, c.status, r.status, string(r.body))
			assert.Equal(t, c.msg, r.fault(t))
		})
	}
	// a standard trait is a valid name too (Ironic's TRAITS_SCHEMA)
	assert.Equal(t, 201, e.do("POST", "/v1/deploy_templates", latest, templateBody("HW_CPU_X86_AVX2")).status)
}

// TestDeployTemplateAddsSteps: a node whose instance traits name a deploy
// template runs the template's steps, ordered by priority with the
// driver's; a user step overrides a template step; a template the
// instance did not ask for adds nothing.
func TestDeployTemplateAddsSteps(t *testing.T) {
	forEachStore(t, func(t *testing.T, kind storeKind) {
		testDeployTemplateAddsSteps(t, newEnvStore(t, kind, agentConfig(), ":memory:"))
	})
}

func testDeployTemplateAddsSteps(t *testing.T, e *testEnv) {
	for _, body := range []map[string]any{
		templateBody("CUSTOM_EXTRAS", map[string]any{"interface": "deploy", "step": "install_extras", "args": map[string]any{"pkg": "tools"}, "priority": 70}),
		templateBody("CUSTOM_UNASKED", map[string]any{"interface": "deploy", "step": "wipe_everything", "args": map[string]any{}, "priority": 90}),
	} {
		require.Equal(t, 201, e.do("POST", "/v1/deploy_templates", latest, body).status)
	}
	e.agentNode("tpl", map[string]any{"instance_info": map[string]any{"image_source": "http://127.0.0.1:8080/img.raw",
		"image_checksum": "sha256:" + strings.Repeat("ab", 32), "traits": []any{"CUSTOM_EXTRAS"}}})
	a := simagent.New(e.srv.URL, mac1)
	extras := simagentStep("deploy", "install_extras")
	extras.ArgsInfo = map[string]protocol.ArgInfo{"pkg": {Description: "what to install"}}
	a.Deploy = append(a.Deploy, extras, simagentStep("deploy", "wipe_everything"))
	require.Equal(t, 202, e.provision("tpl", "provide", nil).status)
	e.drive(a, "tpl", "available", nil)

	// the instance's traits must be the node's (Ironic's validate_instance_info_traits)
	r := e.provision("tpl", "active", nil)
	require.Equal(t, 400, r.status)
	assert.Regexp(t, `^Failed to validate deploy or power info for node [-0-9a-f]+: Cannot specify instance traits that are not also set on the node. Node [-0-9a-f]+ is missing traits CUSTOM_EXTRAS$`, r.fault(t))
	require.Equal(t, 204, e.do("PUT", "/v1/nodes/tpl/traits/CUSTOM_EXTRAS", latest, nil).status)
	require.Equal(t, 204, e.do("PUT", "/v1/nodes/tpl/traits/CUSTOM_UNASKED", latest, nil).status)

	a.Boot()
	require.Equal(t, 202, e.provision("tpl", "active", nil).status)
	e.drive(a, "tpl", "active", nil)
	ran := a.Ran()
	assert.Equal(t, []string{"deploy.write_image", "deploy.install_extras"}, ran[len(ran)-2:])
	assert.NotContains(t, ran, "deploy.wipe_everything", "a template the instance did not ask for")
	cmds := a.Commands()
	assert.Equal(t, map[string]any{"pkg": "tools"}, cmds[len(cmds)-1].Step.Args, "the template's arguments")
	hist := historyText(e, "tpl")
	assert.Less(t, strings.Index(hist, "deploy.install_extras started"), strings.Index(hist, "deploy.prepare_instance_boot started"),
		"template step at priority 70 runs between the driver's 80 and 60")

	// rebuild with a user step that disables the template's
	a.Boot()
	before := len(a.Ran())
	require.Equal(t, 202, e.provision("tpl", "rebuild", map[string]any{"deploy_steps": []map[string]any{
		{"interface": "deploy", "step": "install_extras", "args": map[string]any{}, "priority": 0}}}).status)
	e.drive(a, "tpl", "active", nil)
	assert.NotContains(t, a.Ran()[before:], "deploy.install_extras", "the user's priority 0 wins over the template")

	// two matching templates with one step: the deploy is refused, as in
	// Ironic; so is a template overriding the core step
	require.Equal(t, 201, e.do("POST", "/v1/deploy_templates", latest,
		templateBody("CUSTOM_DUP", map[string]any{"interface": "deploy", "step": "install_extras", "args": map[string]any{}, "priority": 50})).status)
	require.Equal(t, 201, e.do("POST", "/v1/deploy_templates", latest,
		templateBody("CUSTOM_CORE", map[string]any{"interface": "deploy", "step": "deploy", "args": map[string]any{}, "priority": 50})).status)
	for _, c := range []struct {
		traits []any
		msg    string
	}{
		{[]any{"CUSTOM_EXTRAS", "CUSTOM_DUP"}, "Matching deploy templates: CUSTOM_EXTRAS,CUSTOM_DUP. Errors: deploy steps from all deploy templates " +
			"matching this node's instance traits cannot have the same interface and step. Duplicate deploy steps for deploy.install_extras"},
		{[]any{"CUSTOM_CORE"}, "Matching deploy templates: CUSTOM_CORE. Errors: deploy step deploy on interface deploy is a core step " +
			"and cannot be overridden by user steps. It may be disabled by setting the priority to 0"},
	} {
		for _, tr := range c.traits {
			require.Equal(t, 204, e.do("PUT", "/v1/nodes/tpl/traits/"+tr.(string), latest, nil).status)
		}
		require.Equal(t, 200, e.do("PATCH", "/v1/nodes/tpl", latest, []map[string]any{
			{"op": "add", "path": "/instance_info/traits", "value": c.traits}}).status)
		r := e.provision("tpl", "rebuild", nil)
		assert.Equal(t, 400, r.status)
		assert.Regexp(t, `^Failed to validate deploy or power info for node [-0-9a-f]+: Validation of deploy steps from deploy templates `+
			`matching this node's instance traits failed. `, r.fault(t))
		assert.Contains(t, r.fault(t), c.msg)
		assert.Equal(t, "active", e.do("GET", "/v1/nodes/tpl", latest, nil).json(t)["provision_state"], "nothing started")
	}
}
