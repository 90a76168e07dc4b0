package sqlstore

import (
	stdjson "encoding/json"
	"reflect"
	"testing"

	json "github.com/goccy/go-json"

	"github.com/anvil-metal/anvil/controller/store"
)

// FuzzNodeCodec checks that the store's document codec (goccy/go-json,
// chosen for decode speed) round-trips nodes exactly as encoding/json
// would: arbitrary JSON is put in every free-form field of a node.
func FuzzNodeCodec(f *testing.F) {
	for _, s := range []string{`{"ipmi_address":"127.0.0.1","port":623}`, `{"a":[1,2.5,"x",null,{"b":true}]}`,
		`{"unicode":"ünï\u2028\u0000","big":1e300,"neg":-0.0001}`, `{}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		var m map[string]any
		if stdjson.Unmarshal(raw, &m) != nil || m == nil {
			return
		}
		n := &store.Node{UUID: "u", Driver: "fake-hardware", ProvisionState: "enroll", DriverInfo: m, Properties: m,
			DriverInternalInfo: m, CleanStep: m, Traits: []string{"CUSTOM_X"}}
		n.Normalize()
		ours, err := json.Marshal(n)
		if err != nil {
			t.Fatalf("encode: %v", err)
		}
		var got, want store.Node
		if err := json.Unmarshal(ours, &got); err != nil {
			t.Fatalf("decode our own document: %v\n%s", err, ours)
		}
		if err := stdjson.Unmarshal(ours, &want); err != nil {
			t.Fatalf("encoding/json rejects our document: %v\n%s", err, ours)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("codecs disagree:\ngoccy  %+v\nstdlib %+v", got.DriverInfo, want.DriverInfo)
		}
		if !reflect.DeepEqual(got.DriverInfo, m) {
			t.Fatalf("round trip changed the map:\n%+v\n%+v", got.DriverInfo, m)
		}
	})
}
