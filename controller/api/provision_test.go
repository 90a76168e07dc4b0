package api

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestFakeHardwareLifecycle walks every stable state fake-hardware reaches.
func TestFakeHardwareLifecycle(t *testing.T) {
	e := newEnv(t)
	e.createNode("life", nil)
	steps := []struct {
		verb  string
		extra map[string]any
		want  string
	}{
		{"manage", nil, "manageable"},
		{"inspect", nil, "manageable"},
		{"clean", map[string]any{"clean_steps": []map[string]any{{"interface": "bios", "step": "apply_configuration",
			"args": map[string]any{"settings": []any{map[string]any{"name": "LogicalProc", "value": "Enabled"}}}}}}, "manageable"},
		{"provide", nil, "available"},
		{"active", map[string]any{"configdrive": "H4sIAAAAAAACA8sszgcAQX9YYQMAAAA="}, "active"},
		{"rebuild", nil, "active"},
		{"rescue", map[string]any{"rescue_password": "pw"}, "rescue"},
		{"unrescue", nil, "active"},
		{"undeploy", nil, "available"},
		{"manage", nil, "manageable"},
		{"adopt", nil, "active"},
		{"deleted", nil, "available"},
	}
	for _, s := range steps {
		r := e.provision("life", s.verb, s.extra)
		require.Equal(t, http.StatusAccepted, r.status, "%s: %s", s.verb, r.body)
		assert.True(t, strings.HasSuffix(r.header.Get("Location"), "/v1/nodes/life/states"))
		assert.Empty(t, r.body, "202 has an empty body")
		n := e.waitState("life", s.want)
		assert.Nil(t, n["last_error"], s.verb)
		assert.Nil(t, n["target_provision_state"], s.verb)
	}
	n := e.do("GET", "/v1/nodes/life", latest, nil).json(t)
	assert.Equal(t, "power off", n["power_state"], "undeploy powers the node off")
	assert.Equal(t, map[string]any{}, n["clean_step"])
	assert.NotContains(t, n["driver_internal_info"], "clean_steps", "cleaning leaves no leftovers")

	hist := e.do("GET", "/v1/nodes/life/history", latest, nil)
	require.Equal(t, 200, hist.status)
	events := hist.json(t)["history"].([]any)
	require.NotEmpty(t, events)
	var texts []string
	for _, ev := range events {
		texts = append(texts, ev.(map[string]any)["event"].(string))
	}
	joined := strings.Join(texts, "\n")
	assert.Contains(t, joined, "enroll -> verifying (manage requested)")
	assert.Contains(t, joined, "clean step bios.apply_configuration started (1/1)")
	assert.Contains(t, joined, "deploy step deploy.deploy finished")
	assert.Equal(t, 404, e.do("GET", "/v1/nodes/life/history", "1.77", nil).status, "below 1.78 there is no history, as in Ironic")
}

func TestProvisionRefusals(t *testing.T) {
	e := newEnv(t)
	id := e.createNode("ref", nil)["uuid"].(string)
	tests := map[string]struct {
		ver    string
		body   any
		status int
		fault  string
	}{
		"unknown verb":          {latest, map[string]any{"target": "bogus"}, 400, `The requested action "bogus" can not be performed`},
		"wrong state":           {latest, map[string]any{"target": "provide"}, 400, `while it is in state "enroll"`},
		"missing target":        {latest, map[string]any{}, 400, "Missing argument: target"},
		"unknown key":           {latest, map[string]any{"target": "manage", "foo": 1}, 400, "Unexpected arguments: foo"},
		"verb too new":          {"1.72", map[string]any{"target": "deploy"}, 406, "Request not acceptable."},
		"manage before 1.4":     {"1.3", map[string]any{"target": "manage"}, 406, "Request not acceptable."},
		"steps with manage":     {latest, map[string]any{"target": "manage", "clean_steps": []any{}}, 400, "only valid when setting target provision state to clean"},
		"configdrive on manage": {latest, map[string]any{"target": "manage", "configdrive": "x"}, 400, "config drive"},
		"configdrive object before 1.56": {"1.55", map[string]any{"target": "active", "configdrive": map[string]any{"user_data": "x"}}, 400,
			"Providing a JSON object for configdrive is only supported starting with API version 1.56"},
		"configdrive vendor_data before 1.59": {"1.58", map[string]any{"target": "active", "configdrive": map[string]any{"vendor_data": map[string]any{}}}, 400,
			"Providing vendor_data in configdrive is only supported starting with API version 1.59"},
		"configdrive unknown key": {latest, map[string]any{"target": "active", "configdrive": map[string]any{"userdata": "x"}}, 400,
			"Invalid configdrive format: Additional properties are not allowed ('userdata' was unexpected)"},
		"configdrive meta_data not object": {latest, map[string]any{"target": "active", "configdrive": map[string]any{"meta_data": "x"}}, 400,
			"Invalid configdrive format: meta_data must be an object"},
		"configdrive not base64": {latest, map[string]any{"target": "active", "configdrive": "not {base64}"}, 400,
			"Invalid configdrive format: it is neither a JSON, nor a URL, nor a base64 string"},
		"configdrive number":   {latest, map[string]any{"target": "active", "configdrive": 3}, 400, "Invalid configdrive format"},
		"password on manage":   {latest, map[string]any{"target": "manage", "rescue_password": "x"}, 400, "rescue_password"},
		"deploy_steps too new": {"1.68", map[string]any{"target": "active", "deploy_steps": []any{}}, 406, "Request not acceptable."},
		"malformed":            {latest, `{"target":`, 400, "Malformed JSON"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			r := e.do("PUT", "/v1/nodes/"+id+"/states/provision", tc.ver, tc.body)
			require.Equal(t, tc.status, r.status, string(r.body))
			assert.Contains(t, r.fault(t), tc.fault)
		})
	}
	n := e.do("GET", "/v1/nodes/ref", latest, nil).json(t)
	assert.Equal(t, "enroll", n["provision_state"], "refusals change nothing")

	require.Equal(t, 202, e.provision("ref", "manage", nil).status)
	e.waitState("ref", "manageable")
	cleanTests := map[string]struct {
		steps any
		fault string
	}{
		"no steps":        {[]any{}, "clean_steps\" is required"},
		"unknown step":    {[]map[string]any{{"interface": "deploy", "step": "nope"}}, "does not support clean step deploy.nope"},
		"missing arg":     {[]map[string]any{{"interface": "bios", "step": "apply_configuration"}}, "missing required arguments: settings"},
		"unexpected arg":  {[]map[string]any{{"interface": "bios", "step": "factory_reset", "args": map[string]any{"x": 1}}}, "unexpected arguments: x"},
		"bad interface":   {[]map[string]any{{"interface": "console", "step": "update"}}, "interface console is not one of"},
		"extra key":       {[]map[string]any{{"interface": "bios", "step": "factory_reset", "priority": 1}}, "unexpected key"},
		"args not object": {[]map[string]any{{"interface": "bios", "step": "factory_reset", "args": []any{}}}, "args must be an object"},
	}
	for name, tc := range cleanTests {
		t.Run("clean "+name, func(t *testing.T) {
			r := e.provision("ref", "clean", map[string]any{"clean_steps": tc.steps})
			require.Equal(t, 400, r.status, string(r.body))
			assert.Contains(t, r.fault(t), tc.fault)
		})
	}
	assert.Equal(t, "manageable", e.do("GET", "/v1/nodes/ref", latest, nil).json(t)["provision_state"], "bad clean requests are refused before anything happens")

	require.Equal(t, 202, e.do("PUT", "/v1/nodes/ref/maintenance", latest, map[string]any{"reason": "x"}).status)
	r := e.provision("ref", "clean", map[string]any{"clean_steps": []map[string]any{{"interface": "bios", "step": "factory_reset"}}})
	assert.Equal(t, 400, r.status)
	assert.Contains(t, r.fault(t), "maintenance")
	require.Equal(t, 202, e.do("DELETE", "/v1/nodes/ref/maintenance", latest, nil).status)

	require.Equal(t, 202, e.provision("ref", "provide", nil).status)
	e.waitState("ref", "available")
	require.Equal(t, 202, e.do("PUT", "/v1/nodes/ref/maintenance", latest, nil).status)
	r = e.provision("ref", "active", nil)
	assert.Equal(t, 400, r.status)
	assert.Contains(t, r.fault(t), "maintenance mode")
	require.Equal(t, 202, e.do("DELETE", "/v1/nodes/ref/maintenance", latest, nil).status)
	r = e.provision("ref", "active", map[string]any{"deploy_steps": []map[string]any{{"interface": "deploy", "step": "deploy", "args": map[string]any{}}}})
	assert.Equal(t, 400, r.status, "deploy steps need a priority")
	assert.Equal(t, 400, e.provision("ref", "rescue", nil).status, "rescue from available is not a transition")
}

func TestDeployStepsDisableDriverStep(t *testing.T) {
	e := newEnv(t)
	e.createNode("ds", map[string]any{"automated_clean": false})
	require.Equal(t, 202, e.provision("ds", "manage", nil).status)
	e.waitState("ds", "manageable")
	require.Equal(t, 202, e.provision("ds", "provide", nil).status)
	e.waitState("ds", "available")
	r := e.provision("ds", "active", map[string]any{"deploy_steps": []map[string]any{
		{"interface": "deploy", "step": "deploy", "args": map[string]any{}, "priority": "0"}}})
	require.Equal(t, 202, r.status, string(r.body))
	e.waitState("ds", "active")
	hist := string(e.do("GET", "/v1/nodes/ds/history", latest, nil).body)
	assert.NotContains(t, hist, "deploy step deploy.deploy started", "priority 0 disables the step")
	assert.Contains(t, hist, "automated cleaning is disabled")

	r = e.provision("ds", "rebuild", map[string]any{"deploy_steps": []map[string]any{
		{"interface": "deploy", "step": "nope", "args": map[string]any{}, "priority": 10}}})
	require.Equal(t, 202, r.status)
	n := e.waitState("ds", "deploy failed")
	assert.Contains(t, n["last_error"], "does not support deploy step deploy.nope")
}

func TestPowerAndMaintenance(t *testing.T) {
	e := newEnv(t)
	e.createNode("pw", nil)
	power := func(ver string, body any) resp { return e.do("PUT", "/v1/nodes/pw/states/power", ver, body) }
	require.Equal(t, 202, power(latest, map[string]any{"target": "power on"}).status)
	e.waitState("pw", "enroll")
	assert.Equal(t, "power on", e.do("GET", "/v1/nodes/pw/states", latest, nil).json(t)["power_state"])
	require.Equal(t, 202, power(latest, map[string]any{"target": "soft power off", "timeout": 10}).status)
	e.waitState("pw", "enroll")
	st := e.do("GET", "/v1/nodes/pw/states", latest, nil).json(t)
	assert.Equal(t, "power off", st["power_state"])
	assert.Nil(t, st["target_power_state"])
	assert.NotContains(t, st, "links")

	assert.Equal(t, 406, power("1.26", map[string]any{"target": "soft power off"}).status)
	assert.Equal(t, 400, power(latest, map[string]any{"target": "power on", "timeout": 0}).status)
	r := power(latest, map[string]any{"target": "on"})
	assert.Equal(t, 400, r.status)
	assert.Contains(t, r.fault(t), `The requested action "on" can not be performed`)

	require.Equal(t, 202, e.do("PUT", "/v1/nodes/pw/maintenance", latest, map[string]any{"reason": "disk swap"}).status)
	n := e.do("GET", "/v1/nodes/pw", latest, nil).json(t)
	assert.Equal(t, true, n["maintenance"])
	assert.Equal(t, "disk swap", n["maintenance_reason"])
	require.Equal(t, 202, e.do("DELETE", "/v1/nodes/pw/maintenance", latest, nil).status)
	n = e.do("GET", "/v1/nodes/pw", latest, nil).json(t)
	assert.Equal(t, false, n["maintenance"])
	assert.Nil(t, n["maintenance_reason"])
}

func TestValidateTraitsRAIDDrivers(t *testing.T) {
	e := newEnv(t)
	e.createNode("v", nil)
	val := e.do("GET", "/v1/nodes/v/validate", latest, nil).json(t)
	assert.Equal(t, map[string]any{"result": true}, val["power"])
	assert.NotContains(t, e.do("GET", "/v1/nodes/v/validate", "1.85", nil).json(t), "firmware", "the firmware interface came with 1.86")
	assert.Equal(t, map[string]any{"result": true}, e.do("GET", "/v1/nodes/v/validate", "1.86", nil).json(t)["firmware"])

	require.Equal(t, 204, e.do("PUT", "/v1/nodes/v/traits", latest, map[string]any{"traits": []string{"CUSTOM_B", "CUSTOM_A"}}).status)
	require.Equal(t, 204, e.do("PUT", "/v1/nodes/v/traits/CUSTOM_C", latest, nil).status)
	assert.Equal(t, []any{"CUSTOM_A", "CUSTOM_B", "CUSTOM_C"}, e.do("GET", "/v1/nodes/v/traits", latest, nil).json(t)["traits"])
	require.Equal(t, 204, e.do("DELETE", "/v1/nodes/v/traits/CUSTOM_A", latest, nil).status)
	assert.Equal(t, 404, e.do("DELETE", "/v1/nodes/v/traits/CUSTOM_A", latest, nil).status)
	assert.Equal(t, 406, e.do("GET", "/v1/nodes/v/traits", "1.36", nil).status)
	require.Equal(t, 204, e.do("DELETE", "/v1/nodes/v/traits", latest, nil).status)
	assert.Equal(t, []any{}, e.do("GET", "/v1/nodes/v/traits", latest, nil).json(t)["traits"])

	raid := map[string]any{"logical_disks": []any{map[string]any{"size_gb": "MAX", "raid_level": "1", "controller": "software"}}}
	require.Equal(t, 204, e.do("PUT", "/v1/nodes/v/states/raid", latest, raid).status)
	assert.Equal(t, raid, e.do("GET", "/v1/nodes/v", latest, nil).json(t)["target_raid_config"])
	assert.Equal(t, 400, e.do("PUT", "/v1/nodes/v/states/raid", latest, map[string]any{"logical_disks": []any{map[string]any{"size_gb": 10, "raid_level": "7"}}}).status)
	assert.Equal(t, 400, e.do("PUT", "/v1/nodes/v/states/raid", latest, map[string]any{"logical_disks": []any{map[string]any{"raid_level": "1"}}}).status)

	drivers := e.do("GET", "/v1/drivers", latest, nil).json(t)["drivers"].([]any)
	require.Len(t, drivers, 1)
	assert.Equal(t, "fake-hardware", drivers[0].(map[string]any)["name"])
	assert.Equal(t, 200, e.do("GET", "/v1/drivers/fake-hardware", latest, nil).status)
	assert.Equal(t, 404, e.do("GET", "/v1/drivers/ipmi-nope", latest, nil).status)
}

func TestPortsAndPortgroups(t *testing.T) {
	e := newEnv(t)
	n := e.createNode("pn", nil)
	r := e.do("POST", "/v1/ports", latest, map[string]any{"address": "52:54:00:AA:BB:CC", "node_uuid": n["uuid"]})
	require.Equal(t, 201, r.status, string(r.body))
	port := r.json(t)
	assert.Equal(t, "52:54:00:aa:bb:cc", port["address"], "MACs are normalised")

	tests := map[string]struct {
		body   any
		status int
	}{
		"duplicate":    {map[string]any{"address": "52:54:00:aa:bb:cc", "node_uuid": n["uuid"]}, 409},
		"bad mac":      {map[string]any{"address": "zz:zz", "node_uuid": n["uuid"]}, 400},
		"no node":      {map[string]any{"address": "52:54:00:aa:bb:cd"}, 400},
		"unknown node": {map[string]any{"address": "52:54:00:aa:bb:cd", "node_uuid": "nope"}, 400},
		"unknown key":  {map[string]any{"address": "52:54:00:aa:bb:cd", "node_uuid": n["uuid"], "x": 1}, 400},
	}
	for name, tc := range tests {
		r := e.do("POST", "/v1/ports", latest, tc.body)
		assert.Equal(t, tc.status, r.status, name)
		assert.NotEmpty(t, r.fault(t), name)
	}
	list := e.do("GET", "/v1/ports?address=52-54-00-AA-BB-CC", latest, nil).json(t)["ports"].([]any)
	require.Len(t, list, 1)
	assert.Equal(t, port["uuid"], list[0].(map[string]any)["uuid"])
	assert.Len(t, e.do("GET", "/v1/nodes/pn/ports", latest, nil).json(t)["ports"], 1)
	assert.Len(t, e.do("GET", "/v1/ports?node=pn", latest, nil).json(t)["ports"], 1)

	r = e.do("PATCH", "/v1/ports/"+port["uuid"].(string), latest, []map[string]any{{"op": "replace", "path": "/pxe_enabled", "value": false}})
	require.Equal(t, 200, r.status, string(r.body))
	assert.Equal(t, false, r.json(t)["pxe_enabled"])

	r = e.do("POST", "/v1/portgroups", latest, map[string]any{"name": "bond0", "node_uuid": n["uuid"], "address": "52:54:00:00:00:01"})
	require.Equal(t, 201, r.status, string(r.body))
	assert.Equal(t, 200, e.do("GET", "/v1/portgroups/bond0", latest, nil).status)
	assert.Equal(t, 406, e.do("GET", "/v1/portgroups", "1.22", nil).status)
	r = e.do("PATCH", "/v1/portgroups/bond0", latest, []map[string]any{{"op": "replace", "path": "/mode", "value": "802.3ad"},
		{"op": "add", "path": "/properties/miimon", "value": "100"}, {"op": "replace", "path": "/name", "value": "bond1"}})
	require.Equal(t, 200, r.status, string(r.body))
	pgv := r.json(t)
	assert.Equal(t, "802.3ad", pgv["mode"])
	assert.Equal(t, map[string]any{"miimon": "100"}, pgv["properties"])
	assert.Equal(t, 200, e.do("GET", "/v1/portgroups/bond1", latest, nil).status)
	assert.Equal(t, 400, e.do("PATCH", "/v1/portgroups/bond1", latest, []map[string]any{{"op": "replace", "path": "/address", "value": "nope"}}).status)
	assert.Equal(t, 400, e.do("PATCH", "/v1/portgroups/bond1", latest, []map[string]any{{"op": "add", "path": "/uuid", "value": "x"}}).status)

	require.Equal(t, 204, e.do("DELETE", "/v1/ports/"+port["uuid"].(string), latest, nil).status)
	assert.Equal(t, 404, e.do("GET", "/v1/ports/"+port["uuid"].(string), latest, nil).status)
}

// TestManageLeavesFakePowerUnknown: Ironic's verify records what the power
// interface reports, and the fake one reports the node's own (null) state;
// a node powered before manage keeps its state.
func TestManageLeavesFakePowerUnknown(t *testing.T) {
	e := newEnv(t)
	e.createNode("fresh", nil)
	require.Equal(t, 202, e.provision("fresh", "manage", nil).status)
	n := e.waitState("fresh", "manageable")
	assert.Nil(t, n["power_state"])

	e.createNode("powered", nil)
	require.Equal(t, 202, e.do("PUT", "/v1/nodes/powered/states/power", latest, map[string]any{"target": "power on"}).status)
	require.Eventually(t, func() bool {
		return e.do("GET", "/v1/nodes/powered", latest, nil).json(t)["power_state"] == "power on"
	}, 10*time.Second, 10*time.Millisecond)
	require.Equal(t, 202, e.provision("powered", "manage", nil).status)
	assert.Equal(t, "power on", e.waitState("powered", "manageable")["power_state"])
}
