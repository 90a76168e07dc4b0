package controller

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/controller/conductor"
	"github.com/anvil-metal/anvil/protocol"
)

func TestSelfSignedCertificateIsCreatedOnceAndReused(t *testing.T) {
	dir := t.TempDir()
	cfg := Config{Listen: "10.1.2.3:6385", PublicURL: "https://prov.example:6385", Database: "sqlite://:memory:",
		TLS: TLSConfig{SelfSigned: true, Dir: dir, Hosts: []string{"10.9.9.9", "bmc-net.example"}}}
	cert, fp, err := ServerCertificate(cfg)
	require.NoError(t, err)

	key, err := os.Stat(filepath.Join(dir, SelfSignedKey))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), key.Mode().Perm(), "the private key is the owner's only")
	saved, err := os.ReadFile(filepath.Join(dir, SelfSignedFingerprint))
	require.NoError(t, err)
	assert.Equal(t, fp.String()+"\n", string(saved))
	assert.Regexp(t, `^sha256:[0-9a-f]{64}$`, fp.String())

	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	require.NoError(t, err)
	assert.Equal(t, x509.ECDSA, leaf.PublicKeyAlgorithm)
	for _, h := range []string{"prov.example", "10.1.2.3", "10.9.9.9", "bmc-net.example", "localhost", "127.0.0.1"} {
		assert.NoError(t, leaf.VerifyHostname(h), "SAN %s", h)
	}
	assert.Greater(t, time.Until(leaf.NotAfter), 5*365*24*time.Hour, "agents pin it: it must not expire soon")

	// A restart, even with other names, keeps the certificate: every
	// agent's pin stays valid. The new name is reported missing.
	cfg.PublicURL = "https://renamed.example"
	again, fp2, err := ServerCertificate(cfg)
	require.NoError(t, err)
	assert.Equal(t, fp, fp2)
	assert.Equal(t, []string{"renamed.example"}, missingHosts(again, selfSignedHosts(cfg)))

	// Half a pair is an error, not a silent new certificate.
	require.NoError(t, os.Remove(filepath.Join(dir, SelfSignedKey)))
	_, _, err = ServerCertificate(cfg)
	assert.ErrorContains(t, err, "is missing")
}

func TestTLSSettingsAreValidated(t *testing.T) {
	dir := t.TempDir()
	// A certificate and key from files: the self-signed maker's output.
	certPEM, keyPEM, err := newSelfSigned([]string{"ctl.example"}, time.Now())
	require.NoError(t, err)
	certFile, keyFile := filepath.Join(dir, "c.pem"), filepath.Join(dir, "k.pem")
	require.NoError(t, os.WriteFile(certFile, certPEM, 0o644))
	require.NoError(t, os.WriteFile(keyFile, keyPEM, 0o600))

	for _, tc := range []struct {
		name string
		tls  TLSConfig
		err  string
	}{
		{"files", TLSConfig{CertFile: certFile, KeyFile: keyFile}, ""},
		{"cert without key", TLSConfig{CertFile: certFile}, "go together"},
		{"key without cert", TLSConfig{KeyFile: keyFile}, "go together"},
		{"both ways at once", TLSConfig{CertFile: certFile, KeyFile: keyFile, SelfSigned: true}, "exclude each other"},
		{"missing file", TLSConfig{CertFile: filepath.Join(dir, "nope.pem"), KeyFile: keyFile}, "--tls-cert/--tls-key"},
		{"key of another certificate", TLSConfig{CertFile: certFile, KeyFile: certFile}, "--tls-cert/--tls-key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.True(t, tc.tls.Enabled())
			cert, fp, err := ServerCertificate(Config{TLS: tc.tls})
			if tc.err != "" {
				assert.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, protocol.FingerprintOf(cert.Certificate[0]), fp)
		})
	}
	assert.False(t, TLSConfig{Dir: dir, Hosts: []string{"x"}}.Enabled(), "HTTPS only when asked for")
	assert.Equal(t, "/var/lib/anvil", tlsDir(Config{Database: "sqlite:///var/lib/anvil/anvil.db"}))
	assert.Equal(t, ".", tlsDir(Config{Database: "sqlite://:memory:"}))
	assert.Equal(t, ".", tlsDir(Config{Database: "postgres://a@db/anvil"}))
	assert.Equal(t, "http://prov.example:6385", plainURL("https://prov.example:6385"), "the boot service hands firmware plain URLs")
	assert.Equal(t, "http://10.0.0.1:6385", plainURL("http://10.0.0.1:6385"))
}

// TestRunServesHTTPSAndBootFilesInPlain: with a self-signed certificate the
// API answers over HTTPS to a client pinning it, plain HTTP on the same
// port serves only the boot files (PXE firmware cannot pin), and the log
// names the fingerprint.
func TestRunServesHTTPSAndBootFilesInPlain(t *testing.T) {
	dir, boot := t.TempDir(), t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(boot, "vmlinuz"), []byte("kernel-bytes"), 0o644))
	logs := &lockedBuffer{}
	cfg := Config{Listen: "127.0.0.1:0", Database: "sqlite://" + filepath.Join(dir, "anvil.db"), BootDir: boot,
		TLS: TLSConfig{SelfSigned: true}, Logger: slog.New(slog.NewTextHandler(logs, nil)),
		Conductor: conductor.Config{Host: "t", CheckInterval: time.Hour}}
	ctx, cancel := context.WithCancel(t.Context())
	addr := make(chan string, 1)
	cfg.Ready = func(a net.Addr) { addr <- a.String() }
	done := make(chan error, 1)
	go func() { done <- Run(ctx, cfg) }()
	t.Cleanup(func() { cancel(); <-done })
	var hostPort string
	select {
	case hostPort = <-addr:
	case err := <-done:
		t.Fatalf("controller did not start: %v", err)
	}
	saved, err := os.ReadFile(filepath.Join(dir, SelfSignedFingerprint))
	require.NoError(t, err, "the self-signed certificate lives beside the database")
	fp, err := protocol.ParseFingerprint(string(saved))
	require.NoError(t, err)

	get := func(hc *http.Client, url string) (int, string) {
		t.Helper()
		res, err := hc.Get(url)
		require.NoError(t, err)
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	pinned := &http.Client{Transport: &http.Transport{TLSClientConfig: protocol.PinnedTLSConfig(fp)}}
	code, body := get(pinned, "https://"+hostPort+"/v1/nodes")
	assert.Equal(t, http.StatusOK, code, body)
	code, body = get(pinned, "https://"+hostPort+"/v1/")
	assert.Equal(t, http.StatusOK, code)
	assert.Contains(t, body, `"https://`+hostPort+`/v1/`, "links say https")

	code, body = get(http.DefaultClient, "http://"+hostPort+"/v1/nodes")
	assert.Equal(t, http.StatusBadRequest, code)
	assert.Contains(t, body, "over HTTPS only", "plain HTTP does not reach the API")
	code, body = get(http.DefaultClient, "http://"+hostPort+"/v1/lookup?addresses=52:54:00:12:34:56")
	assert.Equal(t, http.StatusBadRequest, code, "nor the agent's lookup: %s", body)
	code, body = get(http.DefaultClient, "http://"+hostPort+"/v1/boot/files/vmlinuz")
	assert.Equal(t, http.StatusOK, code)
	assert.Equal(t, "kernel-bytes", body, "boot files are plain HTTP for the firmware")

	wrong := fp
	wrong[0] ^= 1
	_, err = (&http.Client{Transport: &http.Transport{TLSClientConfig: protocol.PinnedTLSConfig(wrong)}}).Get("https://" + hostPort + "/v1/")
	assert.ErrorIs(t, err, protocol.ErrFingerprintMismatch)
	_, err = http.Get("https://" + hostPort + "/v1/")
	var unknown x509.UnknownAuthorityError
	assert.ErrorAs(t, err, &unknown, "a self-signed certificate is not in the system roots")

	// The certificate as a CA file, with its host names checked.
	pool := x509.NewCertPool()
	pem, err := os.ReadFile(filepath.Join(dir, SelfSignedCert))
	require.NoError(t, err)
	require.True(t, pool.AppendCertsFromPEM(pem))
	_, port, _ := net.SplitHostPort(hostPort)
	code, _ = get(&http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}, "https://localhost:"+port+"/v1/")
	assert.Equal(t, http.StatusOK, code)

	assert.Contains(t, logs.String(), "tls_fingerprint="+fp.String())
}

// lockedBuffer lets the controller's goroutines log into one buffer.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
