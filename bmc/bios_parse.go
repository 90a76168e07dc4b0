package bmc

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// Decoding of the BMC's BIOS documents. gofish's types are not used for
// them: its Bios keeps the settings target and apply times unexported,
// decodes integers as float64 (inexact beyond 2^53) and compares values
// with != (which panics on objects); its AttributeRegistry drops what does
// not fit its field types without saying so. A BMC's odd answer must give
// an error here, never a panic or a silently wrong bound.

// maxDoc bounds one document read from a BMC (iDRAC's BIOS registry is
// about 1 MiB).
const maxDoc = 16 << 20

// decodeObject decodes a JSON object keeping numbers exact.
func decodeObject(body []byte) (map[string]any, error) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("not a JSON object but %s", describe(v))
	}
	return obj, nil
}

// odataID reads a {"@odata.id": "..."} link; "" when absent or malformed.
func odataID(v any) string {
	m, _ := v.(map[string]any)
	s, _ := m["@odata.id"].(string)
	return s
}

// biosDoc is what BIOS() needs from a Bios resource.
type biosDoc struct {
	registry     string
	attrs        map[string]any
	settingsURI  string
	applyTimes   []string
	resetTarget  string
	settingsETag string // from Bios/Settings only
}

func parseBiosDoc(body []byte) (biosDoc, error) {
	obj, err := decodeObject(body)
	if err != nil {
		return biosDoc{}, fmt.Errorf("bios: %w", err)
	}
	var d biosDoc
	d.registry, _ = obj["AttributeRegistry"].(string)
	switch a := obj["Attributes"].(type) {
	case map[string]any:
		d.attrs = make(map[string]any, len(a))
		for k, v := range a {
			d.attrs[k] = attrValue(v)
		}
	case nil:
		d.attrs = map[string]any{} // a Settings object with nothing pending
	default:
		return biosDoc{}, fmt.Errorf("bios: Attributes is %s, not an object", describe(a))
	}
	if s, ok := obj["@Redfish.Settings"].(map[string]any); ok {
		d.settingsURI = odataID(s["SettingsObject"])
		if ts, ok := s["SupportedApplyTimes"].([]any); ok {
			for _, t := range ts {
				if t, ok := t.(string); ok {
					d.applyTimes = append(d.applyTimes, t)
				}
			}
		}
	}
	if acts, ok := obj["Actions"].(map[string]any); ok {
		if r, ok := acts["#Bios.ResetBios"].(map[string]any); ok {
			d.resetTarget, _ = r["target"].(string)
		}
	}
	d.settingsETag, _ = obj["@odata.etag"].(string)
	return d, nil
}

// attrValue turns a decoded attribute value into BIOS's representation:
// integers as int64, other numbers as float64.
func attrValue(v any) any {
	n, ok := v.(json.Number)
	if !ok {
		return v
	}
	if i, err := n.Int64(); err == nil {
		return i
	}
	f, err := n.Float64()
	if err != nil {
		return n.String() // beyond float64: keep the text rather than lose it
	}
	return f
}

// registryLocation picks the registry document's URI from a
// MessageRegistryFile: an English Location[].Uri, another language's, or a
// PublicationUri served by the BMC itself (one on the vendor's web site
// cannot be fetched through the BMC session).
func registryLocation(body []byte) (string, error) {
	obj, err := decodeObject(body)
	if err != nil {
		return "", fmt.Errorf("registry file: %w", err)
	}
	locs, _ := obj["Location"].([]any)
	var uri, other, pub string
	for _, l := range locs {
		lm, _ := l.(map[string]any)
		lang, _ := lm["Language"].(string)
		u, _ := lm["Uri"].(string)
		p, _ := lm["PublicationUri"].(string)
		switch {
		case u != "" && (lang == "" || strings.HasPrefix(lang, "en")) && uri == "":
			uri = u
		case u != "" && other == "":
			other = u
		}
		if strings.HasPrefix(p, "/") && pub == "" {
			pub = p
		}
	}
	for _, u := range []string{uri, other, pub} {
		if u != "" {
			return u, nil
		}
	}
	return "", errors.New("registry file: no Location with a Uri on the BMC")
}

// parseRegistry decodes an AttributeRegistry document.
func parseRegistry(body []byte) (*Registry, error) {
	obj, err := decodeObject(body)
	if err != nil {
		return nil, fmt.Errorf("attribute registry: %w", err)
	}
	reg := &Registry{Attributes: map[string]Attribute{}}
	reg.ID, _ = obj["Id"].(string)
	entries, ok := obj["RegistryEntries"].(map[string]any)
	if !ok {
		return nil, errors.New("attribute registry: no RegistryEntries object")
	}
	list, ok := entries["Attributes"].([]any)
	if !ok {
		return nil, errors.New("attribute registry: RegistryEntries.Attributes is not a list")
	}
	for i, e := range list {
		em, ok := e.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("attribute registry: entry %d is %s, not an object", i, describe(e))
		}
		a, err := parseAttribute(em)
		if err != nil {
			return nil, fmt.Errorf("attribute registry: entry %d: %w", i, err)
		}
		reg.Attributes[a.Name] = a
	}
	return reg, nil
}

func parseAttribute(em map[string]any) (Attribute, error) {
	var a Attribute
	var ok bool
	if a.Name, ok = em["AttributeName"].(string); !ok || a.Name == "" {
		return a, errors.New("no AttributeName")
	}
	if a.Type, ok = em["Type"].(string); !ok {
		return a, fmt.Errorf("%s: no Type", a.Name)
	}
	a.DisplayName, _ = em["DisplayName"].(string)
	a.ValueExpression, _ = em["ValueExpression"].(string)
	for _, f := range []struct {
		key string
		dst *bool
	}{
		{"ReadOnly", &a.ReadOnly}, {"Immutable", &a.Immutable}, {"ResetRequired", &a.ResetRequired},
		{"IsSystemUniqueProperty", &a.Unique}, {"WriteOnly", &a.WriteOnly}, {"Hidden", &a.Hidden},
	} {
		switch v := em[f.key].(type) {
		case bool:
			*f.dst = v
		case nil:
		default:
			return a, fmt.Errorf("%s: %s is %s, not a boolean", a.Name, f.key, describe(v))
		}
	}
	for _, f := range []struct {
		key string
		dst **int64
	}{
		{"LowerBound", &a.LowerBound}, {"UpperBound", &a.UpperBound}, {"ScalarIncrement", &a.ScalarIncrement},
		{"MinLength", &a.MinLength}, {"MaxLength", &a.MaxLength},
	} {
		v, present := em[f.key]
		if !present || v == nil {
			continue
		}
		n, ok := asInt64(v)
		if !ok {
			return a, fmt.Errorf("%s: %s is %s, not an integer in range", a.Name, f.key, describe(v))
		}
		*f.dst = &n
	}
	if a.ScalarIncrement != nil && *a.ScalarIncrement < 0 {
		return a, fmt.Errorf("%s: negative ScalarIncrement %d", a.Name, *a.ScalarIncrement)
	}
	switch vals := em["Value"].(type) {
	case []any:
		for _, v := range vals {
			vm, _ := v.(map[string]any)
			name, ok := vm["ValueName"].(string)
			if !ok {
				return a, fmt.Errorf("%s: an enumeration value without a ValueName", a.Name)
			}
			a.AllowableValues = append(a.AllowableValues, name)
		}
	case nil:
	default:
		return a, fmt.Errorf("%s: Value is %s, not a list", a.Name, describe(vals))
	}
	if d, ok := em["DefaultValue"]; ok {
		a.Default = attrValue(d)
	}
	return a, nil
}
