package erasure

import (
	"bytes"
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const (
	realSerial = `"serial":"S64GNE0R123456"`
	nodeUUID   = "6f3a1c2e-0000-4000-8000-000000000007"
)

// TestVerifyRefusesAmbiguousRecords replays security issue #30, finding
// 5: a signed record whose text a person, grep or another JSON reader
// reads differently from the verifier (a forged value beside the signed
// one) fails, and says which key where, whatever the signature says.
func TestVerifyRefusesAmbiguousRecords(t *testing.T) {
	_, key, err := ed25519.GenerateKey(nil)
	require.NoError(t, err)
	pub := key.Public().(ed25519.PublicKey)
	doc := string(signedRecords(t, key)[0])
	require.Contains(t, doc, realSerial)
	swap := func(old, new string) string { return strings.Replace(doc, old, new, 1) }

	for _, tc := range []struct{ name, doc, want string }{
		{"forged serial before the real one", swap(realSerial, `"serial":"FORGED-0002",`+realSerial),
			`duplicate key "serial" at record.media: JSON readers differ in which value they take`},
		{"forged serial after the real one", swap(realSerial, realSerial+`,"serial":"FORGED-0002"`),
			`duplicate key "serial" at record.media`},
		{"the same key escaped", swap(realSerial, `"ser\u0069al":"FORGED-0002",`+realSerial),
			`duplicate key "serial" at record.media`},
		{"letter case", swap(realSerial, `"Serial":"FORGED-0002",`+realSerial),
			`duplicate key "serial" at record.media: a case-insensitive JSON reader (Go's encoding/json) takes it for "Serial"`},
		{"long s (U+017F)", swap(realSerial, `"ſerial":"FORGED-0002",`+realSerial),
			`duplicate key "serial" at record.media: a case-insensitive JSON reader (Go's encoding/json) takes it for "ſerial"`},
		{"Kelvin sign (U+212A)", swap(`"bytes_checked":4325376`, "\"bytes_chec\u212Aed\":1,\"bytes_checked\":4325376"),
			"duplicate key \"bytes_checked\" at record.verification: a case-insensitive JSON reader (Go's encoding/json) takes it for \"bytes_chec\u212Aed\""},
		{"dotted capital I (upper of lower)", swap(`"driver":"redfish"`, `"drİver":"ipmi","driver":"redfish"`),
			`duplicate key "driver" at record.node: a case-insensitive JSON reader (Go's encoding/json) takes it for "drİver"`},
		{"in the record's node", swap(`"retired":true`, `"retired":false,"retired":true`), `duplicate key "retired" at record.node`},
		{"deep in the record", swap(`"interface":"nvme"`, `"interface":"nvme","x":{"a b":[0,{"z":1,"z":2}]}`),
			`duplicate key "z" at record.media.x["a b"][1]`},
		{"two records", swap(`{"record":{`, `{"record":{"format":"anvil-sanitization-record/1","media":{"serial":"FORGED-0002"}},"record":{`),
			`duplicate key "record" at the top level`},
		{"two signatures", swap(`,"signature":{`, `,"signature":{"algorithm":"none"},"signature":{`), `duplicate key "signature" at the top level`},
		{"two signature values", swap(`"value":"`, `"value":"AAAA","value":"`), `duplicate key "value" at signature`},
		{"RECORD beside record", swap(`{"record":{`, `{"RECORD":{},"record":{`), `duplicate key "record" at the top level: a case-insensitive`},
		{"Record for record", swap(`{"record":`, `{"Record":`), `the signed record has the field "Record": its fields are exactly record, signature`},
		{"Value for value", swap(`"value":`, `"Value":`), `the signature has the field "Value": its fields are exactly algorithm, public_key, value`},
		{"an extra wrapper field", swap(`{"record":`, `{"serial":"FORGED-0002","record":`), `the signed record has the field "serial"`},
		{"no signature", swap(`,"signature":{`, `,"signature_":{`), `the signed record has the field "signature_"`},
		{"a NUL in a value", swap(realSerial, `"serial":"FORGED-0002\u0000S64GNE0R123456"`),
			`a NUL character (\u0000) in the string at record.media.serial`},
		{"a NUL in a key", swap(realSerial, `"serial\u0000":"FORGED-0002",`+realSerial), `a NUL character (\u0000) in the key "serial\u0000" at record.media`},
		{"invalid UTF-8", swap(realSerial, "\"serial\":\"S64GNE0R12345\xff\""), "invalid UTF-8 in the string at record.media.serial"},
		{"a lone surrogate", swap(realSerial, `"serial":"S64GNE0R123456\ud800"`), "an escaped lone UTF-16 surrogate in the string at record.media.serial"},
		{"a low surrogate first", swap(realSerial, `"serial":"\udc00\ud800S64GNE0R123456"`), "lone UTF-16 surrogate"},
		{"a record after the record", doc + `{"record":{"media":{"serial":"FORGED-0002"}}}`, "data after the JSON value"},
		{"cut short", doc[:len(doc)-1], "not JSON"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.NotEqual(t, doc, tc.doc)
			v := Verify([]byte(tc.doc), pub)
			require.Error(t, v.Err)
			assert.Contains(t, v.Err.Error(), tc.want)
			assert.NotEqual(t, "FORGED-0002", v.Record.Media.Serial)
			vs, err := VerifyFile([]byte(tc.doc), pub)
			if err == nil { // the text is fine, the one record is not
				require.Len(t, vs, 1)
				err = vs[0].Err
			}
			require.Error(t, err, "the file of the one record")
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

// TestVerifyKeepsEquivalentText: what every reader reads alike still
// verifies: the record as signed, re-indented, and with characters
// written as escapes (a surrogate pair for one above U+FFFF).
func TestVerifyKeepsEquivalentText(t *testing.T) {
	_, key, err := ed25519.GenerateKey(nil)
	require.NoError(t, err)
	pub := key.Public().(ed25519.PublicKey)
	recs, err := Build(testInput(t))
	require.NoError(t, err)
	recs[0].Media.Serial = "S64\U0001F600\uFFFD"
	signed, err := NewSigner(key).Sign(recs[0])
	require.NoError(t, err)
	doc := string(signed.Data)
	var pretty bytes.Buffer
	require.NoError(t, json.Indent(&pretty, signed.Data, "", "\t"))

	for name, text := range map[string]string{
		"as signed":     doc,
		"re-indented":   pretty.String(),
		"escapes":       strings.Replace(doc, "S64\U0001F600\uFFFD", `\u0053\u0036\u0034\ud83d\ude00\ufffd`, 1),
		"escaped slash": strings.Replace(doc, `"/dev/nvme0n1"`, `"\/dev\/nvme0n1"`, 1),
	} {
		t.Run(name, func(t *testing.T) {
			v := Verify([]byte(text), pub)
			require.NoError(t, v.Err)
			assert.Equal(t, "S64\U0001F600\uFFFD", v.Record.Media.Serial)
		})
	}
}

// fileOf is an export of docs as anvil erase-records writes it.
func fileOf(node string, docs ...[]byte) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, `{"format":%q,"node":%q,"records":[`, FileFormat, node)
	for i, d := range docs {
		if i > 0 {
			b.WriteString(",")
		}
		b.WriteString("\n")
		b.Write(d)
	}
	b.WriteString("\n]}\n")
	return b.Bytes()
}

// TestVerifyFileRefusesAmbiguousFiles: the file's own keys are as strict
// as a record's, a record may appear once, and the file's node must be
// the records'.
func TestVerifyFileRefusesAmbiguousFiles(t *testing.T) {
	_, key, err := ed25519.GenerateKey(nil)
	require.NoError(t, err)
	pub := key.Public().(ed25519.PublicKey)
	docs := signedRecords(t, key)
	d0, d1 := docs[0], docs[1]
	var r0 struct {
		Record Record `json:"record"`
	}
	require.NoError(t, json.Unmarshal(d0, &r0))
	id := r0.Record.UUID
	var pretty bytes.Buffer
	require.NoError(t, json.Indent(&pretty, d0, "  ", "  "))
	good := string(fileOf(nodeUUID, d0, d1))
	forged := bytes.Replace(d1, []byte(`"serial":"ZC1ABC"`), []byte(`"serial":"FORGED-0002","serial":"ZC1ABC"`), 1)
	require.NotEqual(t, d1, forged)

	for _, tc := range []struct{ name, file, want string }{
		{"a record twice", string(fileOf(nodeUUID, d0, d1, d0)), "record " + id + " appears twice: records[0] and records[2]"},
		{"a record twice, once re-indented", string(fileOf(nodeUUID, d0, pretty.Bytes())), "record " + id + " appears twice: records[0] and records[1]"},
		{"a record twice in a list", "[" + string(d0) + "," + pretty.String() + "]", "record " + id + " appears twice: [0] and [1]"},
		{"a forged key in a record", string(fileOf(nodeUUID, d0, forged)), `duplicate key "serial" at records[1].record.media`},
		{"a forged key in a listed record", "[" + string(d0) + "," + string(forged) + "]", `duplicate key "serial" at [1].record.media`},
		{"two records lists", strings.Replace(good, `"records":[`, `"records":[],"records":[`, 1), `duplicate key "records" at the top level`},
		{"two nodes", strings.Replace(good, `"node":`, `"node":"rack9-99","node":`, 1), `duplicate key "node" at the top level`},
		{"Node beside node", strings.Replace(good, `"node":`, `"Node":"rack9-99","node":`, 1), `duplicate key "node" at the top level: a case-insensitive`},
		{"Records for records", strings.Replace(good, `"records":`, `"Records":`, 1),
			`the erase records file has the field "Records": its fields are exactly format, node, records`},
		{"an extra key", strings.Replace(good, `"node":`, `"comment":"all fine","node":`, 1), `the erase records file has the field "comment"`},
		{"no node", strings.Replace(good, `"node":`, `"node_":`, 1), `the erase records file has the field "node_"`},
		{"another format", strings.Replace(good, FileFormat, "anvil-erase-records/2", 1), `format "anvil-erase-records/2" is not`},
		{"a file after the file", good + good, "data after the JSON value"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := VerifyFile([]byte(tc.file), pub)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}

	// The file's node: the records' UUID (any letter case) or name.
	for _, node := range []string{nodeUUID, strings.ToUpper(nodeUUID), "rack1-07"} {
		vs, err := VerifyFile(fileOf(node, d0, d1), pub)
		require.NoError(t, err, node)
		require.Len(t, vs, 2)
		for _, v := range vs {
			assert.NoError(t, v.Err, node)
		}
	}
	for _, node := range []string{"rack1-08", "6f3a1c2e-0000-4000-8000-000000000008", "", "RACK1-07"} {
		vs, err := VerifyFile(fileOf(node, d0, d1), pub)
		require.NoError(t, err, node)
		for _, v := range vs {
			assert.EqualError(t, v.Err, fmt.Sprintf(`record %s is of node %s ("rack1-07"), not of the file's node %q`, v.Record.UUID, nodeUUID, node))
		}
	}

	// Untouched and re-indented, the file verifies.
	var indented bytes.Buffer
	require.NoError(t, json.Indent(&indented, []byte(good), "", "    "))
	for _, f := range []string{good, indented.String()} {
		vs, err := VerifyFile([]byte(f), pub)
		require.NoError(t, err)
		require.Len(t, vs, 2)
		assert.NoError(t, vs[0].Err)
		assert.NoError(t, vs[1].Err)
	}
}

// TestCheckStrict: the scanner on its own, where JSON's grammar and
// escapes meet its rules.
func TestCheckStrict(t *testing.T) {
	for _, tc := range []struct{ json, want string }{ // want "": accepted
		{`{"a":{"b":1},"b":{"a":1}}`, ""},
		{`[{"a":1},{"a":1}]`, ""},
		{`{"a":"\\u0000","b":"\\ud800","c":"\\\\"}`, ""}, // escaped backslashes, not escapes
		{`{"a":"\ud83d\ude00 \u00e9 \u2028"}`, ""},
		{`{"a_b":1,"a-b":2,"ab":3}`, ""},
		{`"\uFFFD"`, ""},
		{` 1 `, ""},
		{`1e999`, ""}, // numbers are kept as written
		{``, "not JSON"},
		{`{"a":1,}`, "not JSON"},
		{`[1,]`, "not JSON"},
		{`{"a":1}}`, "not JSON"},
		{`{"a" 1}`, "not JSON"},
		{`{"a":1`, "not JSON: unexpected end"},
		{`[1] [2]`, "data after the JSON value"},
		{`{"a":1,"a":1}`, `duplicate key "a" at the top level`},
		{`{"a":[{"k":1,"K":2}]}`, `duplicate key "K" at a[0]: a case-insensitive JSON reader (Go's encoding/json) takes it for "k"`},
		{`{"x.y":{"k":1,"\u212a":2}}`, "duplicate key \"\u212a\" at [\"x.y\"]"},
		{`{"id":1,"ıd":2}`, `duplicate key "ıd" at the top level`},
		{`{"a":"\ud83d"}`, "lone UTF-16 surrogate in the string at a"},
		{`{"a":"\ud83d\u0041"}`, "lone UTF-16 surrogate"},
		{`{"a":"\ud83d\\ude00"}`, "lone UTF-16 surrogate"},
		{`{"a":"\ude00\ud83d"}`, "lone UTF-16 surrogate"},
		{`{"\udfff":1}`, `lone UTF-16 surrogate in the key "\udfff" at the top level`},
		{"[\"\xed\xa0\x80\"]", "invalid UTF-8 in the string at [0]"},
		{"{\"\xc0\xaf\":1}", `invalid UTF-8 in the key "\xc0\xaf" at the top level`},
		{`["\u0000"]`, `a NUL character (\u0000) in the string at [0]`},
		{strings.Repeat("[", maxDepth) + strings.Repeat("]", maxDepth), ""},
		{strings.Repeat(`{"a":`, maxDepth) + "1" + strings.Repeat("}", maxDepth), ""},
		{strings.Repeat("[", maxDepth+1) + strings.Repeat("]", maxDepth+1), "not JSON: nested deeper than 10000 levels"},
	} {
		name := tc.json
		if len(name) > 40 {
			name = name[:40] + "..."
		}
		t.Run(name, func(t *testing.T) {
			err := checkStrict([]byte(tc.json))
			if tc.want == "" {
				assert.NoError(t, err)
				assert.True(t, json.Valid([]byte(tc.json)))
				return
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

// TestSignReplacesNUL: the signer never signs a record verification
// would refuse: a NUL in a value is signed as U+FFFD.
func TestSignReplacesNUL(t *testing.T) {
	_, key, err := ed25519.GenerateKey(nil)
	require.NoError(t, err)
	recs, err := Build(testInput(t))
	require.NoError(t, err)
	r := recs[0]
	r.Media.Serial, r.Node.Name = "S64\x00GNE\x00", "rack\x001-07"
	signed, err := NewSigner(key).Sign(r)
	require.NoError(t, err)
	assert.NotContains(t, string(signed.Data), `\u0000`)
	v := Verify(signed.Data, key.Public().(ed25519.PublicKey))
	require.NoError(t, v.Err)
	assert.Equal(t, "S64\uFFFDGNE\uFFFD", v.Record.Media.Serial)
	assert.Equal(t, "rack\uFFFD1-07", v.Record.Node.Name)
	assert.Equal(t, "S64\x00GNE\x00", r.Media.Serial, "the caller's record is its own")
}
