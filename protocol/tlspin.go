package protocol

import (
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
)

// CmdlineFingerprint is the kernel command line parameter that tells the
// agent the SHA-256 fingerprint of the controller's TLS certificate
// ("anvil.api_fingerprint=sha256:<64 hex digits>"). The controller writes
// it into the boot configurations it generates; operators may write it
// themselves.
const CmdlineFingerprint = "anvil.api_fingerprint"

// ErrFingerprintMismatch is returned (wrapped) when a server presents a
// certificate whose fingerprint is not the pinned one.
var ErrFingerprintMismatch = errors.New("TLS certificate does not match the pinned fingerprint")

// Fingerprint is the SHA-256 digest of a DER certificate.
type Fingerprint [sha256.Size]byte

// FingerprintOf hashes a DER-encoded certificate.
func FingerprintOf(der []byte) Fingerprint { return sha256.Sum256(der) }

// String is the form the command line and the logs use: "sha256:<hex>".
func (f Fingerprint) String() string { return "sha256:" + hex.EncodeToString(f[:]) }

// ParseFingerprint reads "sha256:<hex>", also with the colon-separated
// pairs openssl prints ("AB:CD:...") and without the "sha256:" prefix.
func ParseFingerprint(s string) (Fingerprint, error) {
	var f Fingerprint
	h := strings.TrimSpace(s)
	if p, rest, ok := strings.Cut(h, ":"); ok && strings.EqualFold(p, "sha256") {
		h = rest
	}
	h = strings.ReplaceAll(h, ":", "")
	b, err := hex.DecodeString(h)
	if err != nil || len(b) != len(f) {
		return f, fmt.Errorf("fingerprint %q: want sha256:<64 hex digits>", s)
	}
	copy(f[:], b)
	return f, nil
}

// PinnedTLSFor is PinnedTLSConfig for a pin as the kernel command line
// gives it (CmdlineFingerprint) and the scheme of the URL it guards: a
// malformed pin is an error, not no pin, and a pin needs https.
func PinnedTLSFor(scheme, pin string) (*tls.Config, error) {
	fp, err := ParseFingerprint(pin)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", CmdlineFingerprint, err)
	}
	if scheme != "https" {
		return nil, fmt.Errorf("a pinned certificate (%s) needs https://; refusing plain HTTP", CmdlineFingerprint)
	}
	return PinnedTLSConfig(fp), nil
}

// PinnedTLSConfig accepts exactly one server certificate, the one whose
// SHA-256 is pin, and ignores the CA chain and the host name: a ramdisk
// told the fingerprint by its boot configuration trusts nothing else, and
// a controller's self-signed certificate has no chain to check.
func PinnedTLSConfig(pin Fingerprint) *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		// The chain and name checks are replaced by VerifyConnection,
		// which runs on every handshake, resumed ones included.
		InsecureSkipVerify: true,
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return fmt.Errorf("%w: the server sent no certificate", ErrFingerprintMismatch)
			}
			got := FingerprintOf(cs.PeerCertificates[0].Raw)
			if subtle.ConstantTimeCompare(got[:], pin[:]) != 1 {
				return fmt.Errorf("%w: the server's is %s, want %s", ErrFingerprintMismatch, got, pin)
			}
			return nil
		},
	}
}
