package api

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestNodeSubresourcesBelowTheirVersion: below the microversion that
// brought a node's sub-resource, Ironic's node controller does not route
// to it (pecan.abort(404) in _lookup), so the answer is 404 Not Found in
// Ironic's error format, as for a path that does not exist, not 406.
func TestNodeSubresourcesBelowTheirVersion(t *testing.T) {
	e := newEnv(t)
	e.createNode("gated", nil)
	for name, tc := range map[string]struct {
		path       string
		ver        string
		wantStatus int
	}{
		"history below 1.78":   {"/v1/nodes/gated/history", "1.77", http.StatusNotFound},
		"history at 1.78":      {"/v1/nodes/gated/history", "1.78", http.StatusOK},
		"history, no version":  {"/v1/nodes/gated/history", "", http.StatusNotFound},
		"inventory below 1.81": {"/v1/nodes/gated/inventory", "1.80", http.StatusNotFound},
		"vifs below 1.28":      {"/v1/nodes/gated/vifs", "1.27", http.StatusNotFound},
		"bios below 1.40":      {"/v1/nodes/gated/bios", "1.39", http.StatusNotFound},
		"bios at 1.40":         {"/v1/nodes/gated/bios", "1.40", http.StatusOK},
		"a setting below 1.40": {"/v1/nodes/gated/bios/X", "1.39", http.StatusNotFound},
		"firmware below 1.86":  {"/v1/nodes/gated/firmware", "1.85", http.StatusNotFound},
		"firmware at 1.86":     {"/v1/nodes/gated/firmware", "1.86", http.StatusOK},
		"children below 1.83":  {"/v1/nodes/gated/children", "1.82", http.StatusNotFound},
		"children at 1.83":     {"/v1/nodes/gated/children", "1.83", http.StatusOK},
	} {
		t.Run(name, func(t *testing.T) {
			path := tc.path
			if tc.ver == "" {
				// names are no identifiers at 1.1: the UUID then
				path = "/v1/nodes/" + e.do("GET", "/v1/nodes/gated", latest, nil).json(t)["uuid"].(string) + "/history"
			}
			r := e.do("GET", path, tc.ver, nil)
			assert.Equal(t, tc.wantStatus, r.status, "%s", r.body)
			if tc.wantStatus == http.StatusNotFound {
				assert.Equal(t, "The resource could not be found.", r.fault(t))
			}
		})
	}
}
