package api

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestDeletingANodeRemovesItsDataImages: the image a "local" attach
// downloaded is not served once its node is deleted.
func TestDeletingANodeRemovesItsDataImages(t *testing.T) {
	e := newVmediaEnv(t)
	e.redfishNode("rf-1", nil)
	r := e.do("POST", "/v1/nodes/rf-1/vmedia", "1.89", map[string]any{"device_type": "cdrom", "image_url": e.files.URL + "/big.iso"})
	require.Equal(t, http.StatusNoContent, r.status, string(r.body))
	image := e.vbmc.Node("node-1").Media().Image
	res, err := http.Get(image)
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode)

	require.Equal(t, http.StatusNoContent, e.do("DELETE", "/v1/nodes/rf-1", "1.89", nil).status)
	res, err = http.Get(image)
	require.NoError(t, err)
	res.Body.Close()
	assert.Equal(t, http.StatusNotFound, res.StatusCode)
}
