package controller

import (
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"io/fs"
	"net"
	neturl "net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/anvil-metal/anvil/internal/selfsigned"
	"github.com/anvil-metal/anvil/protocol"
)

// TLSConfig says whether and with which certificate the controller serves
// HTTPS. The zero value is plain HTTP.
type TLSConfig struct {
	// CertFile and KeyFile are a PEM certificate (chain) and its key.
	CertFile, KeyFile string
	// SelfSigned creates an ECDSA certificate and key in Dir on the first
	// start and reuses them after, so the fingerprint agents pin stays.
	SelfSigned bool
	// Dir holds the self-signed certificate; "" = the SQLite database's
	// directory, else the working directory.
	Dir string
	// Hosts are extra names and addresses for the self-signed
	// certificate, beside the host name, localhost, loopback and the
	// hosts of --public-url and --listen.
	Hosts []string
}

// Enabled reports whether the controller serves HTTPS.
func (c TLSConfig) Enabled() bool { return c.SelfSigned || c.CertFile != "" || c.KeyFile != "" }

// Names of the self-signed certificate's files in TLSConfig.Dir.
const (
	SelfSignedCert        = "anvil-tls.crt"
	SelfSignedKey         = "anvil-tls.key"
	SelfSignedFingerprint = "anvil-tls.fingerprint" // "sha256:<hex>\n", for scripts and boot configurations
)

// ServerCertificate loads (or for a self-signed configuration creates or
// reuses) the controller's certificate and returns it with its leaf's
// fingerprint. It is also what --print-fingerprint runs.
func ServerCertificate(cfg Config) (tls.Certificate, protocol.Fingerprint, error) {
	t := cfg.TLS
	var cert tls.Certificate
	var err error
	switch {
	case t.SelfSigned && (t.CertFile != "" || t.KeyFile != ""):
		return cert, protocol.Fingerprint{}, errors.New("--tls-self-signed and --tls-cert/--tls-key exclude each other")
	case t.SelfSigned:
		cert, err = selfSigned(tlsDir(cfg), selfSignedHosts(cfg))
	case t.CertFile == "" || t.KeyFile == "":
		return cert, protocol.Fingerprint{}, errors.New("--tls-cert and --tls-key go together: give both, or --tls-self-signed")
	default:
		if cert, err = tls.LoadX509KeyPair(t.CertFile, t.KeyFile); err != nil {
			err = fmt.Errorf("--tls-cert/--tls-key: %w", err)
		}
	}
	if err != nil {
		return cert, protocol.Fingerprint{}, err
	}
	return cert, protocol.FingerprintOf(cert.Certificate[0]), nil
}

// tlsDir is where the self-signed certificate lives.
func tlsDir(cfg Config) string {
	if cfg.TLS.Dir != "" {
		return cfg.TLS.Dir
	}
	if p, ok := strings.CutPrefix(cfg.Database, "sqlite://"); ok && p != ":memory:" && p != "" {
		return filepath.Dir(p)
	}
	return "."
}

// selfSignedHosts are the names a self-signed certificate is made for:
// what a client with the certificate as its CA file may connect to.
// (Agents pin the fingerprint and ignore names.)
func selfSignedHosts(cfg Config) []string {
	hosts := []string{"localhost", "127.0.0.1", "::1"}
	if h, err := os.Hostname(); err == nil && h != "" {
		hosts = append(hosts, h)
	}
	if u, err := neturl.Parse(cfg.PublicURL); err == nil && u.Hostname() != "" {
		hosts = append(hosts, u.Hostname())
	}
	if h, _, err := net.SplitHostPort(cfg.Listen); err == nil && h != "" {
		if ip := net.ParseIP(h); ip == nil || !ip.IsUnspecified() {
			hosts = append(hosts, h)
		}
	}
	for _, h := range cfg.TLS.Hosts {
		if h = strings.TrimSpace(h); h != "" {
			hosts = append(hosts, h)
		}
	}
	slices.Sort(hosts)
	return slices.Compact(hosts)
}

// selfSigned reuses dir's certificate and key, or creates them: a new
// certificate on every start would break every agent's pin.
func selfSigned(dir string, hosts []string) (tls.Certificate, error) {
	certPath, keyPath := filepath.Join(dir, SelfSignedCert), filepath.Join(dir, SelfSignedKey)
	_, certErr := os.Stat(certPath)
	_, keyErr := os.Stat(keyPath)
	switch {
	case certErr == nil && keyErr == nil:
		cert, err := tls.LoadX509KeyPair(certPath, keyPath)
		if err != nil {
			return cert, fmt.Errorf("self-signed certificate in %s: %w (remove both files to create new ones; agents must then be told the new fingerprint)", dir, err)
		}
		return cert, writeFingerprint(dir, cert)
	case errors.Is(certErr, fs.ErrNotExist) && errors.Is(keyErr, fs.ErrNotExist):
	case certErr != nil && !errors.Is(certErr, fs.ErrNotExist):
		return tls.Certificate{}, fmt.Errorf("self-signed certificate: %w", certErr)
	case keyErr != nil && !errors.Is(keyErr, fs.ErrNotExist):
		return tls.Certificate{}, fmt.Errorf("self-signed certificate key: %w", keyErr)
	default:
		return tls.Certificate{}, fmt.Errorf("self-signed certificate in %s: one of %s and %s is missing; restore it, or remove the other to create both anew",
			dir, SelfSignedCert, SelfSignedKey)
	}
	certPEM, keyPEM, err := newSelfSigned(hosts, time.Now())
	if err != nil {
		return tls.Certificate{}, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return tls.Certificate{}, fmt.Errorf("self-signed certificate: %w", err)
	}
	// The key first, created 0600 and never over an existing file.
	if err := writeNew(keyPath, keyPEM, 0o600); err != nil {
		return tls.Certificate{}, err
	}
	if err := writeNew(certPath, certPEM, 0o644); err != nil {
		return tls.Certificate{}, err
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return cert, fmt.Errorf("self-signed certificate: %w", err)
	}
	return cert, writeFingerprint(dir, cert)
}

func writeNew(path string, data []byte, mode os.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return fmt.Errorf("self-signed certificate: %w", err)
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("self-signed certificate: write %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("self-signed certificate: write %s: %w", path, err)
	}
	return nil
}

// writeFingerprint keeps the fingerprint file beside the certificate in
// step with it (it is derived, so it is rewritten on every start).
func writeFingerprint(dir string, cert tls.Certificate) error {
	fp := protocol.FingerprintOf(cert.Certificate[0]).String() + "\n"
	if err := os.WriteFile(filepath.Join(dir, SelfSignedFingerprint), []byte(fp), 0o644); err != nil {
		return fmt.Errorf("self-signed certificate: %w", err)
	}
	return nil
}

// newSelfSigned makes the controller's certificate, valid for ten years
// (agents pin it; an expiry would only break them) with hosts as its SANs.
func newSelfSigned(hosts []string, now time.Time) (certPEM, keyPEM []byte, err error) {
	return selfsigned.New(pkix.Name{CommonName: "anvil-controller", Organization: []string{"anvil"}}, hosts, now, now.AddDate(10, 0, 0))
}

// missingHosts lists the hosts a reused certificate does not name, so the
// operator learns why a client with it as CA file refuses a new name.
func missingHosts(cert tls.Certificate, hosts []string) []string {
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	if err != nil {
		return nil
	}
	var out []string
	for _, h := range hosts {
		if leaf.VerifyHostname(h) != nil {
			out = append(out, h)
		}
	}
	return out
}
