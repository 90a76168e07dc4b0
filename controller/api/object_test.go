package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestAppendMapSortsAndMasks(t *testing.T) {
	// more keys than appendMap keeps on its stack
	m := map[string]any{"z": "last\"quote", "a": map[string]any{"k": []any{1.0, "x"}}, "m": nil, "b": true,
		"ipmi_password": "p", "empty_password": "", "nil_password": nil}
	for i := range 20 {
		m[fmt.Sprintf("k%02d", i)] = float64(i)
	}
	var b bytes.Buffer
	require.NoError(t, appendMap(&b, m, hideSecret))
	masked := maps.Clone(m)
	masked["ipmi_password"] = "******"
	want, err := json.Marshal(masked)
	require.NoError(t, err)
	assert.Equal(t, string(want), b.String())
	b.Reset()
	require.NoError(t, appendMap(&b, nil, nil))
	assert.Equal(t, "{}", b.String())
}

func FuzzAppendString(f *testing.F) {
	for _, s := range []string{"plain", "quote\"back\\slash", "ctl\x00\x1f\n\t", "bad\xffutf8", "line\u2028sep", "ünïcödé"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var b bytes.Buffer
		appendString(&b, s)
		var got string
		if err := json.Unmarshal(b.Bytes(), &got); err != nil {
			t.Fatalf("invalid JSON for %q: %s: %v", s, b.Bytes(), err)
		}
		want, _ := json.Marshal(s)
		var wantS string
		_ = json.Unmarshal(want, &wantS)
		if got != wantS {
			t.Fatalf("decoded %q, encoding/json gives %q", got, wantS)
		}
	})
}

// FuzzAppendValue checks the fast paths against encoding/json on decoded
// JSON documents (maps, lists, numbers, strings, booleans, null).
func FuzzAppendValue(f *testing.F) {
	for _, s := range []string{`{"b":1,"a":[1.5,"x",null,true,{"z":1e-7}]}`, `1e21`, `-0.000001`, `123456789012`, `[]`, `{}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		var v any
		if json.Unmarshal(raw, &v) != nil {
			return
		}
		var b bytes.Buffer
		require.NoError(t, appendValue(&b, v))
		// Same meaning as encoding/json (which also HTML-escapes <>&; we
		// do not, like Ironic), and the same text once that is undone.
		want, err := json.Marshal(v)
		require.NoError(t, err)
		var back any
		require.NoError(t, json.Unmarshal(b.Bytes(), &back), "%s", b.Bytes())
		if !reflect.DeepEqual(back, v) {
			t.Fatalf("appendValue %s decodes differently from encoding/json %s", b.Bytes(), want)
		}
		unescaped := strings.NewReplacer(`\u003c`, "<", `\u003e`, ">", `\u0026`, "&").Replace(string(want))
		if b.String() != unescaped {
			t.Fatalf("appendValue %s, encoding/json %s", b.Bytes(), want)
		}
		// The field bound counts what appendValue writes without writing it.
		if n, err := jsonLen(v, &bytes.Buffer{}); err != nil || n != b.Len() {
			t.Fatalf("jsonLen %d (%v), appendValue wrote %d: %s", n, err, b.Len(), b.Bytes())
		}
	})
}
