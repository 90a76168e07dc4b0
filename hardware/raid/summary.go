package raid

import (
	"fmt"
	"strings"
)

// Summary lists the arrays create_configuration built.
func (r CreateResult) Summary() string {
	if len(r.Arrays) == 0 {
		return "no arrays created"
	}
	parts := make([]string, len(r.Arrays))
	for i, a := range r.Arrays {
		parts[i] = fmt.Sprintf("%s created: %s over %s (%s)", a.Device, a.Level, strings.Join(a.Members, ", "), a.ArrayState)
	}
	return strings.Join(parts, "; ")
}

// Summary lists the arrays delete_configuration stopped and how many
// superblocks it wiped.
func (r DeleteResult) Summary() string {
	var parts []string
	for _, a := range r.Arrays {
		switch {
		case a.Stopped:
			parts = append(parts, fmt.Sprintf("%s stopped (%s over %s)", a.Array, a.Level, strings.Join(a.Members, ", ")))
		case a.Skipped != "":
			parts = append(parts, fmt.Sprintf("%s skipped: %s", a.Array, a.Skipped))
		}
	}
	if len(parts) == 0 {
		parts = append(parts, "no arrays found")
	}
	parts = append(parts, fmt.Sprintf("%d member and %d disk superblock area(s) wiped", len(r.MembersWiped), len(r.DisksWiped)))
	for _, k := range r.DisksKept {
		parts = append(parts, fmt.Sprintf("%s partition table kept: %s", k.Disk, k.Reason))
	}
	return strings.Join(parts, "; ")
}
