package erasure

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// checkStrict refuses JSON text that two readers could read differently,
// since the signature covers only what this package's decoder reads: a
// duplicate object key at any depth (encoding/json keeps the last, many
// readers and people the first) or one a case-insensitive reader takes for
// another ("Serial", "ſerial" beside "serial"); invalid UTF-8 or an
// escaped lone UTF-16 surrogate in a string (replaced by U+FFFD here,
// kept or refused elsewhere, so two texts would verify alike); a NUL in a
// string (C-string readers stop there); anything after the JSON value.
// Verify and VerifyFile call it before anything else reads the text.
func checkStrict(data []byte) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber() // numbers as written: no float range errors
	var stack nesting
	done := false
	for {
		start := dec.InputOffset()
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			if !done {
				return errors.New("not JSON: unexpected end of the text")
			}
			return nil
		}
		if err != nil {
			return fmt.Errorf("not JSON: %w", err)
		}
		if done {
			return errors.New("data after the JSON value")
		}
		if top := stack.top(); top != nil && top.object && !top.inValue {
			// A key, or the end of the object.
			if key, ok := tok.(string); ok {
				if err := top.addKey(key, literal(data, start, dec.InputOffset()), stack[:len(stack)-1]); err != nil {
					return err
				}
				continue
			}
			stack = stack[:len(stack)-1]
		} else {
			switch t := tok.(type) {
			case json.Delim:
				if t == '{' || t == '[' {
					f := &frame{object: t == '{'}
					if f.object {
						f.seen = map[string]string{}
					}
					if stack = append(stack, f); len(stack) > maxDepth {
						return fmt.Errorf("not JSON: nested deeper than %d levels, as encoding/json refuses", maxDepth)
					}
					continue
				}
				stack = stack[:len(stack)-1] // ']': '}' comes as the key position's token
			case string:
				if p := stringProblem(literal(data, start, dec.InputOffset()), t); p != "" {
					return fmt.Errorf("%s in the string at %s", p, stack)
				}
			}
		}
		// A value is complete: its container moves on to the next.
		if top := stack.top(); top != nil {
			top.valueDone()
		} else {
			done = true
		}
	}
}

// maxDepth is encoding/json's limit of nesting, which its Decoder.Token
// does not apply: deeper text is not JSON to Canonical.
const maxDepth = 10000

// frame is an object or array being read.
type frame struct {
	object  bool
	inValue bool              // object: a key was read, its value comes
	key     string            // object: the last key
	index   int               // array: the index of the element being read
	seen    map[string]string // object: folded key -> the key as written
}

func (f *frame) valueDone() {
	if f.object {
		f.inValue = false
	} else {
		f.index++
	}
}

// addKey records a key of the object at at, refusing a bad or
// duplicate one.
func (f *frame) addKey(key string, lit []byte, at nesting) error {
	if p := stringProblem(lit, key); p != "" {
		return fmt.Errorf("%s in the key %s at %s", p, asWritten(lit, key), at)
	}
	// Two foldings: encoding/json's (the smallest rune of each simple
	// case-folding orbit, as bytes.EqualFold) and upper(lower(r)), which
	// also joins 'İ' and 'ı' with 'i'; a key equal to another under
	// either is refused.
	for _, folded := range []string{"f" + foldOrbit(key), "u" + foldUpperLower(key)} {
		prev, dup := f.seen[folded]
		switch {
		case dup && prev == key:
			return fmt.Errorf("duplicate key %q at %s: JSON readers differ in which value they take", key, at)
		case dup:
			return fmt.Errorf("duplicate key %q at %s: a case-insensitive JSON reader (Go's encoding/json) takes it for %q", key, at, prev)
		}
		f.seen[folded] = key
	}
	f.key, f.inValue = key, true
	return nil
}

// nesting is the objects and arrays around the value being read, outermost
// first. Its String names where that value is: record.media.serial,
// records[1].record, x["a b"]; made only for an error, as the names of a
// deep text are long.
type nesting []*frame

func (n nesting) top() *frame {
	if len(n) == 0 {
		return nil
	}
	return n[len(n)-1]
}

func (n nesting) String() string {
	var b strings.Builder
	for _, f := range n {
		switch {
		case !f.object:
			fmt.Fprintf(&b, "[%d]", f.index)
		case !plainName(f.key):
			b.WriteString("[" + strconv.Quote(f.key) + "]")
		case b.Len() > 0:
			b.WriteString("." + f.key)
		default:
			b.WriteString(f.key)
		}
	}
	if b.Len() == 0 {
		return "the top level"
	}
	return b.String()
}

func plainName(key string) bool {
	return key != "" && strings.IndexFunc(key, func(r rune) bool {
		return !(r == '_' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9')
	}) < 0
}

func foldOrbit(s string) string {
	return strings.Map(func(r rune) rune {
		for {
			next := unicode.SimpleFold(r)
			if next <= r {
				return next
			}
			r = next
		}
	}, s)
}

func foldUpperLower(s string) string {
	return strings.Map(func(r rune) rune { return unicode.ToUpper(unicode.ToLower(r)) }, s)
}

// literal is the string token that ends at end as written: the bytes from
// start hold whitespace, a ',' or ':' the decoder skipped, then it.
func literal(data []byte, start, end int64) []byte {
	if start < 0 || end > int64(len(data)) || start > end {
		return nil
	}
	lit := data[start:end]
	if i := bytes.IndexByte(lit, '"'); i >= 0 {
		return lit[i:]
	}
	return lit
}

// asWritten shows a bad key as the text has it: its literal, escapes and
// all, when that is valid UTF-8 (decoding made U+FFFD of a lone
// surrogate), else Go-quoted with the invalid bytes as \x escapes.
func asWritten(lit []byte, key string) string {
	switch {
	case len(lit) < 2:
		return strconv.Quote(key)
	case utf8.Valid(lit):
		return string(lit)
	}
	return strconv.Quote(string(lit[1 : len(lit)-1]))
}

// stringProblem says what is wrong with the string s, written as lit
// (with its quotes and escapes), or "" when nothing is.
func stringProblem(lit []byte, s string) string {
	switch {
	case !utf8.Valid(lit):
		return "invalid UTF-8"
	case strings.IndexByte(s, 0) >= 0:
		return `a NUL character (\u0000)`
	case loneSurrogate(lit):
		return "an escaped lone UTF-16 surrogate"
	}
	return ""
}

// loneSurrogate reports a \uD800-\uDFFF escape that is not the high half
// of a pair followed by the low half.
func loneSurrogate(lit []byte) bool {
	for i := 0; i < len(lit); i++ {
		if lit[i] != '\\' {
			continue
		}
		i++ // to the escaped character, skipped: it never starts another escape
		r := escapedRune(lit, i)
		switch {
		case r < 0xD800 || r > 0xDFFF: // not a surrogate, or not a \u escape
		case r >= 0xDC00:
			return true // a low half first
		case i+5 < len(lit) && lit[i+5] == '\\' && isLowSurrogate(escapedRune(lit, i+6)):
			i += 10 // to the low half's last hex digit
		default:
			return true
		}
	}
	return false
}

func isLowSurrogate(r rune) bool { return r >= 0xDC00 && r <= 0xDFFF }

// escapedRune is the rune of the \u escape whose 'u' is at lit[i], or -1.
func escapedRune(lit []byte, i int) rune {
	if i < 0 || i+5 > len(lit) || lit[i] != 'u' {
		return -1
	}
	n, err := strconv.ParseUint(string(lit[i+1:i+5]), 16, 16)
	if err != nil {
		return -1
	}
	return rune(n)
}

// exactMembers decodes the JSON object raw (already through checkStrict)
// into its members, refusing a key that is not exactly one of names and a
// name that is missing: encoding/json would take "Record" for "record".
func exactMembers(raw []byte, what string, names ...string) (map[string]json.RawMessage, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil || m == nil {
		return nil, fmt.Errorf("%s is not a JSON object", what)
	}
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if !slices.Contains(names, k) {
			return nil, fmt.Errorf("%s has the field %q: its fields are exactly %s", what, k, strings.Join(names, ", "))
		}
	}
	for _, n := range names {
		if _, ok := m[n]; !ok {
			return nil, fmt.Errorf("%s has no field %q", what, n)
		}
	}
	return m, nil
}
