package api

import (
	"bytes"
	"encoding/json"
	"math"
	"slices"
	"strconv"
	"unicode/utf8"

	"github.com/anvil-metal/anvil/protocol"
)

// appendValue writes v, a value decoded from JSON or one of the API's own
// (links, string lists), as encoding/json would, minus HTML escaping.
// Node views are the hottest responses: this avoids the reflection and the
// copies encoding/json spends on map[string]any.
func appendValue(b *bytes.Buffer, v any) error {
	switch x := v.(type) {
	case nil:
		b.WriteString("null")
	case string:
		appendString(b, x)
	case bool:
		b.WriteString(strconv.FormatBool(x))
	case float64:
		return appendFloat(b, x)
	case int:
		b.WriteString(strconv.Itoa(x))
	case []link:
		return appendArray(b, x, func(b *bytes.Buffer, l link) error {
			b.WriteString(`{"href":`)
			appendString(b, l.Href)
			b.WriteString(`,"rel":`)
			appendString(b, l.Rel)
			b.WriteByte('}')
			return nil
		})
	case []string:
		return appendArray(b, x, func(b *bytes.Buffer, v string) error {
			appendString(b, v)
			return nil
		})
	case []any:
		return appendArray(b, x, appendValue)
	case map[string]any:
		return appendMap(b, x, nil)
	default:
		raw, err := json.Marshal(x)
		if err != nil {
			return err
		}
		b.Write(raw)
	}
	return nil
}

// appendArray writes x as a JSON array, each element by add; it stops at
// add's first error.
func appendArray[E any](b *bytes.Buffer, x []E, add func(*bytes.Buffer, E) error) error {
	b.WriteByte('[')
	for i, v := range x {
		if i > 0 {
			b.WriteByte(',')
		}
		if err := add(b, v); err != nil {
			return err
		}
	}
	b.WriteByte(']')
	return nil
}

// appendMap writes m with sorted keys, as encoding/json writes maps; the
// values hide (if not nil) picks are written as the masked string.
func appendMap(b *bytes.Buffer, m map[string]any, hide func(k string, v any) bool) error {
	var stack [16]string // the keys of most maps: no allocation for them
	keys := stack[:0]
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	b.WriteByte('{')
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(',')
		}
		appendString(b, k)
		b.WriteByte(':')
		v := m[k]
		if hide != nil && hide(k, v) {
			appendString(b, masked)
			continue
		}
		if err := appendValue(b, v); err != nil {
			return err
		}
	}
	b.WriteByte('}')
	return nil
}

const hexDigits = "0123456789abcdef"

// appendString writes s as a JSON string, escaping like encoding/json
// (minus HTML escaping, which API clients do not need).
func appendString(b *bytes.Buffer, s string) {
	b.WriteByte('"')
	appendStringBody(b, s)
	b.WriteByte('"')
}

// appendStringBody writes s escaped, without the quotes. Pieces of a
// string escaped one by one give the bytes of the whole escaped at once
// when each piece after the first starts with ASCII (an invalid UTF-8
// sequence cut by the split stays invalid byte by byte).
func appendStringBody(b *bytes.Buffer, s string) {
	start := 0
	for i := 0; i < len(s); {
		// Runs written as they are (most bytes), eight at a time.
		if i += protocol.PlainLen(s[i:]); i == len(s) {
			break
		}
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b.WriteString(s[start:i])
			switch c {
			case '"', '\\':
				b.WriteByte('\\')
				b.WriteByte(c)
			case '\n':
				b.WriteString(`\n`)
			case '\r':
				b.WriteString(`\r`)
			case '\t':
				b.WriteString(`\t`)
			case '\b':
				b.WriteString(`\b`)
			case '\f':
				b.WriteString(`\f`)
			default:
				b.WriteString(`\u00`)
				b.WriteByte(hexDigits[c>>4])
				b.WriteByte(hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b.WriteString(s[start:i])
			b.WriteString(`\ufffd`)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b.WriteString(s[start:i])
			b.WriteString(`\u202`)
			b.WriteByte(hexDigits[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	b.WriteString(s[start:])
}

// appendFloat formats like encoding/json: shortest representation, exponent
// form outside [1e-6, 1e21).
func appendFloat(b *bytes.Buffer, f float64) error {
	if math.IsInf(f, 0) || math.IsNaN(f) {
		return &json.UnsupportedValueError{Str: strconv.FormatFloat(f, 'g', -1, 64)}
	}
	abs := math.Abs(f)
	format := byte('f')
	if abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	buf := strconv.AppendFloat(make([]byte, 0, 24), f, format, -1, 64)
	if format == 'e' {
		// clean up e-09 to e-9, as encoding/json does
		n := len(buf)
		if n >= 4 && buf[n-4] == 'e' && buf[n-3] == '-' && buf[n-2] == '0' {
			buf[n-2] = buf[n-1]
			buf = buf[:n-1]
		}
	}
	b.Write(buf)
	return nil
}

// link is one entry of an Ironic links list.
type link struct {
	Href string `json:"href"`
	Rel  string `json:"rel"`
}
