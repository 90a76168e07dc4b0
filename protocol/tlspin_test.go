package protocol

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseFingerprint(t *testing.T) {
	hex := strings.Repeat("ab", 32)
	colons := strings.TrimSuffix(strings.Repeat("AB:", 32), ":")
	for _, tc := range []struct {
		in string
		ok bool
	}{
		{"sha256:" + hex, true},
		{"SHA256:" + strings.ToUpper(hex), true},
		{hex, true},
		{"sha256:" + colons, true}, // openssl x509 -fingerprint -sha256
		{colons, true},
		{" sha256:" + hex + "\n", true}, // read from a file
		{"sha256:" + hex[:62], false},
		{"sha256:" + hex + "ab", false},
		{"sha1:" + hex, false},
		{"sha256:" + strings.Repeat("zz", 32), false},
		{"", false},
	} {
		fp, err := ParseFingerprint(tc.in)
		if !tc.ok {
			assert.Error(t, err, tc.in)
			continue
		}
		require.NoError(t, err, tc.in)
		assert.Equal(t, "sha256:"+hex, fp.String(), tc.in)
	}
}

func TestPinnedTLSConfig(t *testing.T) {
	var served int
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { served++ }))
	defer srv.Close()
	right := FingerprintOf(srv.Certificate().Raw)
	wrong := right
	wrong[31] ^= 1 // another certificate's (httptest has only one)

	get := func(pin Fingerprint) error {
		hc := &http.Client{Transport: &http.Transport{TLSClientConfig: PinnedTLSConfig(pin)}}
		res, err := hc.Get(srv.URL)
		if err == nil {
			res.Body.Close()
		}
		return err
	}
	// httptest's certificate is for example.com and 127.0.0.1 under a CA
	// the client does not know: the pin alone decides.
	require.NoError(t, get(right))
	assert.Equal(t, 1, served)

	err := get(wrong)
	require.Error(t, err)
	assert.True(t, errors.Is(err, ErrFingerprintMismatch), "%v", err)
	assert.Contains(t, err.Error(), right.String(), "the log names the certificate seen")
	assert.Contains(t, err.Error(), wrong.String(), "and the one wanted")
	assert.Equal(t, 1, served, "no request reaches a server with another certificate")
}

// FuzzParseFingerprint: the kernel command line is operator (or DHCP
// chain) input; whatever parses must print back to the same fingerprint.
func FuzzParseFingerprint(f *testing.F) {
	for _, s := range []string{"sha256:" + strings.Repeat("ab", 32), strings.Repeat("AB:", 31) + "AB", "sha256:", ":", "sha256:zz"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		fp, err := ParseFingerprint(s)
		if err != nil {
			return
		}
		again, err := ParseFingerprint(fp.String())
		require.NoError(t, err)
		assert.Equal(t, fp, again)
	})
}

func TestPinnedTLSFor(t *testing.T) {
	pin := Fingerprint{9}.String()
	for name, tc := range map[string]struct {
		scheme, pin, err string
	}{
		"https":        {"https", pin, ""},
		"plain HTTP":   {"http", pin, "needs https://"},
		"a bad pin":    {"https", "sha256:12", CmdlineFingerprint},
		"an empty one": {"https", "", CmdlineFingerprint},
	} {
		t.Run(name, func(t *testing.T) {
			c, err := PinnedTLSFor(tc.scheme, tc.pin)
			if tc.err != "" {
				assert.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			assert.True(t, c.InsecureSkipVerify, "the pin replaces the chain check")
			assert.NotNil(t, c.VerifyConnection)
		})
	}
}
