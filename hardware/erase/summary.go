package erase

import (
	"fmt"
	"strings"
)

// Summary says per device what erase_devices did: the method that
// erased and verified it, why it was skipped, or why it failed. The agent
// sends it with the step's result; the controller keeps it in the node's
// history, where operators look for what cleaning did to each disk.
func (r Result) Summary() string {
	if len(r.Devices) == 0 {
		return "no devices to erase"
	}
	parts := make([]string, len(r.Devices))
	for i, d := range r.Devices {
		switch d.Status {
		case StatusErased:
			parts[i] = fmt.Sprintf("%s erased by %s, verified (%s, %.1f s)", d.Plan.Device, d.Method, size(d.Plan.Size), d.Seconds)
		case StatusSkipped:
			parts[i] = fmt.Sprintf("%s skipped: %s", d.Plan.Device, d.Plan.Reason)
		default:
			parts[i] = fmt.Sprintf("%s %s: %s", d.Plan.Device, d.Status, d.Error)
			if d.Bytes > 0 {
				parts[i] = fmt.Sprintf("%s %s after writing %s: %s", d.Plan.Device, d.Status, size(d.Bytes), d.Error)
			}
		}
	}
	return strings.Join(parts, "; ")
}

// Summary says per disk what erase_devices_metadata removed, or why the
// disk was skipped.
func (r MetadataResult) Summary() string {
	if len(r.Devices) == 0 {
		return "no devices to wipe"
	}
	parts := make([]string, len(r.Devices))
	for i, d := range r.Devices {
		if d.Status != StatusErased {
			parts[i] = fmt.Sprintf("%s %s: %s", d.Device, d.Status, d.Reason)
			continue
		}
		var found []string
		seen := map[string]bool{}
		for _, w := range d.Wipes {
			for _, s := range w.Found {
				if !seen[s.Type] {
					seen[s.Type] = true
					found = append(found, s.Type)
				}
			}
		}
		what := "no signatures found"
		if len(found) > 0 {
			what = "removed " + strings.Join(found, ", ")
		}
		parts[i] = fmt.Sprintf("%s metadata wiped (%s; %d device(s) checked)", d.Device, what, len(d.Wipes))
	}
	return strings.Join(parts, "; ")
}

// size is a device size for people: MB below a GB.
func size(bytes uint64) string {
	if bytes < 1e9 {
		return fmt.Sprintf("%.0f MB", float64(bytes)/1e6)
	}
	return fmt.Sprintf("%.1f GB", float64(bytes)/1e9)
}
