package console

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestRingKeepsTheNewestBytes(t *testing.T) {
	for name, tc := range map[string]struct {
		writes []string
		want   string
	}{
		"empty":             {nil, ""},
		"fits":              {[]string{"abc", "de"}, "abcde"},
		"exactly full":      {[]string{"abcdefgh"}, "abcdefgh"},
		"wraps":             {[]string{"abcdef", "ghij"}, "cdefghij"},
		"one write too big": {[]string{"0123456789ab"}, "456789ab"},
		"many small":        {strings.Split("abcdefghijklmnop", ""), "ijklmnop"},
		"full then more":    {[]string{"abcdefgh", "x"}, "bcdefghx"},
	} {
		t.Run(name, func(t *testing.T) {
			r := newRing(8)
			for _, w := range tc.writes {
				r.Write([]byte(w))
			}
			assert.Equal(t, tc.want, string(r.Bytes()))
		})
	}
}
