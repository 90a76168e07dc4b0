package erasure

import (
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"time"

	"github.com/anvil-metal/anvil/controller/store"
	"github.com/anvil-metal/anvil/protocol"
)

// RecordFormat identifies the record's schema.
const RecordFormat = "anvil-sanitization-record/1"

// Record is one device's certificate of sanitization (SP 800-88 Rev. 1,
// Appendix G): who sanitized what, how, with what, verified how, and what
// happens to it next.
type Record struct {
	Format       string       `json:"format"`
	UUID         string       `json:"uuid"`
	Node         NodeRef      `json:"node"`
	Controller   string       `json:"controller"` // host that signed it
	Media        Media        `json:"media"`
	Sanitization Sanitization `json:"sanitization"`
	Tool         Tool         `json:"tool"`
	Verification Verification `json:"verification"`
	// Destination after sanitization (reuse, recycling, return, ...), from
	// the node's extra.sanitization_destination when the operator gives one.
	Destination string `json:"destination,omitempty"`
	StartedAt   string `json:"started_at"`
	FinishedAt  string `json:"finished_at"`
	RequestedBy string `json:"requested_by"` // the operator's request or the policy
	StepResult  string `json:"step_result"`  // uuid of the step run (GET .../steps/results)
	SignedAt    string `json:"signed_at"`
}

// NodeRef names the node the device was in.
type NodeRef struct {
	UUID          string `json:"uuid"`
	Name          string `json:"name,omitempty"`
	Driver        string `json:"driver"`
	BMCAddress    string `json:"bmc_address,omitempty"`
	Retired       bool   `json:"retired"`
	RetiredReason string `json:"retired_reason,omitempty"`
}

// Media is the device: manufacturer, model, serial, type and size.
type Media struct {
	Manufacturer string `json:"manufacturer,omitempty"`
	Model        string `json:"model,omitempty"`
	Serial       string `json:"serial,omitempty"`
	WWN          string `json:"wwn,omitempty"`
	Type         string `json:"type"`
	Interface    string `json:"interface,omitempty"`
	SizeBytes    int64  `json:"size_bytes"`
	Device       string `json:"device"` // its path on the node
}

// Sanitization is the method type (SP 800-88 clear or purge) and technique.
type Sanitization struct {
	Category  string `json:"category"` // clear | purge
	Technique string `json:"technique"`
	Method    string `json:"method"` // the agent's method name
	Passes    int    `json:"passes,omitempty"`
	// Scope says what of the medium the technique reached when that is
	// less than all of it (a member of software RAID erased through the
	// array); empty: the whole device.
	Scope string `json:"scope,omitempty"`
}

// Tool is what sanitized it.
type Tool struct {
	Name        string `json:"name"`
	Version     string `json:"version"`
	ImageSHA256 string `json:"image_sha256,omitempty"`
}

// Verification is how the result was checked and what was read back.
type Verification struct {
	Method          string `json:"method"`
	Samples         int    `json:"samples"`
	BytesChecked    int64  `json:"bytes_checked"`
	ExpectedPattern string `json:"expected_pattern"`
	Result          string `json:"result"`
}

// Signature is a record's signature.
type Signature struct {
	Algorithm string `json:"algorithm"` // ed25519
	PublicKey string `json:"public_key"`
	Value     string `json:"value"`
}

// Signed is a record with its signature, as stored and exported.
type Signed struct {
	Record    json.RawMessage `json:"record"`
	Signature Signature       `json:"signature"`
}

// techniques maps the agent's methods to SP 800-88's method types. ATA
// security erase (normal) of a solid-state drive is only a clear: how
// much of the flash it reaches is up to the vendor.
var techniques = map[string]struct{ category, technique string }{
	"nvme_format_crypto_erase":    {"purge", "NVMe Format, Secure Erase Setting 2 (cryptographic erase)"},
	"nvme_format_user_data_erase": {"purge", "NVMe Format, Secure Erase Setting 1 (user data erase)"},
	"ata_security_erase_enhanced": {"purge", "ATA SECURITY ERASE UNIT, enhanced"},
	"ata_security_erase":          {"purge", "ATA SECURITY ERASE UNIT, normal"},
	"blksecdiscard":               {"clear", "block secure discard (BLKSECDISCARD)"},
	"blkdiscard":                  {"clear", "block discard (TRIM/UNMAP), read back as zeros"},
	"blkzeroout":                  {"clear", "overwrite with zeros (BLKZEROOUT)"},
	"overwrite":                   {"clear", "overwrite"},
}

func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

func firstOf(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func nvmeField(d protocol.EraseDevice, serial bool) string {
	if d.Plan.NVMe == nil {
		return ""
	}
	if serial {
		return d.Plan.NVMe.Serial
	}
	return d.Plan.NVMe.Model
}

func patternText(v *protocol.EraseVerification) string {
	if v == nil || v.Pattern == "" {
		return "an unverified pattern"
	}
	return v.Pattern
}

func mediaType(p protocol.EraseDevicePlan) string {
	switch {
	case p.NVMe != nil || p.Controller == "nvme":
		return "flash memory (NVMe SSD)"
	case p.Rotational:
		return "magnetic (hard disk drive)"
	}
	return "non-rotational (SSD, flash or virtual disk)"
}

// bmcAddress is the node's BMC address from its driver_info.
func bmcAddress(info map[string]any) string {
	for _, k := range []string{"redfish_address", "ipmi_address", "bmc_address"} {
		if s, ok := info[k].(string); ok && s != "" {
			return s
		}
	}
	for k, v := range info {
		if s, ok := v.(string); ok && strings.HasSuffix(k, "_address") && s != "" {
			return s
		}
	}
	return ""
}

// Signer signs records with the controller's key.
type Signer struct {
	key ed25519.PrivateKey
}

// NewSigner signs with key.
func NewSigner(key ed25519.PrivateKey) *Signer { return &Signer{key: key} }

// PublicKey is the key records are verified with.
func (s *Signer) PublicKey() ed25519.PublicKey { return s.key.Public().(ed25519.PublicKey) }

// Sign returns r as a signed record, ready for the store. A NUL in any
// of r's strings (a device's serial, say) is signed as U+FFFD, as
// encoding/json writes invalid UTF-8: verification refuses NULs, which
// readers treat differently.
func (s *Signer) Sign(r Record) (*store.EraseRecord, error) {
	replaceNUL(reflect.ValueOf(&r).Elem())
	raw, err := json.Marshal(r)
	if err != nil {
		return nil, fmt.Errorf("encode record: %w", err)
	}
	canon, err := Canonical(raw)
	if err != nil {
		return nil, err
	}
	msg := append([]byte(SignedContext), canon...)
	doc, err := json.Marshal(Signed{Record: canon, Signature: Signature{Algorithm: "ed25519",
		PublicKey: EncodePublicKey(s.PublicKey()), Value: base64.StdEncoding.EncodeToString(ed25519.Sign(s.key, msg))}})
	if err != nil {
		return nil, fmt.Errorf("encode signed record: %w", err)
	}
	signedAt, _ := time.Parse(time.RFC3339Nano, r.SignedAt)
	return &store.EraseRecord{UUID: r.UUID, NodeUUID: r.Node.UUID, CreatedAt: signedAt, Data: doc}, nil
}

// replaceNUL replaces the NULs in the strings of v, a settable struct of
// strings, numbers, booleans and structs (Record), with U+FFFD.
func replaceNUL(v reflect.Value) {
	switch v.Kind() {
	case reflect.String:
		if s := v.String(); strings.IndexByte(s, 0) >= 0 {
			v.SetString(strings.ReplaceAll(s, "\x00", "\uFFFD"))
		}
	case reflect.Struct:
		for i := range v.NumField() {
			replaceNUL(v.Field(i))
		}
	}
}
