package api

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// inject_nmi as Ironic 1.29: 204 with the NMI at the node's BMC; 404
// below 1.29; UnsupportedDriverExtension for fake-hardware; NodeLocked
// while the node is reserved. The SEL is read live from the BMC.
func TestInjectNMIAndSEL(t *testing.T) {
	e := newVmediaEnv(t)
	e.redfishNode("rf-1", nil)
	e.createNode("fake-1", nil)
	e.vbmc.AddSEL("node-1", "Memory DIMM A1", "Uncorrectable ECC error")

	r := e.do("GET", "/v1/nodes/rf-1/sel", "1.93", nil)
	require.Equal(t, http.StatusOK, r.status, string(r.body))
	var sel struct {
		NodeUUID string `json:"node_uuid"`
		Entries  []struct{ ID, Created, Sensor, Message string }
	}
	require.NoError(t, json.Unmarshal(r.body, &sel))
	require.Len(t, sel.Entries, 4)
	assert.Equal(t, "Uncorrectable ECC error", sel.Entries[3].Message)
	assert.Equal(t, "Memory DIMM A1", sel.Entries[3].Sensor)

	r = e.do("PUT", "/v1/nodes/rf-1/management/inject_nmi", "1.28", map[string]any{})
	assert.Equal(t, http.StatusNotFound, r.status, string(r.body))
	assert.Equal(t, 0, e.vbmc.NMIs("node-1"))

	r = e.do("PUT", "/v1/nodes/rf-1/management/inject_nmi", "1.29", map[string]any{})
	require.Equal(t, http.StatusNoContent, r.status, string(r.body))
	assert.Empty(t, r.body)
	assert.Equal(t, 1, e.vbmc.NMIs("node-1"))
	r = e.do("GET", "/v1/nodes/rf-1/sel", "1.93", nil)
	require.NoError(t, json.Unmarshal(r.body, &sel))
	assert.Equal(t, "Diagnostic interrupt (NMI) asserted", sel.Entries[len(sel.Entries)-1].Message)

	r = e.do("PUT", "/v1/nodes/fake-1/management/inject_nmi", "1.29", nil)
	assert.Equal(t, http.StatusBadRequest, r.status, string(r.body))
	assert.Contains(t, string(r.body), "Driver fake-hardware does not support inject_nmi (disabled or not implemented).")

	r = e.do("PUT", "/v1/nodes/nope/management/inject_nmi", "1.29", nil)
	assert.Equal(t, http.StatusNotFound, r.status, string(r.body))
	r = e.do("GET", "/v1/nodes/rf-1/sel?bogus=1", "1.93", nil)
	assert.Equal(t, http.StatusBadRequest, r.status, string(r.body))
}
