package inspectrules

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseRefuses(t *testing.T) {
	for _, c := range []struct{ doc, want string }{
		{`{}`, "Schema error: 'actions' is a required property"},
		{`{"actions": [], "bogus": 1}`, "Schema error: Additional properties are not allowed ('bogus' was unexpected)"},
		{`{"actions": []}`, "Schema error: [] should be non-empty"},
		{`{"actions": "x"}`, "Schema error: 'x' is not of type 'array'"},
		{`{"actions": [{"op": "nope", "args": {}}]}`, "Schema error: 'nope' is not one of ['fail', 'log', 'set-attribute'"},
		{`{"actions": [{"op": "fail"}]}`, "Schema error: 'args' is a required property"},
		{`{"actions": [{"op": "fail", "args": "x"}]}`, "Schema error: 'x' is not of type 'array', 'object'"},
		{`{"actions": [{"op": "fail", "args": {"msg": "m"}}], "conditions": [{"op": "!!eq", "args": {}}]}`, "Schema error: '!!eq' is not one of ['eq', 'lt'"},
		{`{"actions": [{"op": "fail", "args": {"msg": "m"}}], "conditions": [{"op": "eq", "args": {"values": []}, "multiple": "some"}]}`,
			"Schema error: 'some' is not one of ['any', 'all', 'first', 'last']"},
		{`{"actions": [{"op": "fail", "args": {"msg": "m"}}], "priority": -1}`, "Schema error: -1 is less than the minimum of 0"},
		{`{"actions": [{"op": "fail", "args": {"msg": "m"}}], "priority": 1.5}`, "Schema error: 1.5 is not of type 'integer'"},
		{`{"actions": [{"op": "fail", "args": {"msg": "m"}}], "priority": 10000}`, "Priority must be between 0 and 9999 for user-defined rules."},
		{`{"actions": [{"op": "fail", "args": {"msg": "m"}}], "phase": "late"}`, "Invalid phase: late. Valid phases are: main"},
		{`{"actions": [{"op": "fail", "args": {"msg": "m"}}], "sensitive": "yes"}`, "Schema error: 'yes' is not of type 'boolean', 'null'"},
		{`{"actions": [{"op": "fail", "args": {"msg": "m"}}], "description": 5}`, "Schema error: 5 is not of type 'string', 'null'"},
		{`{"actions": [{"op": "fail", "args": {}}]}`, "Invalid parameters for action operator fail: missing required argument(s): msg"},
		{`{"actions": [{"op": "set-attribute", "args": {"path": "p", "value": 1, "x": 2}}]}`,
			"Invalid parameters for action operator set-attribute: unexpected argument(s): x"},
		{`{"actions": [{"op": "fail", "args": {"msg": "m"}}], "conditions": [{"op": "!matches", "args": {"value": "v", "regex": "(?<=a)b"}}]}`,
			"Invalid parameters for condition operator matches: invalid regular expression"},
		{`{"actions": [{"op": "set-attribute", "args": ["path"]}]}`,
			"Invalid parameters for action operator set-attribute: Not enough arguments provided. Missing: value"},
		{`{"actions": [{"op": "fail", "args": {}}], "conditions": [{"op": "eq", "args": {}}]}`,
			"Multiple validation errors occurred: Invalid parameters for condition operator eq: missing required argument(s): values; Invalid parameters for action operator fail: missing required argument(s): msg"},
	} {
		var doc map[string]any
		require.NoError(t, json.Unmarshal([]byte(c.doc), &doc))
		_, err := Parse(doc, false)
		var ve *ValidationError
		require.ErrorAs(t, err, &ve, c.doc)
		assert.Contains(t, ve.Msg, c.want, c.doc)
	}
}

func TestParseAccepts(t *testing.T) {
	var doc map[string]any
	require.NoError(t, json.Unmarshal([]byte(`{"uuid": "u", "description": "d", "priority": 9999, "sensitive": true,
		"conditions": [{"op": "! eq", "args": ["{node.driver}", "ipmi"]}, {"op": "!contains", "args": {"value": "{item}", "regex": "x"}, "loop": ["a"], "multiple": "all"}],
		"actions": [{"op": "log", "args": ["hello", "debug"]}, {"op": "api-call", "args": {"url": "http://x", "timeout": 2}}]}`), &doc))
	// "! eq" (a space after the !) is not in the schema's list of ops
	_, err := Parse(doc, false)
	require.Error(t, err)
	doc["conditions"].([]any)[0].(map[string]any)["op"] = "!eq"
	r, err := Parse(doc, false)
	require.NoError(t, err)
	assert.Equal(t, Condition{Op: "eq", Invert: true, Args: []any{"{node.driver}", "ipmi"}, Multiple: "any"}, r.Conditions[0])
	assert.Equal(t, "all", r.Conditions[1].Multiple)
	assert.True(t, r.Sensitive)
	assert.Equal(t, 9999, r.Priority)
	assert.Equal(t, PhaseMain, r.Phase)
}

func TestBuiltIn(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "rules.yaml")
	require.NoError(t, os.WriteFile(path, []byte(`
- description: reserved priority
  priority: -10
  actions:
    - op: set-attribute
      args: {path: /resource_class, value: default}
- uuid: 8a3a4ed0-1b9c-4a8e-bb32-1a0f5cb0c8e7
  conditions:
    - op: eq
      args: {values: ["{inventory[system_vendor][manufacturer]}", QEMU]}
  actions:
    - op: add-trait
      args: {name: CUSTOM_VM}
- actions:
    - op: log
      args: {msg: third}
`), 0o600))
	rules, err := LoadFile(path)
	require.NoError(t, err)
	require.Len(t, rules, 3)
	assert.Equal(t, "00000000-0000-0000-0000-000000000000", rules[0].UUID)
	assert.Equal(t, -10, rules[0].Priority)
	assert.Equal(t, "8a3a4ed0-1b9c-4a8e-bb32-1a0f5cb0c8e7", rules[1].UUID)
	assert.Equal(t, "00000000-0000-0000-0000-000000000001", rules[2].UUID)

	for body, want := range map[string]string{
		"a: b":                             "should contain a list of rules",
		"- actions: []":                    "[] should be non-empty",
		"- {actions: [{op: x, args: {}}]}": "'x' is not one of",
		"[":                                "error parsing YAML",
	} {
		_, err := ParseBuiltIn([]byte(body), "f.yaml")
		assert.ErrorContains(t, err, want, body)
	}
	_, err = LoadFile(filepath.Join(dir, "missing.yaml"))
	assert.ErrorIs(t, err, os.ErrNotExist)
}
