package erasure

import (
	"bytes"
	"crypto/ed25519"
	"encoding/json"
	"strings"
	"testing"
)

// FuzzVerifyFile: whatever a records file holds, verification answers
// without panicking, and nothing but a record signed by the trusted key
// verifies (the fuzzer cannot forge an Ed25519 signature).
func FuzzVerifyFile(f *testing.F) {
	_, key, err := ed25519.GenerateKey(nil)
	if err != nil {
		f.Fatal(err)
	}
	pub := key.Public().(ed25519.PublicKey)
	docs := signedRecordsF(f, key)
	for _, d := range docs {
		f.Add(d)
		f.Add(append(append([]byte(`{"format":"anvil-erase-records/1","node":"n","records":[`), d...), ']', '}'))
		f.Add(append(append([]byte("["), d...), ']'))
	}
	// The forgeries of security issue #30: the fuzzer starts from them.
	d := string(docs[0])
	for _, forged := range []string{
		strings.Replace(d, `"serial":`, `"serial":"FORGED","serial":`, 1),
		strings.Replace(d, `"serial":`, `"Serial":"FORGED","serial":`, 1),
		strings.Replace(d, `"serial":`, `"ſerial":"FORGED","serial":`, 1),
		strings.Replace(d, `{"record":`, `{"Record":`, 1),
		strings.Replace(d, `{"record":`, `{"record":{},"record":`, 1),
		strings.Replace(d, `"serial":"`, `"serial":"\u0000\ud800`, 1),
		`{"format":"anvil-erase-records/1","node":"other","records":[` + d + "," + d + "]}",
	} {
		f.Add([]byte(forged))
	}
	f.Add([]byte(`{"record":{},"signature":{"algorithm":"ed25519","public_key":"","value":""}}`))
	f.Add([]byte(`[1,2,3]`))
	f.Add([]byte(`{"records":null}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		vs, err := VerifyFile(data, pub)
		if err != nil {
			return
		}
		for _, v := range vs {
			if v.Err == nil && !pub.Equal(v.Key) {
				t.Fatalf("a record verified with a key that is not trusted")
			}
			if v.Err == nil && checkStrict(data) != nil {
				t.Fatalf("a record verified from text the strict check refuses")
			}
		}
		_, _ = Canonical(data)
	})
}

// FuzzCheckStrict: the strict scanner answers any text without
// panicking; it refuses all encoding/json does and no JSON as not JSON; and
// what it accepts has a canonical form it accepts too, as it does the
// text re-indented (so re-indenting a file, or the signer re-encoding a
// record, never makes it refused).
func FuzzCheckStrict(f *testing.F) {
	for _, s := range []string{`{"a":{"b":[1,"x",true,null]},"b":1}`, `{"a":1,"a":2}`, `{"k":1,"\u212a":2}`, `{"s":1,"ſ":2}`,
		`["\ud83d\ude00","\ud83d","\\ud800","\u0000"]`, "[\"\xff\"]", `[1,]`, `{"a":1} {}`, `1e999`, `"x"`, ``} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		err := checkStrict(data)
		syntax := err != nil && (strings.HasPrefix(err.Error(), "not JSON") || err.Error() == "data after the JSON value")
		// It stops at the first problem: a duplicate key can come before
		// the end of text that is not JSON.
		if valid := json.Valid(data); valid && syntax || !valid && err == nil {
			t.Fatalf("json.Valid %v, checkStrict: %v", valid, err)
		}
		if err != nil {
			return
		}
		canon, err := Canonical(data)
		if err != nil {
			t.Fatalf("accepted, but no canonical form: %v", err)
		}
		if err := checkStrict(canon); err != nil {
			t.Fatalf("the canonical form %q of accepted text is refused: %v", canon, err)
		}
		var indented bytes.Buffer
		if err := json.Indent(&indented, data, "", "\t"); err != nil {
			t.Fatalf("accepted, but json.Indent fails: %v", err)
		}
		if err := checkStrict(indented.Bytes()); err != nil {
			t.Fatalf("accepted, refused re-indented: %v", err)
		}
	})
}

func signedRecordsF(f *testing.F, key ed25519.PrivateKey) [][]byte {
	in := testInput(f)
	recs, err := Build(in)
	if err != nil {
		f.Fatal(err)
	}
	var out [][]byte
	for _, r := range recs {
		s, err := NewSigner(key).Sign(r)
		if err != nil {
			f.Fatal(err)
		}
		out = append(out, s.Data)
	}
	return out
}

// FuzzBuild: whatever an agent reports as an erase step's result (it comes
// over the network), building records answers without panicking, and a
// record is only made for a device the result says was erased, or for a
// disk all of whose erased_through devices were.
func FuzzBuild(f *testing.F) {
	for _, s := range []string{eraseResult, raidErase,
		`{"nvme":{"devices":[{"plan":{"device":"/dev/nvme0n1","controller":"nvme"},"status":"erased","method":"nvme_format_crypto_erase"}]}}`,
		`{"devices":[{"plan":{"device":"/dev/sda","erased_through":["/dev/sda","/dev/md0"]},"status":"erased","method":"overwrite"}]}`,
		`{"devices":[{"plan":{"device":"/dev/sda","erased_through":["/dev/sda"]},"status":"skipped"}]}`,
		`{"devices":null}`, `[]`, `{"nvme":null}`} {
		f.Add(StepErase, []byte(s))
		f.Add(StepEraseExpress, []byte(s))
	}
	f.Fuzz(func(t *testing.T, step string, data []byte) {
		in := testInput(t)
		in.Result.Step, in.Result.Result = step, data
		recs, err := Build(in)
		if err != nil {
			return
		}
		if !Certifies(step) && len(recs) > 0 {
			t.Fatalf("step %q certified %d records", step, len(recs))
		}
		for _, r := range recs {
			if r.Sanitization.Category != "clear" && r.Sanitization.Category != "purge" {
				t.Fatalf("category %q", r.Sanitization.Category)
			}
		}
	})
}
