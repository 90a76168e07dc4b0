package tftp

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestTFTPHPAClient fetches files from our server with Debian's tftp-hpa
// client (package tftp-hpa, installed by .ci/run) over loopback.
func TestTFTPHPAClient(t *testing.T) {
	if _, err := exec.LookPath("tftp"); err != nil {
		t.Skip("tftp (Debian package tftp-hpa) not installed")
	}
	dir := t.TempDir()
	files := map[string][]byte{
		"undionly.kpxe": pattern(74_213),
		"exact":         pattern(1024),
		"empty":         {},
		"boot.txt":      []byte("#!ipxe\nchain http://10.0.0.1/x\r\nend\n"),
	}
	for name, b := range files {
		writeFile(t, dir, name, b)
	}
	writeFile(t, filepath.Dir(dir), "outside", []byte("secret"))
	_, addr := startServer(t, Config{Root: dir, Timeout: 500 * time.Millisecond})
	out := t.TempDir()
	get := func(mode, remote, local string) (string, error) {
		cmd := exec.Command("tftp", "-m", mode, "127.0.0.1", fmt.Sprint(addr.Port()), "-c", "get", remote, local)
		cmd.Dir = out
		b, err := cmd.CombinedOutput()
		return string(b), err
	}
	for name, want := range files {
		t.Run("binary "+name, func(t *testing.T) {
			msg, err := get("binary", name, name+".bin")
			require.NoError(t, err, msg)
			got, err := os.ReadFile(filepath.Join(out, name+".bin"))
			require.NoError(t, err)
			assert.True(t, bytes.Equal(want, got), "content differs")
		})
	}
	t.Run("ascii", func(t *testing.T) {
		msg, err := get("ascii", "boot.txt", "boot.asc")
		require.NoError(t, err, msg)
		got, err := os.ReadFile(filepath.Join(out, "boot.asc"))
		require.NoError(t, err)
		assert.Equal(t, string(files["boot.txt"]), string(got))
	})
	for _, tc := range []struct{ remote, want string }{
		{"missing", "File not found"},
		{"../outside", "Access violation"},
	} {
		t.Run("refused "+tc.remote, func(t *testing.T) {
			msg, _ := get("binary", tc.remote, "x")
			// tftp-hpa prints the server's error and exits 0 in -c mode.
			assert.Contains(t, msg, "Error code")
			assert.Contains(t, strings.ToLower(msg), strings.ToLower(tc.want))
		})
	}
}
