package protocol

import (
	"errors"
	"fmt"
	"math/bits"
	"strings"
	"unicode/utf8"
)

// MaxJSONDepth bounds the nesting (objects and arrays together) of every
// JSON document the controller reads and stores. Clients decode what was
// stored: Python's json recurses once per level and gives up near 1,000,
// so one node nested thousands deep would break every Python client's
// fleet list. Ironic's own documents nest a handful of levels.
const MaxJSONDepth = 32

// JSONFault says what CheckJSON found wrong.
type JSONFault int

// The faults of CheckJSON. JSONSyntax is a document encoding/json refuses
// too; the others are valid JSON the store cannot keep or clients cannot
// read back.
const (
	JSONSyntax JSONFault = iota + 1
	JSONTooDeep
	// JSONNUL: PostgreSQL's text and jsonb refuse U+0000.
	JSONNUL
	// JSONInvalidUTF8: raw bytes that are not UTF-8 (PostgreSQL refuses
	// them; encoding/json silently turns them into U+FFFD).
	JSONInvalidUTF8
	// JSONSurrogate: an escaped UTF-16 surrogate without its pair, a
	// character that cannot be stored as UTF-8.
	JSONSurrogate
)

// JSONError is CheckJSON's finding and the byte offset where it is.
type JSONError struct {
	Fault  JSONFault
	Offset int
}

func (e *JSONError) Error() string {
	switch e.Fault {
	case JSONTooDeep:
		return fmt.Sprintf("nesting deeper than %d levels at offset %d", MaxJSONDepth, e.Offset)
	case JSONNUL:
		return fmt.Sprintf(`a string at offset %d contains a NUL character (\u0000), which cannot be stored`, e.Offset)
	case JSONInvalidUTF8:
		return fmt.Sprintf("a string at offset %d is not valid UTF-8", e.Offset)
	case JSONSurrogate:
		return fmt.Sprintf(`a string at offset %d holds a lone UTF-16 surrogate (\ud800-\udfff), which cannot be stored`, e.Offset)
	}
	return fmt.Sprintf("not valid JSON at offset %d", e.Offset)
}

// CheckJSON checks that b is one JSON document (surrounded by whitespace
// at most) nested at most MaxJSONDepth deep whose strings (keys and
// values) hold no NUL, no invalid UTF-8 and no lone surrogate escape. It
// returns nil or a *JSONError. It is one pass over the bytes without
// allocating, so it can run before every decode: the recursion is bounded
// by MaxJSONDepth, since a level too deep is refused before it is entered.
func CheckJSON(b []byte) error {
	s := jsonScanner{b: b}
	s.space()
	if err := s.value(); err != nil {
		return err
	}
	s.space()
	if s.i < len(s.b) {
		return s.fail(JSONSyntax, s.i)
	}
	return nil
}

// CheckStoredJSON is CheckJSON for a caller that decodes b next: a syntax
// error is left to its decoder (whose message the caller's clients know),
// so only what the decoder would let through is reported.
func CheckStoredJSON(b []byte) error {
	err := CheckJSON(b)
	if je := (*JSONError)(nil); errors.As(err, &je) && je.Fault == JSONSyntax {
		return nil
	}
	return err
}

// CleanString makes a string read from hardware (sysfs, DMI, IDENTIFY
// pages) storable: NULs are dropped and bytes that are not UTF-8 become
// U+FFFD, so the controller never refuses an agent's report (CheckJSON)
// because of odd firmware.
func CleanString(s string) string {
	if !strings.Contains(s, "\x00") && utf8.ValidString(s) {
		return s
	}
	return strings.ToValidUTF8(strings.ReplaceAll(s, "\x00", ""), "\uFFFD")
}

// PlainLen is the length of the longest prefix of s whose bytes a JSON
// string holds as they are: printable ASCII other than '"' and '\\'. Most
// bytes of a document are in such runs (a configdrive is one), so it
// reads eight bytes at a time: a word has no byte to stop at when none
// has its high bit set, none is below 0x20 (subtracting 0x20 from each
// byte borrows) and none equals '"' or '\\' (xor leaves a zero byte, and
// subtracting one from it borrows). A borrow only flags bytes above the
// one that caused it, so the lowest flagged byte is the first to stop at.
func PlainLen[T string | []byte](s T) int {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	i := 0
	for ; i+8 <= len(s); i += 8 {
		x := uint64(s[i]) | uint64(s[i+1])<<8 | uint64(s[i+2])<<16 | uint64(s[i+3])<<24 |
			uint64(s[i+4])<<32 | uint64(s[i+5])<<40 | uint64(s[i+6])<<48 | uint64(s[i+7])<<56
		quote, backslash := x^(ones*'"'), x^(ones*'\\')
		if stop := (x | (x - ones*0x20) | (quote - ones) | (backslash - ones)) & highs; stop != 0 {
			return i + bits.TrailingZeros64(stop)/8
		}
	}
	for ; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == '"' || c == '\\' || c >= utf8.RuneSelf {
			break
		}
	}
	return i
}

type jsonScanner struct {
	b     []byte
	i     int // next byte
	depth int
}

func (s *jsonScanner) fail(f JSONFault, at int) error { return &JSONError{Fault: f, Offset: at} }

// peek is the next byte, 0 at the end (never a byte a caller expects).
func (s *jsonScanner) peek() byte {
	if s.i < len(s.b) {
		return s.b[s.i]
	}
	return 0
}

func (s *jsonScanner) space() {
	b, i := s.b, s.i
	for i < len(b) && (b[i] == ' ' || b[i] == '\n' || b[i] == '\t' || b[i] == '\r') {
		i++
	}
	s.i = i
}

func (s *jsonScanner) value() error {
	switch c := s.peek(); {
	case c == '{':
		return s.container('}')
	case c == '[':
		return s.container(']')
	case c == '"':
		return s.str()
	case c == '-' || c >= '0' && c <= '9':
		return s.number()
	case c == 't':
		return s.literal("true")
	case c == 'f':
		return s.literal("false")
	case c == 'n':
		return s.literal("null")
	}
	return s.fail(JSONSyntax, s.i)
}

// container scans an object (end '}') or array (end ']') from its opening
// byte.
func (s *jsonScanner) container(end byte) error {
	if s.depth++; s.depth > MaxJSONDepth {
		return s.fail(JSONTooDeep, s.i)
	}
	s.i++
	s.space()
	if s.peek() == end {
		s.i++
		s.depth--
		return nil
	}
	for {
		if end == '}' {
			if s.peek() != '"' {
				return s.fail(JSONSyntax, s.i)
			}
			if err := s.str(); err != nil {
				return err
			}
			s.space()
			if s.peek() != ':' {
				return s.fail(JSONSyntax, s.i)
			}
			s.i++
			s.space()
		}
		if err := s.value(); err != nil {
			return err
		}
		s.space()
		switch s.peek() {
		case ',':
			s.i++
			s.space()
		case end:
			s.i++
			s.depth--
			return nil
		default:
			return s.fail(JSONSyntax, s.i)
		}
	}
}

// str scans a string from its opening quote.
func (s *jsonScanner) str() error {
	s.i++
	for {
		// Most of a document's bytes are runs of plain ASCII in strings.
		s.i += PlainLen(s.b[s.i:])
		if s.i >= len(s.b) {
			return s.fail(JSONSyntax, s.i)
		}
		switch c := s.b[s.i]; {
		case c == '"':
			s.i++
			return nil
		case c == '\\':
			if err := s.escape(); err != nil {
				return err
			}
		case c == 0:
			return s.fail(JSONNUL, s.i)
		case c < 0x20:
			return s.fail(JSONSyntax, s.i)
		default:
			// utf8 refuses encoded surrogates (ED A0 80...) too.
			r, n := utf8.DecodeRune(s.b[s.i:])
			if r == utf8.RuneError && n == 1 {
				return s.fail(JSONInvalidUTF8, s.i)
			}
			s.i += n
		}
	}
}

// escape scans one escape sequence from its backslash; a \u escape of a
// high surrogate must be followed by the escape of a low one.
func (s *jsonScanner) escape() error {
	at := s.i
	switch s.byteAt(s.i + 1) {
	case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
		s.i += 2
		return nil
	case 'u':
	default:
		return s.fail(JSONSyntax, s.i+1)
	}
	r, ok := s.hex4(s.i + 2)
	if !ok {
		return s.fail(JSONSyntax, s.i+2)
	}
	s.i += 6
	switch {
	case r == 0:
		return s.fail(JSONNUL, at)
	case r >= 0xDC00 && r <= 0xDFFF:
		return s.fail(JSONSurrogate, at)
	case r >= 0xD800 && r <= 0xDBFF:
		if s.byteAt(s.i) != '\\' || s.byteAt(s.i+1) != 'u' {
			return s.fail(JSONSurrogate, at)
		}
		lo, ok := s.hex4(s.i + 2)
		if !ok {
			return s.fail(JSONSyntax, s.i+2)
		}
		if lo < 0xDC00 || lo > 0xDFFF {
			return s.fail(JSONSurrogate, at)
		}
		s.i += 6
	}
	return nil
}

func (s *jsonScanner) byteAt(i int) byte {
	if i < len(s.b) {
		return s.b[i]
	}
	return 0
}

// hex4 reads the four hex digits of a \u escape at i.
func (s *jsonScanner) hex4(i int) (rune, bool) {
	if i+4 > len(s.b) {
		return 0, false
	}
	var r rune
	for _, c := range s.b[i : i+4] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c -= 'a' - 10
		case c >= 'A' && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}

// number scans -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func (s *jsonScanner) number() error {
	if s.peek() == '-' {
		s.i++
	}
	switch c := s.peek(); {
	case c == '0':
		s.i++
	case c >= '1' && c <= '9':
		s.digits()
	default:
		return s.fail(JSONSyntax, s.i)
	}
	if s.peek() == '.' {
		s.i++
		if !s.digits() {
			return s.fail(JSONSyntax, s.i)
		}
	}
	if c := s.peek(); c == 'e' || c == 'E' {
		s.i++
		if c := s.peek(); c == '+' || c == '-' {
			s.i++
		}
		if !s.digits() {
			return s.fail(JSONSyntax, s.i)
		}
	}
	return nil
}

// digits scans [0-9]* and says whether there was one.
func (s *jsonScanner) digits() bool {
	start := s.i
	for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
		s.i++
	}
	return s.i > start
}

func (s *jsonScanner) literal(lit string) error {
	if len(s.b)-s.i < len(lit) || string(s.b[s.i:s.i+len(lit)]) != lit {
		return s.fail(JSONSyntax, s.i)
	}
	s.i += len(lit)
	return nil
}

// WithoutNUL returns the JSON text b (as encoding/json writes it) with
// every NUL character escape (\u0000) in its strings replaced by U+FFFD's
// (\ufffd), so CheckJSON accepts it. The agent sends what it read from
// hardware, and a firmware string with a NUL in it must not get a whole
// heartbeat refused. A backslash appears in JSON only inside strings, and
// each escape is read as a whole, so an escaped backslash followed by
// "u0000" is left alone. b is changed in place when there is anything to
// change.
func WithoutNUL(b []byte) []byte {
	for i := 0; i+1 < len(b); i++ {
		if b[i] != '\\' {
			continue
		}
		if b[i+1] == 'u' && i+6 <= len(b) && string(b[i+2:i+6]) == "0000" {
			copy(b[i+2:i+6], "fffd")
			i += 5
			continue
		}
		i++ // the escaped character: it never starts another escape
	}
	return b
}
