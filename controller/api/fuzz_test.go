package api

import (
	"encoding/json"
	"net/http/httptest"
	"net/url"
	"reflect"
	"testing"
)

// FuzzPatch feeds arbitrary JSON patch documents to the decoder and applier:
// they must either be refused with a client error or apply cleanly, never
// panic, and the document must stay JSON-encodable.
func FuzzPatch(f *testing.F) {
	for _, seed := range []string{
		`[{"op":"add","path":"/properties/cpus","value":8}]`,
		`[{"op":"remove","path":"/driver_info/x"}]`,
		`[{"op":"replace","path":"/extra/a/b/c","value":{"d":[1,2]}}]`,
		`[{"op":"move","from":"/a","path":"/b"}]`,
		`[{"op":"add","path":"/properties/0","value":null}]`,
		`{}`, `[]`, `[1]`, `[{"op":1}]`, `null`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		ops, err := decodePatch(body)
		if err != nil {
			assertClientError(t, err)
			return
		}
		doc := map[string]any{"properties": map[string]any{"cpus": 4.0, "list": []any{1.0}}, "extra": map[string]any{},
			"driver_info": nil, "name": "n"}
		if err := applyPatch(doc, ops); err != nil {
			assertClientError(t, err)
			return
		}
		if _, err := json.Marshal(doc); err != nil {
			t.Fatalf("patched document no longer encodes: %v", err)
		}
	})
}

// FuzzNodeListQuery drives the list parser with arbitrary query strings.
func FuzzNodeListQuery(f *testing.F) {
	for _, seed := range []string{"limit=2&marker=x", "maintenance=True&retired=0", "fields=uuid,name",
		"sort_key=name&sort_dir=desc", "limit=-1", "provision_state=clean%20wait", "detail=maybe", "%zz"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		r := httptest.NewRequest("GET", "/v1/nodes", nil)
		r.URL.RawQuery = raw
		q, err := parseQuery(r, nodeListParams...)
		if err != nil {
			assertClientError(t, err)
			return
		}
		if _, err := q.page([]string{"id", "name"}); err != nil {
			assertClientError(t, err)
		}
		for _, k := range []string{"maintenance", "retired", "associated", "detail"} {
			if _, err := q.boolean(k); err != nil {
				assertClientError(t, err)
			}
		}
		_ = fieldsArg(q)
	})
}

func assertClientError(t *testing.T, err error) {
	t.Helper()
	ae, ok := err.(*apiError)
	if !ok || ae.status < 400 || ae.status >= 500 {
		t.Fatalf("want a 4xx apiError, got %T %v", err, err)
	}
}

// FuzzWebobQuery: any query string is either refused with a client error
// or parsed into valid UTF-8 names and values whose re-encoding parses
// back, by Go and by us, to the same parameters.
func FuzzWebobQuery(f *testing.F) {
	for _, seed := range []string{"limit=-5;", "a=1;b=2&c", ";;&", "x=%zz&y=%2B+z", "k=%ff", "=v", "a=b=c", "%"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		v, err := webobQuery(raw)
		if err != nil {
			assertClientError(t, err)
			return
		}
		enc := v.Encode()
		back, err := url.ParseQuery(enc)
		if err != nil {
			t.Fatalf("re-encoded %q does not parse: %v", enc, err)
		}
		again, err := webobQuery(enc)
		if err != nil {
			t.Fatalf("re-encoded %q refused: %v", enc, err)
		}
		for k, vals := range v {
			if !reflect.DeepEqual(back[k], vals) || !reflect.DeepEqual(again[k], vals) {
				t.Fatalf("%q: %q became %q / %q", raw, vals, back[k], again[k])
			}
		}
	})
}
