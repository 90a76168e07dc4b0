package kmod

import (
	"bufio"
	"fmt"
	"io"
	"strings"
)

// Softdeps are a modules.softdep: modules (or aliases, e.g. "crc32c")
// to load before (Pre) or after (Post) a module. They are not in
// modules.dep, yet a module may fail without them: libcrc32c's init asks
// the crypto API for "crc32c" and fails with ENOENT when no crc32c module
// is loaded, which takes raid456 down with it.
type Softdeps map[string]Softdep

// Softdep is one module's soft dependencies.
type Softdep struct {
	Pre, Post []string
}

// ParseSoftdeps reads modules.softdep lines:
// "softdep <module> pre: a b post: c" (a line without pre:/post: lists
// pre dependencies, as modprobe reads it).
func ParseSoftdeps(r io.Reader) (Softdeps, error) {
	out := Softdeps{}
	s := bufio.NewScanner(r)
	line := 0
	for s.Scan() {
		line++
		f := strings.Fields(s.Text())
		if len(f) == 0 || strings.HasPrefix(f[0], "#") {
			continue
		}
		if f[0] != "softdep" || len(f) < 3 {
			return nil, fmt.Errorf("modules.softdep line %d: want \"softdep <module> pre: ... post: ...\", got %q", line, s.Text())
		}
		name := NormalizeName(f[1])
		d := out[name]
		post := false
		for _, w := range f[2:] {
			switch w {
			case "pre:":
				post = false
			case "post:":
				post = true
			default:
				if post {
					d.Post = append(d.Post, w)
				} else {
					d.Pre = append(d.Pre, w)
				}
			}
		}
		out[name] = d
	}
	if err := s.Err(); err != nil {
		return nil, fmt.Errorf("modules.softdep: %w", err)
	}
	return out, nil
}

// Resolve maps a softdep entry (a module name or an alias such as
// "crypto-crc32c") to module names: itself if known, else every module
// whose alias matches it.
func Resolve(name string, known func(string) bool, aliases *AliasTable) []string {
	if n := NormalizeName(name); known(n) {
		return []string{n}
	}
	return aliases.Match(name)
}
