package selfsigned

import (
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestNew(t *testing.T) {
	now := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	for name, tc := range map[string]struct {
		subject  pkix.Name
		hosts    []string
		notAfter time.Time
		dns      []string
		ips      []string
	}{
		"controller": {pkix.Name{CommonName: "anvil-controller", Organization: []string{"anvil"}},
			[]string{"localhost", "127.0.0.1", "::1", "ctl.example"}, now.AddDate(10, 0, 0),
			[]string{"localhost", "ctl.example"}, []string{"127.0.0.1", "::1"}},
		"vbmc": {pkix.Name{CommonName: "anvil-vbmc"}, []string{"192.0.2.7", "localhost"}, now.AddDate(1, 0, 0),
			[]string{"localhost"}, []string{"192.0.2.7"}},
		"no hosts": {pkix.Name{CommonName: "bare"}, nil, now.Add(time.Hour), nil, nil},
	} {
		t.Run(name, func(t *testing.T) {
			certPEM, keyPEM, err := New(tc.subject, tc.hosts, now, tc.notAfter)
			require.NoError(t, err)
			pair, err := tls.X509KeyPair(certPEM, keyPEM)
			require.NoError(t, err, "the key is the certificate's")
			leaf, err := x509.ParseCertificate(pair.Certificate[0])
			require.NoError(t, err)
			assert.Equal(t, tc.subject.CommonName, leaf.Subject.CommonName)
			assert.Equal(t, tc.subject.Organization, leaf.Subject.Organization)
			assert.Equal(t, tc.dns, leaf.DNSNames)
			var ips []string
			for _, ip := range leaf.IPAddresses {
				ips = append(ips, ip.String())
			}
			assert.Equal(t, tc.ips, ips)
			assert.True(t, leaf.IsCA, "a client may take it as its CA file")
			assert.Equal(t, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, leaf.ExtKeyUsage)
			assert.True(t, leaf.NotBefore.Equal(now.Add(-time.Hour)), "valid for a clock a little behind")
			assert.True(t, leaf.NotAfter.Equal(tc.notAfter))

			pool := x509.NewCertPool()
			pool.AddCert(leaf)
			for _, h := range tc.hosts {
				_, err := leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: h, CurrentTime: now})
				assert.NoError(t, err, "verifies for %s", h)
				if ip := net.ParseIP(h); ip == nil {
					assert.NoError(t, leaf.VerifyHostname(h))
				}
			}
		})
	}
	a, _, err := New(pkix.Name{CommonName: "x"}, nil, now, now.Add(time.Hour))
	require.NoError(t, err)
	b, _, err := New(pkix.Name{CommonName: "x"}, nil, now, now.Add(time.Hour))
	require.NoError(t, err)
	assert.NotEqual(t, a, b, "each is new (its own key and serial)")
}
