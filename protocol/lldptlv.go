package protocol

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
)

// LLDPMaxValue is the longest TLV value LLDP's 9-bit length allows.
const LLDPMaxValue = 511

// LLDPTLV is one raw LLDP TLV a NIC heard (protocol/lldp decodes them).
// It marshals as IPA reports LLDP in the inventory: [type, "hex value"].
type LLDPTLV struct {
	Type  int
	Value []byte
}

// MarshalJSON implements json.Marshaler.
func (t LLDPTLV) MarshalJSON() ([]byte, error) {
	return json.Marshal([]any{t.Type, hex.EncodeToString(t.Value)})
}

// UnmarshalJSON implements json.Unmarshaler.
func (t *LLDPTLV) UnmarshalJSON(b []byte) error {
	var pair []json.RawMessage
	if err := json.Unmarshal(b, &pair); err != nil || len(pair) != 2 {
		return errors.New("lldp: a TLV is [type, \"hex value\"]")
	}
	var typ int
	var val string
	if err := json.Unmarshal(pair[0], &typ); err != nil || typ < 0 || typ > 127 {
		return fmt.Errorf("lldp: TLV type %s is not 0..127", pair[0])
	}
	if err := json.Unmarshal(pair[1], &val); err != nil {
		return errors.New("lldp: TLV value is not a hex string")
	}
	v, err := hex.DecodeString(val)
	if err != nil || len(v) > LLDPMaxValue {
		return fmt.Errorf("lldp: TLV value is not hex of at most %d bytes", LLDPMaxValue)
	}
	t.Type, t.Value = typ, v
	return nil
}

// LLDPTLVs are the TLVs of one NIC. Decoding keeps the well-formed ones
// and drops the rest, as Ironic skips a TLV that is not [type, "hex"]:
// one odd TLV from a stock agent must not refuse the whole inventory.
type LLDPTLVs []LLDPTLV

// UnmarshalJSON implements json.Unmarshaler.
func (l *LLDPTLVs) UnmarshalJSON(b []byte) error {
	var raw []json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		*l = nil
		return nil // not a list: no LLDP
	}
	out := make(LLDPTLVs, 0, len(raw))
	for _, r := range raw {
		var t LLDPTLV
		if t.UnmarshalJSON(r) == nil {
			out = append(out, t)
		}
	}
	*l = out
	return nil
}
