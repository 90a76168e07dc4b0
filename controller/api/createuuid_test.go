package api

import (
	"net/http"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestCreateTakesTheBodysUUID: every resource created through
// createResource gets the body's uuid in canonical form (one place,
// createUUID, decides it), or a new one when the body has none or null.
func TestCreateTakesTheBodysUUID(t *testing.T) {
	e := newEnv(t)
	n := e.createNode("owner", nil)
	node := n["uuid"].(string)
	boot := 0
	for name, tc := range map[string]struct {
		path string
		body func() map[string]any
	}{
		"chassis": {"/v1/chassis", func() map[string]any { return map[string]any{} }},
		"port": {"/v1/ports", func() map[string]any {
			return map[string]any{"node_uuid": node, "address": "52:54:00:00:00:" + hex2(boot)}
		}},
		"portgroup": {"/v1/portgroups", func() map[string]any { return map[string]any{"node_uuid": node} }},
		"volume connector": {"/v1/volume/connectors", func() map[string]any {
			return map[string]any{"node_uuid": node, "type": "iqn", "connector_id": "iqn.2026-01.org.example:" + hex2(boot)}
		}},
		"volume target": {"/v1/volume/targets", func() map[string]any {
			return map[string]any{"node_uuid": node, "volume_type": "iscsi", "volume_id": "vol-" + hex2(boot), "boot_index": boot}
		}},
	} {
		t.Run(name, func(t *testing.T) {
			for _, given := range []any{strings.ToUpper(uuid.NewString()), nil, "absent"} {
				boot++
				body := tc.body()
				if given != "absent" {
					body["uuid"] = given
				}
				r := e.do("POST", tc.path, latest, body)
				require.Equal(t, http.StatusCreated, r.status, "%s", r.body)
				got := r.json(t)["uuid"].(string)
				if s, ok := given.(string); ok && s != "absent" {
					assert.Equal(t, strings.ToLower(s), got, "the body's UUID, canonical")
				} else {
					_, err := uuid.Parse(got)
					assert.NoError(t, err, "a new UUID when the body has %v", given)
				}
				assert.True(t, strings.HasSuffix(r.header.Get("Location"), "/"+got), "Location names it: %s", r.header.Get("Location"))
			}
		})
	}
}

func hex2(i int) string {
	return string("0123456789abcdef"[i/16%16]) + string("0123456789abcdef"[i%16])
}
