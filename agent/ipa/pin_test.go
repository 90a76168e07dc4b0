package ipa

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/protocol"
)

// newFakeIronicTLS is newFakeIronic serving HTTPS with a certificate of
// its own; it returns the certificate's fingerprint.
func newFakeIronicTLS(t *testing.T, version string) (*fakeIronic, string) {
	f := &fakeIronic{t: t, version: version}
	f.srv = httptest.NewTLSServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f, protocol.FingerprintOf(f.srv.Certificate().Raw).String()
}

// TestPinnedIronic: in IPA mode, as in anvil mode, anvil.api_fingerprint=
// pins the API server's certificate: the agent speaks only to the server
// presenting it, whatever ipa-insecure says, and never over plain HTTP.
func TestPinnedIronic(t *testing.T) {
	f, pin := newFakeIronicTLS(t, "1.82")
	f.lookup = func(int, seen) (int, any) { return 200, lookupAnswer(60, testToken) }
	other := protocol.Fingerprint{1, 2, 3}.String()
	for name, tc := range map[string]struct {
		cfg      Config
		mismatch bool
	}{
		"the pinned certificate":            {Config{API: f.srv.URL, Fingerprint: pin}, false},
		"pinned in openssl's form":          {Config{API: f.srv.URL, Fingerprint: strings.ToUpper(colons(pin))}, false},
		"another certificate":               {Config{API: f.srv.URL, Fingerprint: other}, true},
		"another, though ipa-insecure":      {Config{API: f.srv.URL, Fingerprint: other, Insecure: true}, true},
		"the pinned one, with ipa-insecure": {Config{API: f.srv.URL, Fingerprint: pin, Insecure: true}, false},
	} {
		t.Run(name, func(t *testing.T) {
			c, err := NewClient(tc.cfg, "9.9")
			require.NoError(t, err)
			lr, err := c.Lookup(context.Background(), []string{"52:54:00:00:00:01"}, "")
			if tc.mismatch {
				assert.ErrorIs(t, err, protocol.ErrFingerprintMismatch)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, "1be26c0b-03f2-4d2e-ae87-c02d7f33c123", lr.UUID())
		})
	}

	for name, cfg := range map[string]Config{
		"plain HTTP":           {API: "http://ironic.example:6385", Fingerprint: pin},
		"a malformed pin":      {API: f.srv.URL, Fingerprint: "sha256:abc"},
		"plain HTTP, insecure": {API: "http://ironic.example:6385", Fingerprint: pin, Insecure: true},
	} {
		_, err := NewClient(cfg, "9.9")
		assert.ErrorContains(t, err, protocol.CmdlineFingerprint, name)
	}

	// Without a pin the server's certificate is checked against the
	// system roots, which do not have the test server's.
	c, err := NewClient(Config{API: f.srv.URL}, "9.9")
	require.NoError(t, err)
	_, err = c.Lookup(context.Background(), []string{"52:54:00:00:00:01"}, "")
	assert.Error(t, err)
}

// colons writes a fingerprint as openssl prints it: AB:CD:...
func colons(fp string) string {
	h := strings.TrimPrefix(fp, "sha256:")
	var b strings.Builder
	for i := 0; i < len(h); i += 2 {
		if i > 0 {
			b.WriteByte(':')
		}
		b.WriteString(h[i : i+2])
	}
	return b.String()
}
