package client

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"os"
	"time"

	"github.com/anvil-metal/anvil/protocol"
)

// TrustConfig says how a client trusts a controller's HTTPS certificate.
// The zero value uses the system roots.
type TrustConfig struct {
	// CAFile is a PEM bundle to verify the certificate against instead of
	// the system roots (a self-signed controller's anvil-tls.crt works:
	// it is its own CA and names the controller's hosts).
	CAFile string
	// Fingerprint pins the certificate ("sha256:<hex>", as the controller
	// prints it): no CA or host name is checked, as the agent does.
	Fingerprint string
}

// HTTPClient is an http.Client that trusts the controller as t says.
func (t TrustConfig) HTTPClient() (*http.Client, error) {
	hc := &http.Client{Timeout: 30 * time.Second}
	var tc *tls.Config
	switch {
	case t.CAFile != "" && t.Fingerprint != "":
		return nil, errors.New("a CA file and a fingerprint exclude each other: give one")
	case t.Fingerprint != "":
		fp, err := protocol.ParseFingerprint(t.Fingerprint)
		if err != nil {
			return nil, err
		}
		tc = protocol.PinnedTLSConfig(fp)
	case t.CAFile != "":
		pem, err := os.ReadFile(t.CAFile)
		if err != nil {
			return nil, fmt.Errorf("CA file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("CA file %s: no PEM certificate in it", t.CAFile)
		}
		tc = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	default:
		return hc, nil
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = tc
	hc.Transport = tr
	return hc, nil
}
