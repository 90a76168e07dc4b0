package vbmc

import (
	"crypto/tls"
	"crypto/x509/pkix"
	"fmt"
	"time"

	"github.com/anvil-metal/anvil/internal/selfsigned"
)

// SelfSignedTLS returns a TLS config with a fresh self-signed certificate
// for hosts (IP addresses or names) and the certificate in PEM, so that
// clients can trust it (redfish_verify_ca=<file>) or skip verification
// (redfish_verify_ca=false). Real BMCs ship exactly such certificates, and
// Ironic defaults to https, so this lets anvil-vbmc stand in for them.
func SelfSignedTLS(hosts ...string) (*tls.Config, []byte, error) {
	now := time.Now()
	certPEM, keyPEM, err := selfsigned.New(pkix.Name{CommonName: "anvil-vbmc"}, hosts, now, now.AddDate(1, 0, 0))
	if err != nil {
		return nil, nil, fmt.Errorf("tls: %w", err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, nil, fmt.Errorf("tls: %w", err)
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}, certPEM, nil
}
