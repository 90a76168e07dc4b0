package bmc

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestParseSELList(t *testing.T) {
	for _, tc := range []struct {
		name string
		out  string
		want []SELEntry
	}{
		{"empty", "SEL has no entries\n", nil},
		{"elist", "   1 | 11/29/2026 | 03:00:01 | Temperature CPU1 | Upper Critical going high | Asserted\n" +
			"   2 | 11/29/2026 | 03:00:05 | Power Supply PS1 | Failure detected | Asserted\n",
			[]SELEntry{
				{ID: "1", Created: "11/29/2026 03:00:01", Sensor: "Temperature CPU1", Message: "Upper Critical going high | Asserted"},
				{ID: "2", Created: "11/29/2026 03:00:05", Sensor: "Power Supply PS1", Message: "Failure detected | Asserted"},
			}},
		{"pre-init time", "   3 | Pre-Init  |0000000012| System Event #0x83 | Timestamp Clock Sync | Asserted",
			[]SELEntry{{ID: "3", Created: "Pre-Init 0000000012", Sensor: "System Event #0x83", Message: "Timestamp Clock Sync | Asserted"}}},
		{"four columns", "a | b | c | d", []SELEntry{{ID: "a", Created: "b", Sensor: "c", Message: "d"}}},
		{"unparsed kept whole", "Error: something odd", []SELEntry{{Message: "Error: something odd"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, parseSELList(tc.out))
		})
	}
}

// ipmitool prints what the BMC sent: any text parses without a panic,
// every non-blank line becomes one entry.
func FuzzParseSELList(f *testing.F) {
	f.Add("   1 | 11/29/2026 | 03:00:01 | Temperature CPU1 | Upper Critical going high | Asserted\n")
	f.Add("SEL has no entries")
	f.Add("|||||\n\n|")
	f.Fuzz(func(t *testing.T, out string) {
		got := parseSELList(out)
		lines := 0
		for _, l := range strings.Split(out, "\n") {
			if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "SEL has no entries") {
				lines++
			}
		}
		if len(got) != lines {
			t.Fatalf("%d entries for %d lines", len(got), lines)
		}
	})
}
