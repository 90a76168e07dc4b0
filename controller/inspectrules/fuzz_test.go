package inspectrules

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"testing"
)

// FuzzRuleBody feeds arbitrary bodies to the rule parser, then runs what
// it accepts: a body is refused with a ValidationError or parsed, and a
// parsed rule runs to a result or an ExecError, never a panic.
func FuzzRuleBody(f *testing.F) {
	for _, seed := range []string{
		`{"actions":[{"op":"set-attribute","args":{"path":"/driver_info/ipmi_address","value":"{inventory[bmc_address]}"}}]}`,
		`{"conditions":[{"op":"!eq","args":{"values":["{node.driver}",1]},"loop":[1,"{item}"],"multiple":"last"}],"actions":[{"op":"add-trait","args":{"name":"CUSTOM_{item}"},"loop":["A"]}]}`,
		`{"conditions":[{"op":"in-net","args":["{inventory[interfaces][0][ipv4_address]}","10.0.0.0/8"]}],"actions":[{"op":"fail","args":["m"]}]}`,
		`{"conditions":[{"op":"matches","args":{"value":"{inventory}","regex":"{item}"},"loop":{"a":"("}}],"actions":[{"op":"log","args":{"msg":"{node!r} {{"}}]}`,
		`{"actions":[{"op":"extend-plugin-data","args":{"path":"a.b.c","value":[1],"unique":true}},{"op":"unset-plugin-data","args":{"path":"a.b.c"}}]}`,
		`{"actions":[{"op":"del-port-attribute","args":{"port_id":"p","path":"extra/x/y"}}],"priority":12,"sensitive":true}`,
		`{"actions":[{"op":"set-capability","args":{"name":"{inventory[cpu]}","value":"{inventory[cpu][count]:>5}"}}]}`,
		`{"actions":[]}`, `{}`, `[]`, `null`, `{"actions":[{"op":"api-call","args":{"url":"gopher://x"}}]}`,
	} {
		f.Add([]byte(seed))
	}
	log := slog.New(slog.DiscardHandler)
	f.Fuzz(func(t *testing.T, body []byte) {
		var doc map[string]any
		if json.Unmarshal(body, &doc) != nil || doc == nil {
			return
		}
		r, err := Parse(doc, false)
		if err != nil {
			var ve *ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("refusal is not a ValidationError: %T %v", err, err)
			}
			return
		}
		for _, a := range r.Actions {
			if a.Op == "api-call" {
				return // no network in a fuzz test
			}
		}
		r.UUID = "fuzz"
		s := testSubject()
		s.Ports = append(s.Ports, map[string]any{"uuid": "p", "address": "aa:bb:cc:dd:ee:ff", "extra": map[string]any{"x": "s"}})
		res, err := Run(context.Background(), []Rule{*r}, s, Options{Logger: log})
		if err != nil {
			var ee *ExecError
			if !errors.As(err, &ee) || ee.Rule != "fuzz" {
				t.Fatalf("run error is not an ExecError of the rule: %T %v", err, err)
			}
			return
		}
		if _, err := json.Marshal(res.Node); err != nil {
			t.Fatalf("result node does not encode: %v", err)
		}
	})
}
