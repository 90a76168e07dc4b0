package image

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"sort"
)

// CAPackage is the Debian package the ramdisk's CA bundle is built from.
const CAPackage = "ca-certificates"

// CABundlePath is where the base puts the CA bundle: the first file Go's
// crypto/x509 tries on Linux, so the agent verifies HTTPS image servers
// with no SSL_CERT_FILE on the kernel command line.
const CABundlePath = "etc/ssl/certs/ca-certificates.crt"

// caSourceDir holds the package's PEM files, one certificate each.
const caSourceDir = "usr/share/ca-certificates/mozilla"

// CACerts describes the CA bundle in the base.
type CACerts struct {
	Package Package `json:"package"`
	// File is the bundle at its path in the image.
	File File `json:"file"`
	// Certificates Go's x509 parser accepted (the agent's view).
	Certificates int `json:"certificates"`
	// Rejected are source files Go could not parse; they stay in the
	// bundle, as update-ca-certificates would keep them.
	Rejected []string `json:"rejected,omitempty"`
}

// CABundle builds the bundle Debian's postinst (update-ca-certificates)
// would write from the unpacked package p, which ships only the single
// certificates: every mozilla/*.crt concatenated, sorted by file name so
// the same package version always gives the same bytes (the postinst's
// order comes from /etc/ca-certificates.conf, which the image does not
// have).
func CABundle(p Package) ([]byte, CACerts, error) {
	info := CACerts{Package: p, File: File{Path: "/" + CABundlePath}}
	dir := filepath.Join(p.Root, filepath.FromSlash(caSourceDir))
	files, err := filepath.Glob(filepath.Join(dir, "*.crt"))
	if err != nil {
		return nil, info, fmt.Errorf("%s: %w", CAPackage, err)
	}
	if len(files) == 0 {
		return nil, info, fmt.Errorf("%s %s: no certificates in /%s", p.Name, p.Version, caSourceDir)
	}
	sort.Strings(files)
	var bundle bytes.Buffer
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, info, fmt.Errorf("%s: %w", CAPackage, err)
		}
		n, bad := countCerts(b)
		if n == 0 && bad == 0 {
			return nil, info, fmt.Errorf("%s %s: /%s/%s holds no PEM certificate", p.Name, p.Version, caSourceDir, filepath.Base(f))
		}
		if bad > 0 {
			info.Rejected = append(info.Rejected, path.Join(caSourceDir, filepath.Base(f)))
		}
		info.Certificates += n
		bundle.Write(b)
		// A file without a final newline would glue its END line to
		// the next BEGIN line, and PEM decoders would skip both.
		if len(b) > 0 && b[len(b)-1] != '\n' {
			bundle.WriteByte('\n')
		}
	}
	if info.Certificates == 0 {
		return nil, info, fmt.Errorf("%s %s: Go's x509 parser accepts none of its %d certificates", p.Name, p.Version, len(files))
	}
	info.File.Bytes = int64(bundle.Len())
	info.File.SHA256 = sha256Hex(bundle.Bytes())
	return bundle.Bytes(), info, nil
}

// countCerts counts the PEM CERTIFICATE blocks in b that crypto/x509
// parses (ok) and those it rejects (bad).
func countCerts(b []byte) (ok, bad int) {
	for {
		var block *pem.Block
		if block, b = pem.Decode(b); block == nil {
			return ok, bad
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		if _, err := x509.ParseCertificate(block.Bytes); err != nil {
			bad++
		} else {
			ok++
		}
	}
}
