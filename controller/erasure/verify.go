package erasure

import (
	"bytes"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
)

// Verified is one record checked by Verify.
type Verified struct {
	Record Record
	Key    ed25519.PublicKey // the key that signed it
	Err    error             // nil: the signature holds
}

// ErrUntrusted means a record's signature holds but by a key the
// verifier was not told to trust.
var ErrUntrusted = errors.New("signed by a key that is not trusted")

// Verify checks one signed record. With trusted keys given, a record
// signed by another key fails with ErrUntrusted; without, the key inside
// the record is used (then compare its Fingerprint with the controller's:
// anyone can sign a record with a key of their own).
func Verify(doc []byte, trusted ...ed25519.PublicKey) Verified {
	var s Signed
	var v Verified
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		v.Err = fmt.Errorf("not a signed sanitization record: %w", err)
		return v
	}
	if err := json.Unmarshal(s.Record, &v.Record); err != nil {
		v.Err = fmt.Errorf("record: %w", err)
		return v
	}
	if s.Signature.Algorithm != "ed25519" {
		v.Err = fmt.Errorf("signature algorithm %q is not ed25519", s.Signature.Algorithm)
		return v
	}
	pub, err := DecodePublicKey(s.Signature.PublicKey)
	if err != nil {
		v.Err = err
		return v
	}
	v.Key = pub
	// Strict: the unused low bits of the last character must be zero, so
	// no two texts decode to the same signature (a changed byte fails).
	sig, err := base64.StdEncoding.Strict().DecodeString(s.Signature.Value)
	if err != nil {
		v.Err = fmt.Errorf("signature is not base64: %w", err)
		return v
	}
	msg, err := SignedBytes(s.Record)
	if err != nil {
		v.Err = err
		return v
	}
	if !ed25519.Verify(pub, msg, sig) {
		v.Err = errors.New("signature does not match the record: it was changed after signing, or signed by another key")
		return v
	}
	if v.Record.Format != RecordFormat {
		v.Err = fmt.Errorf("record format %q is not %q", v.Record.Format, RecordFormat)
		return v
	}
	if len(trusted) > 0 {
		ok := false
		for _, k := range trusted {
			ok = ok || k.Equal(pub)
		}
		if !ok {
			v.Err = fmt.Errorf("%w (%s)", ErrUntrusted, Fingerprint(pub))
		}
	}
	return v
}

// File is the export of a node's records (anvil erase-records NODE
// --format json).
type File struct {
	Format  string            `json:"format"` // FileFormat
	Node    string            `json:"node"`
	Records []json.RawMessage `json:"records"`
}

// FileFormat identifies File.
const FileFormat = "anvil-erase-records/1"

// VerifyFile checks every record of a File, a JSON list of signed
// records, or one signed record.
func VerifyFile(data []byte, trusted ...ed25519.PublicKey) ([]Verified, error) {
	data = bytes.TrimSpace(data)
	var docs []json.RawMessage
	switch {
	case bytes.HasPrefix(data, []byte("[")):
		if err := json.Unmarshal(data, &docs); err != nil {
			return nil, fmt.Errorf("not a list of signed records: %w", err)
		}
	default:
		var probe map[string]json.RawMessage
		if err := json.Unmarshal(data, &probe); err != nil {
			return nil, fmt.Errorf("not JSON: %w", err)
		}
		if _, ok := probe["records"]; ok {
			var f File
			dec := json.NewDecoder(bytes.NewReader(data))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&f); err != nil {
				return nil, fmt.Errorf("not an erase records file: %w", err)
			}
			if f.Format != FileFormat {
				return nil, fmt.Errorf("format %q is not %q", f.Format, FileFormat)
			}
			docs = f.Records
		} else {
			docs = []json.RawMessage{data}
		}
	}
	if len(docs) == 0 {
		return nil, errors.New("no records in the file")
	}
	out := make([]Verified, len(docs))
	for i, d := range docs {
		out[i] = Verify(d, trusted...)
	}
	return out, nil
}
