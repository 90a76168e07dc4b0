package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// node show says when a node's agent is kept running (fast track).
func TestFastTrackLine(t *testing.T) {
	for _, tc := range []struct {
		name string
		dii  map[string]any
		want string
	}{
		{"no fast track", map[string]any{"agent_last_heartbeat": "2026-11-29T04:00:00Z"}, ""},
		{"no driver_internal_info", nil, ""},
		{"running", map[string]any{"agent_last_heartbeat": "2026-11-29T04:10:00Z",
			"agent_fast_track": map[string]any{"since": "2026-11-29T04:05:00Z", "agent_since": "2026-11-29T04:00:00Z", "boot_id": "b-1"}},
			"fast track: agent running since 2026-11-29T04:00:00Z, last heartbeat 2026-11-29T04:10:00Z (boot b-1, idle since 2026-11-29T04:05:00Z)"},
		{"no heartbeat yet", map[string]any{"agent_fast_track": map[string]any{"since": "2026-11-29T04:05:00Z", "boot_id": "b-1"}},
			"fast track: agent running since 2026-11-29T04:05:00Z, last heartbeat never (boot b-1, idle since 2026-11-29T04:05:00Z)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			node := map[string]any{}
			if tc.dii != nil {
				node["driver_internal_info"] = tc.dii
			}
			assert.Equal(t, tc.want, fastTrackLine(node))
		})
	}
}
