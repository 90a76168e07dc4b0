package inspectrules

// Variable interpolation as Ironic does it: a string argument is a Python
// format string (str.format) over node, inventory, plugin_data and, in a
// loop, item. "{inventory[cpu][count]}" indexes dictionaries and lists,
// "{node.driver}" reads a node field. Whatever fails to format (a missing
// key, a bad index, a stray brace) leaves the string as it was, as
// Ironic's safe_format; only is-empty reads a missing key as None.

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
)

// object is a namespace read with attributes ({node.driver}), not with
// indexes: the node, as Ironic's node object.
type object map[string]any

// scope is what replacement fields may name.
type scope struct {
	vars map[string]any
	// masked names the keys whose values read as "***" (Ironic's
	// ShallowMaskDict over inventory and plugin data).
	masked func(key string) bool
	// maskNode also masks the node's fields (the log action's view).
	maskNode bool
}

// errMissing is Python's KeyError: a name or key that is not there.
var errMissing = errorf("missing key")

// formatString formats s as Python's str.format(**vars).
func (sc *scope) formatString(s string) (string, error) {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch c {
		case '}':
			if i+1 < len(s) && s[i+1] == '}' {
				b.WriteByte('}')
				i++
				continue
			}
			return "", errorf("Single '}' encountered in format string")
		case '{':
			if i+1 < len(s) && s[i+1] == '{' {
				b.WriteByte('{')
				i++
				continue
			}
			end, err := fieldEnd(s, i+1)
			if err != nil {
				return "", err
			}
			out, err := sc.field(s[i+1 : end])
			if err != nil {
				return "", err
			}
			b.WriteString(out)
			i = end
		default:
			b.WriteByte(c)
		}
	}
	return b.String(), nil
}

// fieldEnd finds the '}' closing the field opened before start, skipping
// brackets in the name and nested fields in the spec.
func fieldEnd(s string, start int) (int, error) {
	depth, bracket := 1, false
	for i := start; i < len(s); i++ {
		switch c := s[i]; {
		case bracket:
			bracket = c != ']'
		case c == '[':
			bracket = true
		case c == '{':
			depth++
		case c == '}':
			if depth--; depth == 0 {
				return i, nil
			}
		}
	}
	return 0, errorf("expected '}' before end of string")
}

// field renders one replacement field: name[.attr|[key]]...[!conv][:spec].
func (sc *scope) field(f string) (string, error) {
	name, conv, spec := splitField(f)
	if spec != "" {
		// Format specs (width, precision) are not implemented: the
		// string is left unformatted, as any failing field leaves it.
		return "", errorf("format spec %q is not supported", spec)
	}
	v, masked, err := sc.resolve(name)
	if err != nil {
		return "", err
	}
	switch conv {
	case "", "s":
		return pyStr(v, sc.maskFn(masked)), nil
	case "r", "a":
		return pyRepr(v, sc.maskFn(masked)), nil
	}
	return "", errorf("Unknown conversion specifier %s", conv)
}

func (sc *scope) maskFn(masked bool) func(string) bool {
	if masked {
		return sc.masked
	}
	return nil
}

// splitField splits a field at the first '!' or ':' outside brackets.
func splitField(f string) (name, conv, spec string) {
	bracket := false
	for i := 0; i < len(f); i++ {
		switch c := f[i]; {
		case bracket:
			bracket = c != ']'
		case c == '[':
			bracket = true
		case c == ':':
			return f[:i], "", f[i+1:]
		case c == '!':
			name, rest := f[:i], f[i+1:]
			conv, spec, _ = strings.Cut(rest, ":")
			return name, conv, spec
		}
	}
	return f, "", ""
}

// resolve walks a field name. masked says whether the value came from a
// namespace whose secrets are masked.
func (sc *scope) resolve(name string) (any, bool, error) {
	end := strings.IndexAny(name, ".[")
	if end < 0 {
		end = len(name)
	}
	first := name[:end]
	if first == "" || isDigits(first) {
		return nil, false, errorf("Replacement index out of range for positional args tuple")
	}
	v, ok := sc.vars[first]
	if !ok {
		return nil, false, fmt.Errorf("%w: %s", errMissing, pyRepr(first, nil))
	}
	_, isNode := v.(object)
	masked := sc.masked != nil && (!isNode || sc.maskNode)
	rest := name[end:]
	for rest != "" {
		var key string
		attr := rest[0] == '.'
		if attr {
			rest = rest[1:]
			end := strings.IndexAny(rest, ".[")
			if end < 0 {
				end = len(rest)
			}
			key, rest = rest[:end], rest[end:]
			if key == "" {
				return nil, false, errorf("Empty attribute in format string")
			}
		} else {
			end := strings.IndexByte(rest, ']')
			if end < 0 {
				return nil, false, errorf("Missing ']' in format string")
			}
			key, rest = rest[1:end], rest[end+1:]
			if key == "" {
				return nil, false, errorf("Empty attribute in format string")
			}
			if rest != "" && rest[0] != '.' && rest[0] != '[' {
				return nil, false, errorf("Only '.' or '[' may follow ']' in format field specifier")
			}
		}
		next, err := step(v, key, attr)
		if err != nil {
			return nil, false, err
		}
		if masked && sc.masked(key) {
			return "***", false, nil
		}
		v = next
	}
	return v, masked, nil
}

// step reads one attribute or index as Python would: a dict by key (a
// number in brackets is an int, which no JSON key is), a list or string
// by int, the node by attribute only.
func step(v any, key string, attr bool) (any, error) {
	if o, ok := v.(object); ok {
		if !attr {
			return nil, errorf("'Node' object is not subscriptable")
		}
		x, ok := o[key]
		if !ok {
			return nil, errorf("'Node' object has no attribute %s", pyRepr(key, nil))
		}
		return x, nil
	}
	if attr {
		return nil, errorf("%s object has no attribute %s", pyRepr(pyType(v), nil), pyRepr(key, nil))
	}
	switch x := v.(type) {
	case map[string]any:
		if isDigits(key) {
			return nil, fmt.Errorf("%w: %s", errMissing, key)
		}
		val, ok := x[key]
		if !ok {
			return nil, fmt.Errorf("%w: %s", errMissing, pyRepr(key, nil))
		}
		return val, nil
	case []any:
		i, err := strconv.Atoi(key)
		if err != nil || !isDigits(key) {
			return nil, errorf("list indices must be integers or slices, not str")
		}
		if i >= len(x) {
			return nil, errorf("list index out of range")
		}
		return x[i], nil
	case string:
		i, err := strconv.Atoi(key)
		if err != nil || !isDigits(key) {
			return nil, errorf("string indices must be integers, not 'str'")
		}
		r := []rune(x)
		if i >= len(r) {
			return nil, errorf("string index out of range")
		}
		return string(r[i]), nil
	}
	return nil, errorf("%s object is not subscriptable", pyRepr(pyType(v), nil))
}

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// safeFormat is Ironic's safe_format: a string that fails to format stays
// as it was, except that a missing key reads as None for is-empty.
func (sc *scope) safeFormat(v any, op string) any {
	s, ok := v.(string)
	if !ok {
		return v
	}
	out, err := sc.formatString(s)
	if err != nil {
		if errors.Is(err, errMissing) && op == "is-empty" {
			return nil
		}
		return s
	}
	return out
}

// interpolate is Ironic's interpolate_variables: strings are formatted,
// dicts (keys and values) and lists recursively. In a loop a string is
// formatted twice, so an item may itself hold "{inventory[...]}".
func (sc *scope) interpolate(v any, inLoop bool, op string) any {
	if inLoop {
		v = sc.safeFormat(v, op)
	}
	switch x := v.(type) {
	case string:
		return sc.safeFormat(x, op)
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			key, _ := sc.safeFormat(k, op).(string) // nil (is-empty): Python's None key
			out[key] = sc.interpolate(e, inLoop, op)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			if s, ok := e.(string); ok {
				out[i] = sc.safeFormat(s, op)
			} else {
				out[i] = sc.interpolate(e, inLoop, op)
			}
		}
		return out
	}
	return v
}

// pyType is the Python type name of a JSON value.
func pyType(v any) string {
	switch x := v.(type) {
	case nil:
		return "NoneType"
	case bool:
		return "bool"
	case float64:
		if x == math.Trunc(x) && math.Abs(x) < 1e16 {
			return "int"
		}
		return "float"
	case int, int64:
		return "int"
	case string:
		return "str"
	case []any:
		return "list"
	case map[string]any:
		return "dict"
	case object:
		return "Node"
	}
	return fmt.Sprintf("%T", v)
}

// pyStr is Python's str() of a JSON value; mask, if set, hides the
// values of the keys it names.
func pyStr(v any, mask func(string) bool) string {
	if s, ok := v.(string); ok {
		return s
	}
	return pyRepr(v, mask)
}

// pyRepr is Python's repr() of a JSON value. Dicts are shown in key order
// (a Go map keeps no insertion order).
func pyRepr(v any, mask func(string) bool) string {
	switch x := v.(type) {
	case nil:
		return "None"
	case bool:
		if x {
			return "True"
		}
		return "False"
	case float64:
		if x == math.Trunc(x) && math.Abs(x) < 1e16 {
			return strconv.FormatInt(int64(x), 10)
		}
		if math.IsInf(x, 0) || math.IsNaN(x) {
			return map[bool]string{true: "inf", false: "-inf"}[x > 0]
		}
		return strconv.FormatFloat(x, 'g', -1, 64)
	case int:
		return strconv.Itoa(x)
	case int64:
		return strconv.FormatInt(x, 10)
	case string:
		return quotePy(x)
	case []any:
		parts := make([]string, len(x))
		for i, e := range x {
			parts[i] = pyRepr(e, mask)
		}
		return "[" + strings.Join(parts, ", ") + "]"
	case map[string]any:
		return reprMap(x, mask)
	case object:
		return "Node(" + reprMap(x, mask) + ")"
	}
	return fmt.Sprint(v)
}

func reprMap(x map[string]any, mask func(string) bool) string {
	keys := make([]string, 0, len(x))
	for k := range x {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		val := x[k]
		if mask != nil && mask(k) {
			val = "***"
		}
		parts[i] = quotePy(k) + ": " + pyRepr(val, mask)
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

// quotePy quotes as Python's repr of a str: single quotes unless the
// string has one and no double quote.
func quotePy(s string) string {
	q := byte('\'')
	if strings.IndexByte(s, '\'') >= 0 && strings.IndexByte(s, '"') < 0 {
		q = '"'
	}
	var b strings.Builder
	b.WriteByte(q)
	for _, r := range s {
		switch {
		case r == '\\':
			b.WriteString(`\\`)
		case r == rune(q):
			b.WriteByte('\\')
			b.WriteRune(r)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\x%02x`, r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte(q)
	return b.String()
}
