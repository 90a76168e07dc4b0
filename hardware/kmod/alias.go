// Package kmod finds the kernel modules a machine's hardware needs: it
// matches device modaliases (/sys/devices/**/modalias) against a kernel's
// modules.alias the way modprobe does, and loads what matches (coldplug),
// so the ramdisk drives whatever NIC or storage controller a server has
// instead of a fixed list of module names.
package kmod

import (
	"bufio"
	"fmt"
	"io"
	"strings"
)

// AliasTable is a parsed modules.alias: glob patterns, each naming the
// module that drives devices whose modalias matches it.
type AliasTable struct {
	// byPrefix holds the aliases whose bus prefix (text before the first
	// ':') has no wildcard, so a modalias is matched only against its
	// own bus; wild holds the rest (e.g. "acpi*:PNP0A08:*").
	byPrefix map[string][]alias
	wild     []alias
	n        int
}

type alias struct {
	pattern string
	module  string
	order   int // line order, so results follow the file like modprobe's
}

// ParseAliases reads modules.alias ("alias <pattern> <module>" lines;
// comments and blank lines skipped). Module names are normalised to
// underscores, as the kernel names modules.
func ParseAliases(r io.Reader) (*AliasTable, error) {
	t := &AliasTable{byPrefix: map[string][]alias{}}
	s := bufio.NewScanner(r)
	s.Buffer(make([]byte, 0, 64<<10), 1<<20)
	line := 0
	for s.Scan() {
		line++
		text := strings.TrimSpace(s.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		f := strings.Fields(text)
		if len(f) != 3 || f[0] != "alias" {
			return nil, fmt.Errorf("modules.alias line %d: want \"alias <pattern> <module>\", got %q", line, text)
		}
		a := alias{pattern: f[1], module: NormalizeName(f[2]), order: t.n}
		t.n++
		if p, ok := literalPrefix(a.pattern); ok {
			t.byPrefix[p] = append(t.byPrefix[p], a)
		} else {
			t.wild = append(t.wild, a)
		}
	}
	if err := s.Err(); err != nil {
		return nil, fmt.Errorf("modules.alias: %w", err)
	}
	return t, nil
}

// Len is the number of aliases.
func (t *AliasTable) Len() int { return t.n }

// Match returns the modules with an alias matching modalias, each once,
// in modules.alias order. Several modules may share a device (a class
// alias like ahci's and a vendor driver's ID alias both matching a SATA
// controller); modprobe loads all of them, and so should the caller.
func (t *AliasTable) Match(modalias string) []string {
	if t == nil {
		return nil
	}
	var hits []alias
	if p, ok := literalPrefix(modalias); ok {
		for _, a := range t.byPrefix[p] {
			if Glob(a.pattern, modalias) {
				hits = append(hits, a)
			}
		}
	}
	for _, a := range t.wild {
		if Glob(a.pattern, modalias) {
			hits = append(hits, a)
		}
	}
	if len(hits) == 0 {
		return nil
	}
	// Two ordered lists merged by line order; few hits, so insertion sort.
	for i := 1; i < len(hits); i++ {
		for j := i; j > 0 && hits[j].order < hits[j-1].order; j-- {
			hits[j], hits[j-1] = hits[j-1], hits[j]
		}
	}
	var out []string
	seen := map[string]bool{}
	for _, h := range hits {
		if !seen[h.module] {
			seen[h.module] = true
			out = append(out, h.module)
		}
	}
	return out
}

// literalPrefix is the bus part of a pattern or modalias ("pci" of
// "pci:v...") when it has no glob characters.
func literalPrefix(s string) (string, bool) {
	p, _, ok := strings.Cut(s, ":")
	if !ok || strings.ContainsAny(p, "*?[") {
		return "", false
	}
	return p, true
}

// NormalizeName maps a module or file name to the kernel's module name:
// dashes and underscores are interchangeable in module names, the kernel
// uses underscores.
func NormalizeName(name string) string {
	return strings.ReplaceAll(name, "-", "_")
}

// Glob reports whether s matches pattern with fnmatch(3) rules and no
// flags, which is what kmod uses for modules.alias: '*' matches any run of
// characters ('/' included), '?' any one character, '[...]' a set with
// ranges and '!' or '^' negation, '\' quotes the next character. A
// malformed set ('[' without ']') matches a literal '['.
func Glob(pattern, s string) bool {
	// Iterative matcher with single-star backtracking: linear for the
	// patterns modules.alias has (no nested stars worth more).
	p, i := 0, 0
	starP, starI := -1, 0
	for i < len(s) {
		if p < len(pattern) {
			switch c := pattern[p]; c {
			case '*':
				starP, starI = p, i
				p++
				continue
			case '?':
				p++
				i++
				continue
			case '[':
				if ok, n, valid := matchSet(pattern[p:], s[i]); valid {
					if ok {
						p += n
						i++
						continue
					}
				} else if s[i] == '[' {
					p++
					i++
					continue
				}
			case '\\':
				if p+1 < len(pattern) && pattern[p+1] == s[i] {
					p += 2
					i++
					continue
				}
			default:
				if c == s[i] {
					p++
					i++
					continue
				}
			}
		}
		if starP < 0 {
			return false
		}
		starI++
		p, i = starP+1, starI
	}
	for p < len(pattern) && pattern[p] == '*' {
		p++
	}
	return p == len(pattern)
}

// matchSet matches c against the set at the start of pattern ("[...]"),
// returning whether it matched, the set's length, and whether the set is
// well formed.
func matchSet(pattern string, c byte) (matched bool, n int, valid bool) {
	i := 1
	negate := false
	if i < len(pattern) && (pattern[i] == '!' || pattern[i] == '^') {
		negate = true
		i++
	}
	first := true
	for i < len(pattern) {
		if pattern[i] == ']' && !first {
			return matched != negate, i + 1, true
		}
		first = false
		lo := pattern[i]
		if lo == '\\' && i+1 < len(pattern) {
			i++
			lo = pattern[i]
		}
		hi := lo
		if i+2 < len(pattern) && pattern[i+1] == '-' && pattern[i+2] != ']' {
			hi = pattern[i+2]
			i += 2
		}
		if lo <= c && c <= hi {
			matched = true
		}
		i++
	}
	return false, 0, false
}
