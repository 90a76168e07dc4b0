package inspectrules

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The inventory and node of Ironic's test_inspection_rule.py.
func testSubject() Subject {
	var inv map[string]any
	_ = json.Unmarshal([]byte(`{"cpu": {"count": 4, "architecture": "x86_64"},
		"interfaces": [{"name": "eth0", "mac_address": "2a:03:9c:53:4e:46", "ipv4_address": "192.168.1.13"}],
		"bmc_address": "192.168.1.100", "bmc_password": "hunter2",
		"system_vendor": {"manufacturer": "QEMU", "product_name": "Standard PC", "serial_number": "S123"}}`), &inv)
	return Subject{
		Node: map[string]any{"uuid": "1be26c0b-03f2-4d2e-ae87-c02d7f33c123", "name": "node-1", "driver": "fake-hardware",
			"driver_info": map[string]any{"ipmi_password": "secret"}, "properties": map[string]any{},
			"extra": map[string]any{}, "traits": []any{}, "provision_state": "inspect wait"},
		Ports:      []map[string]any{{"uuid": "5d8f5b5e-6a4b-4f5e-9a36-6f6d1f1b2c3d", "address": "2a:03:9c:53:4e:46", "extra": map[string]any{}}},
		Inventory:  inv,
		PluginData: map[string]any{"plugin": "data", "auth_token": "tok"},
	}
}

func mustParse(t *testing.T, js string) Rule {
	t.Helper()
	var doc map[string]any
	require.NoError(t, json.Unmarshal([]byte(js), &doc))
	r, err := Parse(doc, false)
	require.NoError(t, err)
	if r.UUID == "" {
		r.UUID = "rule-1"
	}
	return *r
}

func runOne(t *testing.T, js string, o Options) (*Result, error) {
	t.Helper()
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return Run(context.Background(), []Rule{mustParse(t, js)}, testSubject(), o)
}

func TestInterpolation(t *testing.T) {
	s := testSubject()
	r := &run{s: s, o: Options{}, rule: &Rule{}}
	item := map[string]any{"key": "value", "nested": map[string]any{"deep": "nested_value"}}
	cases := []struct {
		in     any
		item   any
		inLoop bool
		op     string
		want   any
	}{
		{in: "{inventory[cpu][architecture]}", want: "x86_64"},
		{in: "{inventory[interfaces][0][mac_address]}", want: "2a:03:9c:53:4e:46"},
		{in: "{plugin_data[plugin]}", want: "data"},
		{in: "{node.driver}", want: "fake-hardware"},
		{in: "{item}", item: item, inLoop: true, want: "{'key': 'value', 'nested': {'deep': 'nested_value'}}"},
		{in: "{item[key]}", item: item, inLoop: true, want: "value"},
		{in: "{item[nested][deep]}", item: item, inLoop: true, want: "nested_value"},
		{in: "CPU: {inventory[cpu][count]}, Item: {item[key]}", item: item, inLoop: true, want: "CPU: 4, Item: value"},
		{in: map[string]any{"normal_key": "normal_value", "interpolated_key": "{inventory[cpu][architecture]}",
			"nested": map[string]any{"item_key": "{item[key]}", "inventory_key": "{inventory[bmc_address]}"}},
			item: item, inLoop: true,
			want: map[string]any{"normal_key": "normal_value", "interpolated_key": "x86_64",
				"nested": map[string]any{"item_key": "value", "inventory_key": "192.168.1.100"}}},
		{in: []any{"normal_value", "{inventory[cpu][architecture]}", "{item[key]}",
			[]any{"{inventory[bmc_address]}", "{item[nested][deep]}"}}, item: item, inLoop: true,
			want: []any{"normal_value", "x86_64", "value", []any{"192.168.1.100", "nested_value"}}},
		{in: "{inventory[missing][key]}", want: "{inventory[missing][key]}"},
		{in: "{inventory[i.do.not.exist]}", op: "is-empty", want: nil},
		{in: "{inventory[missing][key]}", op: "eq", want: "{inventory[missing][key]}"},
		// Python's rules: dot on a dict, brackets on the node, stray braces
		{in: "{inventory.bmc_address}", want: "{inventory.bmc_address}"},
		{in: "{node[driver]}", want: "{node[driver]}"},
		{in: "a } b {node.driver}", want: "a } b {node.driver}"},
		{in: "{{literal}} {node.name}", want: "{literal} node-1"},
		{in: "{node.driver!r}", want: "'fake-hardware'"},
		{in: "{}", want: "{}"},
		{in: "{inventory[interfaces][5]}", want: "{inventory[interfaces][5]}"},
		// secrets of the inventory and plugin data are masked
		{in: "{inventory[bmc_password]}", want: "***"},
		{in: "{plugin_data}", want: "{'auth_token': '***', 'plugin': 'data'}"},
		// an item holding a reference is formatted twice, as Ironic does
		{in: "{item}", item: "{inventory[bmc_address]}", inLoop: true, want: "192.168.1.100"},
	}
	for _, c := range cases {
		sc := r.scope(c.item, c.inLoop, false)
		assert.Equal(t, c.want, sc.interpolate(c.in, c.inLoop, c.op), "%v", c.in)
	}
}

func TestMaskModes(t *testing.T) {
	for _, c := range []struct {
		mode      string
		sensitive bool
		want      string
	}{
		{"", false, "***"}, {"always", true, "***"}, {"never", false, "hunter2"},
		{"sensitive", false, "***"}, {"sensitive", true, "hunter2"},
	} {
		r := &run{s: testSubject(), o: Options{MaskSecrets: c.mode}, rule: &Rule{Sensitive: c.sensitive}}
		assert.Equal(t, c.want, r.scope(nil, false, false).interpolate("{inventory[bmc_password]}", false, ""), "%+v", c)
	}
}

func TestOperators(t *testing.T) {
	// Ironic's test_rule_operators (true case, false case) and edge cases.
	cases := []struct {
		op   string
		args map[string]any
		want bool
	}{
		{"eq", map[string]any{"values": []any{5.0, 5.0}}, true},
		{"eq", map[string]any{"values": []any{5.0, 10.0}}, false},
		{"eq", map[string]any{"values": []any{"4", 4.0}}, false},
		{"eq", map[string]any{"values": []any{"4", 4.0}, "force_strings": true}, true},
		{"eq", map[string]any{"values": []any{true, 1.0}}, true},
		{"eq", map[string]any{"values": []any{1.0}}, true},
		{"lt", map[string]any{"values": []any{5.0, 10.0}}, true},
		{"lt", map[string]any{"values": []any{10.0, 5.0}}, false},
		{"lt", map[string]any{"values": []any{"a", "b", "c"}}, true},
		{"gt", map[string]any{"values": []any{10.0, 5.0}}, true},
		{"gt", map[string]any{"values": []any{5.0, 10.0}}, false},
		{"is-empty", map[string]any{"value": ""}, true},
		{"is-empty", map[string]any{"value": nil}, true},
		{"is-empty", map[string]any{"value": []any{}}, true},
		{"is-empty", map[string]any{"value": "not empty"}, false},
		{"in-net", map[string]any{"address": "192.168.1.5", "subnet": "192.168.1.0/24"}, true},
		{"in-net", map[string]any{"address": "10.0.0.1", "subnet": "192.168.1.0/24"}, false},
		{"in-net", map[string]any{"address": "fd00::5", "subnet": "fd00::/64"}, true},
		{"in-net", map[string]any{"address": "192.168.1.5", "subnet": "fd00::/64"}, false},
		{"in-net", map[string]any{"address": "10.1.2.3", "subnet": "10.1.2.3"}, true},
		{"matches", map[string]any{"value": "abc123", "regex": `abc\d+`}, true},
		{"matches", map[string]any{"value": "xyz123", "regex": `abc\d+`}, false},
		{"matches", map[string]any{"value": "abc123x", "regex": `abc\d+`}, false},
		{"matches", map[string]any{"value": "QEMU", "regex": `(?i)qemu`}, true},
		{"contains", map[string]any{"value": "test-abc123-end", "regex": `abc\d+`}, true},
		{"contains", map[string]any{"value": "test-xyz-end", "regex": `abc\d+`}, false},
		{"one-of", map[string]any{"value": "b", "values": []any{"a", "b", "c"}}, true},
		{"one-of", map[string]any{"value": "z", "values": []any{"a", "b", "c"}}, false},
		{"one-of", map[string]any{"value": "test", "values": []any{}}, false},
		{"one-of", map[string]any{"value": nil, "values": []any{"a", "b"}}, false},
		{"one-of", map[string]any{"value": "test"}, false},
		{"is-none", map[string]any{"value": nil}, true},
		{"is-none", map[string]any{"value": "something"}, false},
		{"is-true", map[string]any{"value": true}, true},
		{"is-true", map[string]any{"value": false}, false},
		{"is-true", map[string]any{"value": "yes"}, true},
		{"is-true", map[string]any{"value": "TRUE"}, true},
		{"is-true", map[string]any{"value": "no"}, false},
		{"is-true", map[string]any{"value": 1.0}, true},
		{"is-true", map[string]any{"value": 0.1}, true},
		{"is-true", map[string]any{"value": 0.0}, false},
		{"is-true", map[string]any{"value": nil}, false},
		{"is-true", map[string]any{"value": map[string]any{}}, false},
		{"is-true", map[string]any{"value": []any{}}, false},
		{"is-false", map[string]any{"value": false}, true},
		{"is-false", map[string]any{"value": true}, false},
		{"is-false", map[string]any{"value": "no"}, true},
		{"is-false", map[string]any{"value": "FALSE"}, true},
		{"is-false", map[string]any{"value": "yes"}, false},
		{"is-false", map[string]any{"value": 0.0}, true},
		{"is-false", map[string]any{"value": 1.0}, false},
		{"is-false", map[string]any{"value": nil}, true},
	}
	for _, c := range cases {
		got, err := check(c.op, c.args)
		require.NoError(t, err, "%s %v", c.op, c.args)
		assert.Equal(t, c.want, got, "%s %v", c.op, c.args)
	}
}

func TestOperatorErrors(t *testing.T) {
	for _, c := range []struct {
		op   string
		args map[string]any
		want string
	}{
		{"in-net", map[string]any{"address": "192.168.1.1", "subnet": "invalid-subnet"}, "Inspection rule execution failed. Reason: invalid value"},
		{"in-net", map[string]any{"address": "nope", "subnet": "10.0.0.0/8"}, "failed to detect a valid IP address"},
		{"matches", map[string]any{"value": "test", "regex": "[unclosed"}, "Inspection rule execution failed. Reason: invalid regular expression"},
		{"contains", map[string]any{"value": "test", "regex": "[unclosed"}, "invalid regular expression"},
		{"eq", map[string]any{"values": "not-a-list"}, "Inspection rule condition check failed. Reason: Failed to check condition: 'eq' on values: not-a-list: Expected list for 'values', got: str"},
		{"lt", map[string]any{"values": []any{"a", 1.0}}, "'<' not supported between instances of 'str' and 'int'"},
		{"gt", map[string]any{"values": []any{nil, 1.0}}, "'>' not supported between instances of 'NoneType' and 'int'"},
	} {
		_, err := check(c.op, c.args)
		require.Error(t, err, c.op)
		assert.Contains(t, err.Error(), c.want)
	}
}

func TestLoopsAndMultiple(t *testing.T) {
	// Ironic's test_operator_with_loop.
	conds := map[string]string{
		"eq":       `{"op": "eq", "args": {"values": [1, "{item}"]}, "loop": [1, 2, 3, 4], "multiple": "%s"}`,
		"contains": `{"op": "contains", "args": {"value": "{item}", "regex": "4"}, "loop": ["test4", "value5", "string6"], "multiple": "%s"}`,
		"one-of":   `{"op": "one-of", "args": {"value": "{inventory[cpu][architecture]}", "values": ["{item}"]}, "loop": ["x86_64", "aarch64", "ppc64le"], "multiple": "%s"}`,
	}
	want := map[string]map[string]bool{
		"any":   {"eq": true, "contains": true, "one-of": true},
		"all":   {"eq": false, "contains": false, "one-of": false},
		"first": {"eq": true, "contains": true, "one-of": true},
		"last":  {"eq": false, "contains": false, "one-of": false},
	}
	for multiple, ops := range want {
		for op, w := range ops {
			rule := mustParse(t, `{"actions": [{"op": "add-trait", "args": {"name": "CUSTOM_HIT"}}], "conditions": [`+
				fmt.Sprintf(conds[op], multiple)+`]}`)
			res, err := Run(context.Background(), []Rule{rule}, testSubject(), Options{})
			require.NoError(t, err)
			assert.Equal(t, w, len(res.Matched) == 1, "%s %s", op, multiple)
		}
	}
	// a dict loop runs once with the dict as item
	res, err := runOne(t, `{"conditions": [{"op": "eq", "args": {"values": ["{item[a]}", "x"]}, "loop": {"a": "x"}}],
		"actions": [{"op": "set-attribute", "args": {"path": "{item[path]}", "value": "{item[value]}"},
			"loop": {"path": "driver_info/ipmi_address", "value": "{inventory[bmc_address]}"}}]}`, Options{})
	require.NoError(t, err)
	assert.Equal(t, "192.168.1.100", res.Node["driver_info"].(map[string]any)["ipmi_address"])
}

func TestActions(t *testing.T) {
	s := testSubject()
	di := func(r *Result) map[string]any { return r.Node["driver_info"].(map[string]any) }
	cases := []struct {
		name  string
		rule  string
		check func(t *testing.T, r *Result)
	}{
		{"set-attribute slash and dot", `[{"op": "set-attribute", "args": {"path": "driver_info/new", "value": {"new_key": "test_value"}}},
			{"op": "set-attribute", "args": {"path": "driver_info.next.nested.deeper", "value": {"next_key": "test_value"}}}]`,
			func(t *testing.T, r *Result) {
				assert.Equal(t, map[string]any{"new_key": "test_value"}, di(r)["new"])
				assert.Equal(t, map[string]any{"nested": map[string]any{"deeper": map[string]any{"next_key": "test_value"}}}, di(r)["next"])
			}},
		{"set-attribute top level", `[{"op": "set-attribute", "args": {"path": "/resource_class", "value": "baremetal-{inventory[cpu][count]}cpu"}}]`,
			func(t *testing.T, r *Result) { assert.Equal(t, "baremetal-4cpu", r.Node["resource_class"]) }},
		{"set-attribute list loop", `[{"op": "set-attribute", "args": {"path": "{item[path]}", "value": "{item[value]}"},
			"loop": [{"path": "driver_info/ipmi_username", "value": "cidadmin"}, {"path": "driver_info/ipmi_password", "value": "cidpassword"},
			{"path": "driver_info/ipmi_address", "value": "{inventory[bmc_address]}"}]}]`,
			func(t *testing.T, r *Result) {
				assert.Equal(t, "cidadmin", di(r)["ipmi_username"])
				assert.Equal(t, "cidpassword", di(r)["ipmi_password"])
				assert.Equal(t, "192.168.1.100", di(r)["ipmi_address"])
			}},
		{"extend-attribute", `[{"op": "extend-attribute", "args": {"path": "extra/tags", "value": "a"}},
			{"op": "extend-attribute", "args": {"path": "extra/tags", "value": "a", "unique": true}},
			{"op": "extend-attribute", "args": {"path": "extra/tags", "value": "b"}}]`,
			func(t *testing.T, r *Result) {
				assert.Equal(t, []any{"a", "b"}, r.Node["extra"].(map[string]any)["tags"])
			}},
		{"del-attribute", `[{"op": "set-attribute", "args": {"path": "extra/to_delete", "value": "v"}},
			{"op": "del-attribute", "args": {"path": "extra/to_delete"}}, {"op": "del-attribute", "args": {"path": "extra/gone/deeper"}},
			{"op": "del-attribute", "args": {"path": "driver_info.ipmi_password"}}]`,
			func(t *testing.T, r *Result) {
				assert.Equal(t, map[string]any{}, r.Node["extra"])
				assert.Equal(t, map[string]any{}, di(r))
			}},
		{"traits", `[{"op": "add-trait", "args": {"name": "CUSTOM_AWESOME_TRAIT"}}, {"op": "add-trait", "args": {"name": "CUSTOM_B"}},
			{"op": "add-trait", "args": {"name": "CUSTOM_B"}}, {"op": "remove-trait", "args": {"name": "CUSTOM_AWESOME_TRAIT"}},
			{"op": "remove-trait", "args": {"name": "CUSTOM_NEVER"}}]`,
			func(t *testing.T, r *Result) { assert.Equal(t, []any{"CUSTOM_B"}, r.Node["traits"]) }},
		{"capabilities", `[{"op": "set-capability", "args": {"name": "boot_mode", "value": "bios"}},
			{"op": "set-capability", "args": {"name": "other", "value": "value"}},
			{"op": "set-capability", "args": {"name": "boot_mode", "value": "uefi"}},
			{"op": "unset-capability", "args": {"name": "other"}}]`,
			func(t *testing.T, r *Result) {
				assert.Equal(t, "boot_mode:uefi", r.Node["properties"].(map[string]any)["capabilities"])
			}},
		{"plugin data", `[{"op": "set-plugin-data", "args": {"path": "test_key", "value": "test_value"}},
			{"op": "set-plugin-data", "args": {"path": "a.b", "value": 1}},
			{"op": "extend-plugin-data", "args": {"path": "test_list", "value": "item1"}},
			{"op": "extend-plugin-data", "args": {"path": "test_list", "value": "item2"}},
			{"op": "extend-plugin-data", "args": {"path": "test_list", "value": "item2", "unique": true}},
			{"op": "unset-plugin-data", "args": {"path": "plugin"}},
			{"op": "unset-plugin-data", "args": {"path": "a.b"}},
			{"op": "unset-plugin-data", "args": {"path": "never.there"}}]`,
			func(t *testing.T, r *Result) {
				assert.Equal(t, map[string]any{"test_key": "test_value", "test_list": []any{"item1", "item2"}, "auth_token": "tok"}, r.PluginData)
			}},
		{"port attributes by uuid and MAC", `[{"op": "set-port-attribute", "args": {"port_id": "5d8f5b5e-6a4b-4f5e-9a36-6f6d1f1b2c3d", "path": "extra/role", "value": "pxe"}},
			{"op": "set-port-attribute", "args": {"port_id": "{item[mac_address]}", "path": "local_link_connection", "value": {"switch_id": "aa:bb:cc:dd:ee:ff", "port_id": "Eth1/1"}},
				"loop": [{"mac_address": "{inventory[interfaces][0][mac_address]}"}]},
			{"op": "extend-port-attribute", "args": {"port_id": "2A:03:9C:53:4E:46", "path": "extra/tags", "value": "new_tag"}},
			{"op": "del-port-attribute", "args": {"port_id": "2a:03:9c:53:4e:46", "path": "extra/role"}}]`,
			func(t *testing.T, r *Result) {
				p := r.Ports[0]
				assert.Equal(t, map[string]any{"tags": []any{"new_tag"}}, p["extra"])
				assert.Equal(t, "Eth1/1", p["local_link_connection"].(map[string]any)["port_id"])
				assert.Equal(t, []string{"5d8f5b5e-6a4b-4f5e-9a36-6f6d1f1b2c3d"}, r.PortsChanged)
			}},
		{"log", `[{"op": "log", "args": {"msg": "node {node.name}", "level": "warning"}}]`,
			func(t *testing.T, r *Result) { assert.Empty(t, r.Changes); assert.False(t, r.Manage) }},
		{"anvil-manage", `[{"op": "anvil-manage", "args": {}}]`,
			func(t *testing.T, r *Result) {
				assert.True(t, r.Manage)
				assert.Equal(t, []string{"rule rule-1: anvil-manage (manage requested)"}, r.Changes)
			}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			res, err := runOne(t, `{"actions": `+c.rule+`}`, Options{})
			require.NoError(t, err)
			c.check(t, res)
		})
	}
	// the subject itself is never changed
	_, err := runOne(t, `{"actions": [{"op": "set-attribute", "args": {"path": "driver_info/x", "value": 1}}]}`, Options{})
	require.NoError(t, err)
	assert.Equal(t, s, testSubject())
}

func TestActionErrors(t *testing.T) {
	for _, c := range []struct{ rule, want string }{
		{`{"op": "set-attribute", "args": {"path": "driver.some_key", "value": "test"}}`,
			"Failed to set attribute driver.some_key with value test: 'str' object has no attribute 'setdefault'"},
		{`{"op": "extend-attribute", "args": {"path": "driver", "value": "new_item"}}`,
			"Failed to extend attribute driver: Cannot extend non-list attribute driver"},
		{`{"op": "set-port-attribute", "args": {"port_id": "nope", "path": "extra", "value": "test"}}`, "Port nope could not be found."},
		{`{"op": "log", "args": {"msg": "m", "level": "invalid_level"}}`, "Invalid log level: invalid_level"},
		// fail's msg is not formatted, as in Ironic
		{`{"op": "fail", "args": {"msg": "no BMC on {node.name}"}}`, "Failed to inspect hardware. Reason: no BMC on {node.name}"},
		// fields that only the conductor writes
		{`{"op": "set-attribute", "args": {"path": "provision_state", "value": "active"}}`, "'provision_state' cannot be changed by an inspection rule"},
		{`{"op": "set-attribute", "args": {"path": "uuid", "value": "x"}}`, "'uuid' cannot be changed"},
		{`{"op": "set-attribute", "args": {"path": "driver_internal_info/x", "value": "x"}}`, "'driver_internal_info' cannot be changed"},
		{`{"op": "del-attribute", "args": {"path": "traits"}}`, "'traits' cannot be changed"},
		{`{"op": "set-port-attribute", "args": {"port_id": "2a:03:9c:53:4e:46", "path": "address", "value": "x"}}`, "'address' cannot be changed"},
		{`{"op": "add-trait", "args": {"name": "lower"}}`, "Failed to add new trait lower"},
		{`{"op": "set-capability", "args": {"name": "n", "value": 5}}`, "expected str instance, int found"},
	} {
		_, err := runOne(t, `{"uuid": "r1", "actions": [`+c.rule+`]}`, Options{})
		var ee *ExecError
		require.ErrorAs(t, err, &ee, c.rule)
		assert.Equal(t, "r1", ee.Rule)
		assert.Contains(t, ee.Msg, c.want)
	}
}

func TestCheckCallbackAndNoPartialApply(t *testing.T) {
	subj := testSubject()
	rules := []Rule{
		mustParse(t, `{"uuid": "first", "priority": 50, "actions": [{"op": "set-attribute", "args": {"path": "resource_class", "value": "gold"}}]}`),
		mustParse(t, `{"uuid": "second", "priority": 10, "actions": [{"op": "set-attribute", "args": {"path": "driver", "value": "nosuch"}}]}`),
	}
	o := Options{CheckNode: func(f string, v any) error {
		if f == "driver" && v != "ipmi" {
			return errorf("driver %v is not available", v)
		}
		return nil
	}}
	_, err := Run(context.Background(), rules, subj, o)
	var ee *ExecError
	require.ErrorAs(t, err, &ee)
	assert.Equal(t, "second", ee.Rule)
	assert.Contains(t, ee.Msg, "driver nosuch is not available")
	assert.Nil(t, subj.Node["resource_class"], "nothing applied")
}

func TestPriorityOrder(t *testing.T) {
	rules := []Rule{
		mustParse(t, `{"uuid": "low", "priority": 1, "actions": [{"op": "set-attribute", "args": {"path": "extra/who", "value": "low"}}]}`),
		mustParse(t, `{"uuid": "high", "priority": 90, "actions": [{"op": "set-attribute", "args": {"path": "extra/who", "value": "high"}}]}`),
		mustParse(t, `{"uuid": "skipped", "priority": 99, "conditions": [{"op": "!eq", "args": {"values": ["{node.driver}", "fake-hardware"]}}],
			"actions": [{"op": "fail", "args": {"msg": "never"}}]}`),
	}
	res, err := Run(context.Background(), rules, testSubject(), Options{})
	require.NoError(t, err)
	assert.Equal(t, "low", res.Node["extra"].(map[string]any)["who"], "the lowest priority runs last")
	assert.Equal(t, []string{"high", "low"}, res.Matched)
	assert.Equal(t, []string{"rule high: set-attribute extra/who", "rule low: set-attribute extra/who"}, res.Changes)
}

func TestLogNeverPrintsSecrets(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	_, err := runOne(t, `{"actions": [{"op": "log", "args": {"msg": "pw {node.driver_info[ipmi_password]} {node.driver_info} {inventory[bmc_password]}"}}]}`,
		Options{Logger: log, MaskSecrets: "never"})
	require.NoError(t, err)
	assert.NotContains(t, buf.String(), "secret")
	assert.NotContains(t, buf.String(), "hunter2")
	assert.Contains(t, buf.String(), "pw *** {'ipmi_password': '***'} ***")

	buf.Reset()
	_, err = runOne(t, `{"sensitive": true, "actions": [{"op": "log", "args": {"msg": "user {inventory[system_vendor][serial_number]}"}}]}`, Options{Logger: log})
	require.NoError(t, err)
	assert.NotContains(t, buf.String(), "S123")
}

func TestSensitiveErrorHidesValue(t *testing.T) {
	_, err := runOne(t, `{"sensitive": true, "actions": [{"op": "set-attribute", "args": {"path": "driver/x", "value": "p4ss"}}]}`, Options{})
	require.Error(t, err)
	assert.NotContains(t, err.Error(), "p4ss")
}

func TestAPICall(t *testing.T) {
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := hits.Add(1)
		assert.Equal(t, "yes", r.Header.Get("X-Hook"))
		if r.URL.Path == "/flaky" && n == 1 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		if r.URL.Path == "/missing" {
			w.WriteHeader(http.StatusNotFound)
		}
	}))
	defer srv.Close()
	res, err := runOne(t, `{"actions": [{"op": "api-call", "args": {"url": "`+srv.URL+`/flaky?node={node.uuid}", "headers": {"X-Hook": "yes"}, "backoff_factor": 0.01}}]}`, Options{})
	require.NoError(t, err)
	assert.NotNil(t, res)
	assert.Equal(t, int32(2), hits.Load(), "retried once after 503")

	hits.Store(0)
	_, err = runOne(t, `{"actions": [{"op": "api-call", "args": {"url": "`+srv.URL+`/missing", "headers": {"X-Hook": "yes"}}}]}`, Options{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "404 Error for url")
	assert.Equal(t, int32(1), hits.Load(), "a 404 is not retried")

	_, err = runOne(t, `{"sensitive": true, "actions": [{"op": "api-call", "args": {"url": "`+srv.URL+`/missing?token=T0K", "headers": {"X-Hook": "yes"}}}]}`, Options{})
	require.Error(t, err)
	assert.NotContains(t, err.Error(), "T0K", "a sensitive rule's URL is not shown")

	_, err = runOne(t, `{"actions": [{"op": "api-call", "args": {"url": "file:///etc/passwd"}}]}`, Options{})
	assert.ErrorContains(t, err, "is not an http(s) URL")
	_, err = runOne(t, `{"actions": [{"op": "api-call", "args": {"url": "http://x", "timeout": 0}}]}`, Options{})
	assert.ErrorContains(t, err, "timeout must be greater than zero")
}

// An https api-call is never redirected to plain http, which would send
// the rule's headers in the clear; https to https is followed.
func TestAPICallRefusesADowngradeRedirect(t *testing.T) {
	var plainHits atomic.Int32
	plain := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { plainHits.Add(1) }))
	defer plain.Close()
	var tlsSrv *httptest.Server
	tlsSrv = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/down":
			http.Redirect(w, r, plain.URL+"/x", http.StatusFound)
		case "/up":
			http.Redirect(w, r, tlsSrv.URL+"/ok", http.StatusFound)
		}
	}))
	defer tlsSrv.Close()
	opts := Options{HTTPClient: tlsSrv.Client()}
	_, err := runOne(t, `{"actions": [{"op": "api-call", "args": {"url": "`+tlsSrv.URL+`/down", "retries": 0}}]}`, opts)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "plain http")
	assert.Zero(t, plainHits.Load(), "the plain-http server was never called")
	_, err = runOne(t, `{"actions": [{"op": "api-call", "args": {"url": "`+tlsSrv.URL+`/up"}}]}`, opts)
	require.NoError(t, err)
}
