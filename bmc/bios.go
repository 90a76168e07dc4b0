package bmc

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// BIOS attribute types, as Redfish attribute registries spell them.
const (
	AttrEnumeration = "Enumeration"
	AttrString      = "String"
	AttrInteger     = "Integer"
	AttrBoolean     = "Boolean"
	AttrPassword    = "Password"
)

// BIOS is a system's BIOS as its BMC reports it.
//
// Values are string, int64, bool or nil (a password, which BMCs read as
// null); anything else a BMC sends (a float, an object) is kept as decoded.
type BIOS struct {
	// Current holds the values in effect (Redfish Bios.Attributes).
	Current map[string]any
	// Pending holds the values set but not yet applied, which a boot
	// applies (Bios/Settings).
	Pending map[string]any
	// Registry describes the attributes; nil when the BMC publishes none,
	// which NoRegistry then explains. Without it nothing can be validated
	// before it is sent.
	Registry   *Registry
	NoRegistry string
	// RegistryID is the registry the BMC names (Bios.AttributeRegistry).
	RegistryID string
	// SupportedApplyTimes are the BMC's @Redfish.Settings
	// SupportedApplyTimes ("OnReset", "Immediate", ...), nil if unlisted.
	SupportedApplyTimes []string
}

// Registry is a BIOS attribute registry.
type Registry struct {
	// ID is the registry's id (Bios.AttributeRegistry).
	ID         string
	Attributes map[string]Attribute
}

// Attribute is one registry entry. Bounds and lengths are nil when the
// registry gives none.
type Attribute struct {
	Name        string
	Type        string // AttrEnumeration, AttrString, ...
	DisplayName string
	// AllowableValues are an enumeration's ValueNames.
	AllowableValues []string
	LowerBound      *int64
	UpperBound      *int64
	ScalarIncrement *int64
	MinLength       *int64
	MaxLength       *int64
	// ValueExpression is a regular expression a string must match.
	ValueExpression string
	ReadOnly        bool
	// Immutable attributes cannot be changed by a client either.
	Immutable bool
	// ResetRequired: the value takes effect only after a reset.
	ResetRequired bool
	// Unique: the value is specific to this system (IsSystemUniqueProperty),
	// so it must not be copied between nodes.
	Unique    bool
	WriteOnly bool
	Hidden    bool
	// Default is DefaultValue (nil if the registry gives none).
	Default any
}

// ErrInvalidBIOSSettings: requested BIOS settings do not fit the registry.
// Returned (wrapped in a *BIOSSettingsError) before anything is sent.
var ErrInvalidBIOSSettings = errors.New("bmc: invalid BIOS settings")

// BIOSProblem is one rejected attribute.
type BIOSProblem struct {
	Name   string
	Reason string
}

// BIOSSettingsError lists every rejected attribute, so that an API can
// answer them all at once instead of one per round trip.
type BIOSSettingsError struct {
	Problems []BIOSProblem
}

func (e *BIOSSettingsError) Error() string {
	parts := make([]string, 0, len(e.Problems))
	for _, p := range e.Problems {
		parts = append(parts, p.Name+": "+p.Reason)
	}
	return ErrInvalidBIOSSettings.Error() + ": " + strings.Join(parts, "; ")
}

func (e *BIOSSettingsError) Unwrap() error { return ErrInvalidBIOSSettings }

// ValidateBIOS checks requested settings against the registry and returns
// a *BIOSSettingsError naming each bad attribute, in name order.
// Integers may be given as any Go integer, an integral float64 (what
// encoding/json decodes) or a json.Number.
func ValidateBIOS(reg Registry, settings map[string]any) error {
	var probs []BIOSProblem
	for _, name := range slices.Sorted(maps.Keys(settings)) {
		a, ok := reg.Attributes[name]
		if !ok {
			probs = append(probs, BIOSProblem{name, "unknown attribute (not in registry " + reg.ID + ")"})
			continue
		}
		if _, err := a.normalize(settings[name]); err != nil {
			probs = append(probs, BIOSProblem{name, err.Error()})
		}
	}
	if len(probs) > 0 {
		return &BIOSSettingsError{Problems: probs}
	}
	return nil
}

// normalize checks v against the attribute and returns it as sent on the
// wire: string, int64 or bool.
func (a Attribute) normalize(v any) (any, error) {
	switch {
	case a.ReadOnly:
		return nil, errors.New("read-only")
	case a.Immutable:
		return nil, errors.New("immutable")
	}
	switch a.Type {
	case AttrBoolean:
		b, ok := v.(bool)
		if !ok {
			return nil, fmt.Errorf("wants a boolean, got %s", describe(v))
		}
		return b, nil
	case AttrInteger:
		n, ok := asInt64(v)
		if !ok {
			return nil, fmt.Errorf("wants an integer, got %s", describe(v))
		}
		return n, a.checkInteger(n)
	case AttrEnumeration, AttrString, AttrPassword:
		s, ok := v.(string)
		if !ok {
			return nil, fmt.Errorf("wants a string, got %s", describe(v))
		}
		if a.Type == AttrEnumeration {
			if !slices.Contains(a.AllowableValues, s) {
				return nil, fmt.Errorf("%q is not one of %s", s, strings.Join(a.AllowableValues, ", "))
			}
			return s, nil
		}
		return s, a.checkString(s)
	}
	return nil, fmt.Errorf("attribute type %q cannot be set", a.Type)
}

func (a Attribute) checkInteger(n int64) error {
	if a.LowerBound != nil && n < *a.LowerBound {
		return fmt.Errorf("%d is below the lower bound %d", n, *a.LowerBound)
	}
	if a.UpperBound != nil && n > *a.UpperBound {
		return fmt.Errorf("%d is above the upper bound %d", n, *a.UpperBound)
	}
	if inc := a.ScalarIncrement; inc != nil && *inc > 1 {
		base := int64(0)
		if a.LowerBound != nil {
			base = *a.LowerBound
		}
		// Subtracting in uint64 cannot overflow for n >= base.
		if n >= base && uint64(n-base)%uint64(*inc) != 0 || n < base && uint64(base-n)%uint64(*inc) != 0 {
			return fmt.Errorf("%d is not a multiple of %d from %d", n, *inc, base)
		}
	}
	return nil
}

func (a Attribute) checkString(s string) error {
	// What is echoed: never a password, not even a wrong one.
	show := strconv.Quote(s)
	if a.Type == AttrPassword {
		show = "the password"
	}
	n := int64(utf8.RuneCountInString(s))
	if a.MinLength != nil && n < *a.MinLength {
		return fmt.Errorf("%s is shorter than %d characters", show, *a.MinLength)
	}
	if a.MaxLength != nil && n > *a.MaxLength {
		return fmt.Errorf("%s is longer than %d characters", show, *a.MaxLength)
	}
	if a.ValueExpression != "" {
		re, err := regexp.Compile(a.ValueExpression)
		if err != nil {
			// The BMC's expression may use syntax Go's RE2 lacks
			// (lookarounds): the BMC will check it itself.
			return nil
		}
		if !re.MatchString(s) {
			return fmt.Errorf("%s does not match %s", show, a.ValueExpression)
		}
	}
	return nil
}

// asInt64 accepts every way a caller may hold an integer.
func asInt64(v any) (int64, bool) {
	switch n := v.(type) {
	case int:
		return int64(n), true
	case int32:
		return int64(n), true
	case int64:
		return n, true
	case uint32:
		return int64(n), true
	case uint64:
		if n > math.MaxInt64 {
			return 0, false
		}
		return int64(n), true
	case float64:
		// 2^63 is exactly representable and just out of range.
		if n != math.Trunc(n) || n < math.MinInt64 || n >= math.MaxInt64 {
			return 0, false
		}
		return int64(n), true
	case json.Number:
		if i, err := n.Int64(); err == nil {
			return i, true
		}
		f, err := n.Float64()
		if err != nil {
			return 0, false
		}
		return asInt64(f)
	}
	return 0, false
}

func describe(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case string:
		return "a string"
	case bool:
		return "a boolean"
	case map[string]any:
		return "an object"
	case []any:
		return "a list"
	}
	if _, ok := asInt64(v); ok {
		return "an integer"
	}
	f, isNum := v.(float64)
	if n, ok := v.(json.Number); ok {
		var err error
		f, err = n.Float64()
		isNum = err == nil || errors.Is(err, strconv.ErrRange)
	}
	switch {
	case isNum && f == math.Trunc(f):
		return "an integer out of the 64-bit range"
	case isNum:
		return "a number with a fraction"
	}
	return fmt.Sprintf("%T", v)
}

// sameValue compares BIOS values across the ways integers are held.
func sameValue(a, b any) bool {
	if x, ok := asInt64(a); ok {
		y, ok := asInt64(b)
		return ok && x == y
	}
	switch x := a.(type) {
	case string, bool, nil:
		return a == b
	case float64:
		y, ok := b.(float64)
		return ok && x == y
	}
	ja, err1 := json.Marshal(a)
	jb, err2 := json.Marshal(b)
	return err1 == nil && err2 == nil && string(ja) == string(jb)
}

// Diff returns the requested settings that differ from current, so that a
// step can skip a write, and the reboot it costs, that changes nothing.
// A value current reads as null (a password) always counts as changed.
func Diff(current, requested map[string]any) map[string]any {
	changed := map[string]any{}
	for k, v := range requested {
		cur, ok := current[k]
		if !ok || cur == nil || !sameValue(cur, v) {
			changed[k] = v
		}
	}
	return changed
}

// VerifyApplied checks that every requested setting reads back as asked
// and names, for each that does not, the value asked and the value read
// (the error wraps ErrVerify). Attributes that read back null (passwords)
// cannot be checked and are skipped; missing ones are errors.
func VerifyApplied(requested, readBack map[string]any) error {
	var bad []string
	for _, k := range slices.Sorted(maps.Keys(requested)) {
		got, ok := readBack[k]
		switch {
		case !ok:
			bad = append(bad, fmt.Sprintf("%s: asked %s, not reported", k, show(requested[k])))
		case got == nil:
		case !sameValue(requested[k], got):
			bad = append(bad, fmt.Sprintf("%s: asked %s, read back %s", k, show(requested[k]), show(got)))
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("%w: BIOS settings not applied: %s", ErrVerify, strings.Join(bad, "; "))
	}
	return nil
}

func show(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}
