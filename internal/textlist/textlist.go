// Package textlist splits the lists people type into one string: a flag's
// or a kernel parameter's "a, b,c", a root-device hint's "x <or> y".
// Spaces around items do not count, and neither do empty items, so a
// trailing separator or a blank value is not an item.
package textlist

import "strings"

// Split returns the items of s separated by sep, trimmed, without the
// empty ones; nil when there are none.
func Split(s, sep string) []string {
	var out []string
	for _, item := range strings.Split(s, sep) {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}
