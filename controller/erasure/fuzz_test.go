package erasure

import (
	"crypto/ed25519"
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
	for _, d := range signedRecordsF(f, key) {
		f.Add(d)
		f.Add(append(append([]byte(`{"format":"anvil-erase-records/1","node":"n","records":[`), d...), ']', '}'))
		f.Add(append(append([]byte("["), d...), ']'))
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
		}
		_, _ = Canonical(data)
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
