package erasure

import (
	"bytes"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
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
// anyone can sign a record with a key of their own). Text that readers
// could read differently (checkStrict) fails before anything is read from
// it, and then Record is left empty: it could show what was not signed.
func Verify(doc []byte, trusted ...ed25519.PublicKey) Verified {
	if err := checkStrict(doc); err != nil {
		return Verified{Err: err}
	}
	return verifyStrict(doc, trusted)
}

// verifyStrict is Verify of a doc checkStrict has passed.
func verifyStrict(doc []byte, trusted []ed25519.PublicKey) Verified {
	var v Verified
	wrapper, err := exactMembers(doc, "the signed record", "record", "signature")
	if err != nil {
		v.Err = fmt.Errorf("not a signed sanitization record: %w", err)
		return v
	}
	if err := json.Unmarshal(wrapper["record"], &v.Record); err != nil {
		v.Err = fmt.Errorf("record: %w", err)
		return v
	}
	var s Signed
	s.Record = wrapper["record"]
	if _, err := exactMembers(wrapper["signature"], "the signature", "algorithm", "public_key", "value"); err != nil {
		v.Err = err
		return v
	}
	// Its keys are exactly Signature's: encoding/json's case-insensitive
	// matching has nothing to choose between.
	if err := json.Unmarshal(wrapper["signature"], &s.Signature); err != nil {
		v.Err = fmt.Errorf("signature: %w", err)
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
	Format string `json:"format"` // FileFormat
	// Node is the node's UUID; older exports hold what was typed (its
	// name or UUID). Every record must be of this node.
	Node    string            `json:"node"`
	Records []json.RawMessage `json:"records"`
}

// FileFormat identifies File.
const FileFormat = "anvil-erase-records/1"

// VerifyFile checks every record of a File, a JSON list of signed
// records, or one signed record. Text that readers could read differently
// (checkStrict), a File field that is not exactly format, node or
// records, and a record that appears twice fail the whole file; a record
// of another node than the File's fails on its own.
func VerifyFile(data []byte, trusted ...ed25519.PublicKey) ([]Verified, error) {
	if err := checkStrict(data); err != nil {
		return nil, err
	}
	b, err := readBundle(data)
	if err != nil {
		return nil, err
	}
	if len(b.docs) == 0 {
		return nil, errors.New("no records in the file")
	}
	out := make([]Verified, len(b.docs))
	at := map[string]int{} // record UUID -> its index
	for i, d := range b.docs {
		out[i] = verifyStrict(d, trusted)
		r := out[i].Record
		if j, seen := at[r.UUID]; seen && r.UUID != "" {
			return nil, fmt.Errorf("record %s appears twice: %s[%d] and %s[%d]", r.UUID, b.at, j, b.at, i)
		}
		at[r.UUID] = i
		if b.file && out[i].Err == nil {
			out[i].Err = sameNode(b.node, r)
		}
	}
	return out, nil
}

// bundle is the signed records of a file and where they are in it.
type bundle struct {
	docs []json.RawMessage
	at   string // their path: "records" in a File, "" in a list
	file bool   // a File: every record must be of node
	node string
}

// readBundle reads a File, a list of signed records or one signed record
// from data, which checkStrict has passed.
func readBundle(data []byte) (bundle, error) {
	data = bytes.TrimSpace(data)
	if bytes.HasPrefix(data, []byte("[")) {
		var b bundle
		if err := json.Unmarshal(data, &b.docs); err != nil {
			return b, fmt.Errorf("not a list of signed records: %w", err)
		}
		return b, nil
	}
	var probe map[string]json.RawMessage
	if err := json.Unmarshal(data, &probe); err != nil {
		return bundle{}, errors.New("not a signed record, a list of them or an erase records file")
	}
	_, records := probe["records"]
	_, format := probe["format"]
	if !records && !format { // a signed record
		return bundle{docs: []json.RawMessage{data}}, nil
	}
	if _, err := exactMembers(data, "the erase records file", "format", "node", "records"); err != nil {
		return bundle{}, err
	}
	var f File
	if err := json.Unmarshal(data, &f); err != nil {
		return bundle{}, fmt.Errorf("not an erase records file: %w", err)
	}
	if f.Format != FileFormat {
		return bundle{}, fmt.Errorf("format %q is not %q", f.Format, FileFormat)
	}
	return bundle{docs: f.Records, at: "records", file: true, node: f.Node}, nil
}

// sameNode refuses a record of another node than node, a File's: its
// UUID (in any letter case) or, as older exports wrote what was typed,
// the name the record gives.
func sameNode(node string, r Record) error {
	if r.Node.UUID != "" && strings.EqualFold(node, r.Node.UUID) || r.Node.Name != "" && node == r.Node.Name {
		return nil
	}
	of := r.Node.UUID
	if r.Node.Name != "" {
		of += fmt.Sprintf(" (%q)", r.Node.Name)
	}
	return fmt.Errorf("record %s is of node %s, not of the file's node %q", r.UUID, of, node)
}
