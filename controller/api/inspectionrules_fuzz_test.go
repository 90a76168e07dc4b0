package api

import (
	"testing"

	"github.com/google/uuid"

	"github.com/anvil-metal/anvil/controller/store"
)

// FuzzInspectionRuleBody feeds arbitrary bodies to the rule parser of
// POST /v1/inspection_rules: a client error or a rule with a UUID, a
// phase and at least one action; never a panic.
func FuzzInspectionRuleBody(f *testing.F) {
	for _, seed := range []string{
		`{"actions":[{"op":"add-trait","args":{"name":"CUSTOM_A"}}]}`,
		`{"uuid":"6a1f4c52-5a43-4bd7-9b07-3f4e2f2f0c11","description":null,"phase":null,"priority":9999,"sensitive":null,
			"conditions":[{"op":"!in-net","args":["{inventory[bmc_address]}","10.0.0.0/8"],"loop":[1],"multiple":"all"}],
			"actions":[{"op":"set-attribute","args":{"path":"{item}","value":1},"loop":{"a":1}}]}`,
		`{"uuid":"x","actions":[{"op":"fail","args":{"msg":"m"}}]}`,
		`{"actions":[{"op":"fail","args":{"msg":"m"}}],"priority":1e300}`,
		`{"actions":[{"op":"fail","args":{"msg":"m"}}],"conditions":[{"op":"matches","args":{"value":"v","regex":"("}}]}`,
		`{"actions":[]}`, `{}`, `[]`, `null`, `{"actions":null}`, `{"actions":[{"op":"log","args":[1,2,3]}]}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		doc, err := decodeObject(body)
		if err != nil {
			assertClientError(t, err)
			return
		}
		rule := &store.InspectionRule{UUID: uuid.NewString()}
		if err := parseRule(doc, rule); err != nil {
			assertClientError(t, err)
			return
		}
		if _, err := uuid.Parse(rule.UUID); err != nil || rule.Phase != "main" || len(rule.Actions) == 0 {
			t.Fatalf("accepted a rule with uuid %q, phase %q, %d actions", rule.UUID, rule.Phase, len(rule.Actions))
		}
	})
}
