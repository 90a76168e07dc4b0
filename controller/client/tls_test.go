package client

import (
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/protocol"
)

func TestTrustConfig(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer srv.Close()
	ca := filepath.Join(t.TempDir(), "ca.pem")
	require.NoError(t, os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o644))
	junk := filepath.Join(t.TempDir(), "junk.pem")
	require.NoError(t, os.WriteFile(junk, []byte("not a certificate"), 0o644))
	right := protocol.FingerprintOf(srv.Certificate().Raw)
	wrong := right
	wrong[5] ^= 1

	for _, tc := range []struct {
		name   string
		trust  TrustConfig
		cfgErr string
		ok     bool
	}{
		{name: "system roots", trust: TrustConfig{}},
		{name: "CA file", trust: TrustConfig{CAFile: ca}, ok: true},
		{name: "pinned", trust: TrustConfig{Fingerprint: right.String()}, ok: true},
		{name: "pinned to another", trust: TrustConfig{Fingerprint: wrong.String()}},
		{name: "both", trust: TrustConfig{CAFile: ca, Fingerprint: right.String()}, cfgErr: "exclude each other"},
		{name: "not PEM", trust: TrustConfig{CAFile: junk}, cfgErr: "no PEM certificate"},
		{name: "bad fingerprint", trust: TrustConfig{Fingerprint: "sha256:00"}, cfgErr: "fingerprint"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hc, err := tc.trust.HTTPClient()
			if tc.cfgErr != "" {
				assert.ErrorContains(t, err, tc.cfgErr)
				return
			}
			require.NoError(t, err)
			res, err := hc.Get(srv.URL)
			if !tc.ok {
				require.Error(t, err)
				return
			}
			require.NoError(t, err)
			res.Body.Close()
			assert.True(t, strings.HasPrefix(srv.URL, "https://"))
		})
	}
}
