package api

import (
	_ "embed"
	"regexp"
	"strings"
	"unicode/utf8"
)

// standardTraitsText lists os-traits' standard names, one a line (see its
// header for where it came from).
//
//go:embed ostraits.txt
var standardTraitsText string

// customTraitRE is Ironic's CUSTOM_TRAIT_PATTERN.
var customTraitRE = regexp.MustCompile(`^CUSTOM_[A-Z0-9_]+$`)

// traitNames knows the names Ironic 21.4 accepts as traits (its
// TRAITS_SCHEMA): a standard os-traits name or CUSTOM_[A-Z0-9_]+, 1 to
// 255 characters.
type traitNames map[string]struct{}

func newTraitNames() traitNames {
	t := traitNames{}
	for _, line := range strings.Split(standardTraitsText, "\n") {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
			t[line] = struct{}{}
		}
	}
	return t
}

// check refuses a trait as Ironic's JSON schema validation does; what
// names the argument ("trait", "body", "allocation") as Ironic's message does.
func (t traitNames) check(what, trait string) error {
	switch {
	case trait == "":
		return badRequest("Schema error for %s: %s is too short", what, pyRepr(trait))
	case utf8.RuneCountInString(trait) > 255:
		return badRequest("Schema error for %s: %s is too long", what, pyRepr(trait))
	}
	if _, std := t[trait]; std || customTraitRE.MatchString(trait) {
		return nil
	}
	return badRequest("Schema error for %s: %s is not valid under any of the given schemas. Possible root cause: %s does not match '%s'",
		what, pyRepr(trait), pyRepr(trait), customTraitRE.String())
}

// pyRepr quotes s as Python's repr() does, so messages read as Ironic's.
func pyRepr(s string) string {
	q := "'"
	if strings.Contains(s, "'") && !strings.Contains(s, `"`) {
		q = `"`
	}
	var b strings.Builder
	b.WriteString(q)
	for _, r := range s {
		switch {
		case r == '\\' || string(r) == q:
			b.WriteString(`\` + string(r))
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\r':
			b.WriteString(`\r`)
		case r < 0x20 || r == 0x7f:
			b.WriteString(`\x` + string("0123456789abcdef"[r>>4]) + string("0123456789abcdef"[r&15]))
		default:
			b.WriteRune(r)
		}
	}
	b.WriteString(q)
	return b.String()
}
