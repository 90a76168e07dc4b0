package api

import (
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/protocol"
)

// TestBootScriptOfAnHTTPSController: the kernel and initramfs come over
// plain HTTP (iPXE cannot pin), the agent is sent to https:// with the
// certificate's fingerprint, also when --public-url says https.
func TestBootScriptOfAnHTTPSController(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "vmlinuz"), []byte("k"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "initramfs.cpio.gz"), []byte("i"), 0o644))
	pin := "sha256:" + strings.Repeat("5a", 32)
	e := newEnvWith(t, agentConfig(), ":memory:", func(c *Config) {
		c.BootDir, c.PublicURL, c.TLSFingerprint = dir, "https://10.0.2.100:6385", pin
	})
	id := e.agentNode("pxe", nil)
	require.Equal(t, 202, e.provision("pxe", "provide", nil).status)
	e.waitState("pxe", "clean wait")

	script := string(e.do("GET", "/v1/boot/"+id+"/ipxe", "", nil).body)
	assert.Contains(t, script, "kernel http://10.0.2.100:6385/v1/boot/files/vmlinuz initrd=initramfs anvil.api=https://10.0.2.100:6385 anvil.api_fingerprint="+pin+
		" anvil.node="+id+" anvil.token=")
	assert.Contains(t, script, "initrd --name initramfs http://10.0.2.100:6385/v1/boot/files/initramfs\n")
	grub := string(e.do("GET", "/v1/boot/"+id+"/grub", "", nil).body)
	assert.Contains(t, grub, "linux /vmlinuz anvil.api=https://10.0.2.100:6385 anvil.api_fingerprint="+pin+" anvil.node="+id+" anvil.token=")

	// The per-node URL of a node on another network gets the same.
	e2 := newEnvWith(t, agentConfig(), ":memory:", func(c *Config) { c.BootDir, c.TLSFingerprint = dir, pin })
	id2 := e2.agentNode("pxe", map[string]any{"driver_info": map[string]any{"anvil_public_url": "http://192.0.2.1:6385/"}})
	require.Equal(t, 202, e2.provision("pxe", "provide", nil).status)
	e2.waitState("pxe", "clean wait")
	script = string(e2.do("GET", "/v1/boot/"+id2+"/ipxe", "", nil).body)
	assert.Contains(t, script, "kernel http://192.0.2.1:6385/v1/boot/files/vmlinuz initrd=initramfs anvil.api=https://192.0.2.1:6385 ")
	assert.Regexp(t, regexp.MustCompile(`anvil\.api_fingerprint=sha256:[0-9a-f]{64} `), script)
}

// TestSplitTLS: one port, two protocols; a silent client holds up no one.
func TestSplitTLS(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ts := httptest.NewUnstartedServer(nil) // only for its certificate
	ts.StartTLS()
	serverCert := ts.TLS.Certificates[0]
	ts.Close()

	tl, pl := SplitTLS(ln, &tls.Config{Certificates: []tls.Certificate{serverCert}}, 2*time.Second)
	secure := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "tls:"+r.URL.Path)
	})}
	plain := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "plain:"+r.URL.Path)
	})}
	go func() { _ = secure.Serve(tl) }()
	go func() { _ = plain.Serve(pl) }()
	t.Cleanup(func() { secure.Close(); plain.Close() })

	// A client that connects and says nothing.
	silent, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	defer silent.Close()

	get := func(hc *http.Client, url string) string {
		res, err := hc.Get(url)
		require.NoError(t, err)
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return string(b)
	}
	pinned := &http.Client{Transport: &http.Transport{TLSClientConfig: protocol.PinnedTLSConfig(protocol.FingerprintOf(serverCert.Certificate[0]))}}
	assert.Equal(t, "tls:/a", get(pinned, "https://"+ln.Addr().String()+"/a"))
	assert.Equal(t, "plain:/b", get(http.DefaultClient, "http://"+ln.Addr().String()+"/b"))

	// The silent one is dropped after the first-byte wait.
	require.NoError(t, silent.SetReadDeadline(time.Now().Add(5*time.Second)))
	_, err = silent.Read(make([]byte, 1))
	assert.ErrorIs(t, err, io.EOF)

	// Closing one side closes the port.
	require.NoError(t, pl.Close())
	_, err = tl.Accept()
	assert.ErrorIs(t, err, net.ErrClosed)
}
