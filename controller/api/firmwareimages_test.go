package api

import (
	"net/http"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestFirmwareImagesServedFromTheirDirectoryOnly(t *testing.T) {
	base := t.TempDir()
	dir := filepath.Join(base, "firmware")
	require.NoError(t, os.Mkdir(dir, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "idrac-7.10.bin"), []byte("image bytes"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(base, "secret"), []byte("not for BMCs"), 0o600))
	require.NoError(t, os.Symlink(filepath.Join(base, "secret"), filepath.Join(dir, "escape.bin")))
	require.NoError(t, os.Mkdir(filepath.Join(dir, "sub"), 0o755))
	require.NoError(t, syscall.Mkfifo(filepath.Join(dir, "fifo.bin"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "anvil.db"), []byte("not for BMCs"), 0o600))
	e := newEnv(t, func(c *Config) { c.FirmwareDir = dir })

	r := e.do("GET", "/v1/boot/firmware/idrac-7.10.bin", "", nil)
	require.Equal(t, http.StatusOK, r.status)
	assert.Equal(t, "image bytes", string(r.body))
	assert.Equal(t, "application/octet-stream", r.header.Get("Content-Type"))
	assert.Equal(t, http.StatusOK, e.do("HEAD", "/v1/boot/firmware/idrac-7.10.bin", "", nil).status)

	for _, name := range []string{"escape.bin", "sub", "fifo.bin", "missing.bin", "..%2Fsecret", ".hidden", "%2E%2E", "anvil.db"} {
		r := e.do("GET", "/v1/boot/firmware/"+name, "", nil)
		assert.Equal(t, http.StatusNotFound, r.status, name)
		assert.NotContains(t, string(r.body), "not for BMCs", name)
	}

	none := newEnv(t)
	assert.Equal(t, http.StatusNotFound, none.do("GET", "/v1/boot/firmware/idrac-7.10.bin", "", nil).status, "no --firmware-dir: nothing served")
}
