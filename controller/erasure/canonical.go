// Package erasure writes, signs and verifies sanitization records: one
// per device an erase_devices step erased, with the fields of the
// certificate of sanitization of NIST SP 800-88 (Rev. 1, Appendix G).
//
// A signed record is the JSON document
//
//	{"record":{...},"signature":{"algorithm":"ed25519","public_key":"<base64>","value":"<base64>"}}
//
// where value is the Ed25519 signature, by the controller's key, of
// SignedBytes(record): the line "anvil-sanitization-record/1\n" followed by
// the record's canonical form. The canonical form of a JSON value is
// what Go's encoding/json writes for it after decoding it into maps,
// slices and exact numbers: object keys sorted by their bytes, no
// insignificant whitespace, numbers as written, strings escaped as
// encoding/json does with HTML escaping off (control characters, '"',
// '\\', U+2028 and U+2029). Records hold only strings, integers, booleans
// and objects. Verification recomputes the canonical form from the record
// as found, so re-indenting a file keeps it valid, while changing any
// value, key or element breaks the signature. Canonicalising keeps the
// last of two equal keys, so verification first refuses text readers
// could read differently from it (checkStrict in strict.go): duplicate
// keys, also up to letter case, invalid UTF-8, lone surrogates, NULs.
package erasure

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// SignedContext starts the signed bytes, so a signature over a record can
// never be mistaken for one over anything else the key might sign.
const SignedContext = "anvil-sanitization-record/1\n"

// Canonical returns the canonical form of the JSON value raw.
func Canonical(raw []byte) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("canonical form: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("canonical form: data after the JSON value")
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, fmt.Errorf("canonical form: %w", err)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// SignedBytes are the bytes a record's signature covers.
func SignedBytes(record []byte) ([]byte, error) {
	c, err := Canonical(record)
	if err != nil {
		return nil, err
	}
	return append([]byte(SignedContext), c...), nil
}
