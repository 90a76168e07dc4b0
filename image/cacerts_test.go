package image

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"log/slog"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/u-root/mkuimage/cpio"
)

// selfSigned returns a PEM certificate with common name cn.
func selfSigned(t *testing.T, cn string) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Unix(0, 0), NotAfter: time.Unix(1<<32, 0),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

// fakeCAPackage lays out files like an unpacked ca-certificates.
func fakeCAPackage(t *testing.T, files map[string][]byte) Package {
	t.Helper()
	p := Package{Name: CAPackage, Version: "1-test", Root: t.TempDir()}
	dir := filepath.Join(p.Root, filepath.FromSlash(caSourceDir))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return p
}

func TestCABundle(t *testing.T) {
	a, b, c := selfSigned(t, "A"), selfSigned(t, "B"), selfSigned(t, "C")
	noNewline := bytes.TrimRight(c, "\n")
	p := fakeCAPackage(t, map[string][]byte{
		"b.crt": b, "a.crt": a, "c.crt": noNewline,
		"README": []byte("not a certificate file"),
	})
	bundle, info, err := CABundle(p)
	if err != nil {
		t.Fatalf("CABundle() = %v", err)
	}
	// Sorted by file name, whatever order the directory lists them in;
	// the file without a final newline gets one.
	want := string(a) + string(b) + string(noNewline) + "\n"
	if string(bundle) != want {
		t.Errorf("bundle =\n%s\nwant a.crt, b.crt, c.crt in that order:\n%s", bundle, want)
	}
	if info.Certificates != 3 || len(info.Rejected) != 0 {
		t.Errorf("Certificates = %d, Rejected = %v, want 3 and none", info.Certificates, info.Rejected)
	}
	if info.File.Path != "/"+CABundlePath || info.File.Bytes != int64(len(bundle)) || info.File.SHA256 != sha256Hex(bundle) {
		t.Errorf("File = %+v, want /%s with the bundle's size and hash", info.File, CABundlePath)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(bundle) {
		t.Errorf("AppendCertsFromPEM() = false")
	}
	again, _, err := CABundle(p)
	if err != nil || !bytes.Equal(again, bundle) {
		t.Errorf("second CABundle() differs (err %v)", err)
	}

	// A block Go cannot parse stays in the bundle and is reported.
	garbage := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: []byte("not DER")})
	_, info, err = CABundle(fakeCAPackage(t, map[string][]byte{"a.crt": a, "bad.crt": garbage}))
	if err != nil {
		t.Fatalf("CABundle() with one unparsable certificate = %v, want success", err)
	}
	if info.Certificates != 1 || !reflect.DeepEqual(info.Rejected, []string{caSourceDir + "/bad.crt"}) {
		t.Errorf("Certificates = %d, Rejected = %v, want 1 and [%s/bad.crt]", info.Certificates, info.Rejected, caSourceDir)
	}

	for name, files := range map[string]map[string][]byte{
		"no files":     {},
		"not PEM":      {"a.crt": a, "x.crt": []byte("hello\n")},
		"none parsing": {"bad.crt": garbage},
	} {
		if _, _, err := CABundle(fakeCAPackage(t, files)); err == nil {
			t.Errorf("CABundle() with %s = nil error, want one", name)
		}
	}
}

// TestBuildBaseCACerts fetches Debian's ca-certificates (apt-get download
// into out/image-cache, shared with make image and the VM tests) and builds
// a base around a stand-in u-root archive: the bundle is in it, Go accepts
// it, and two builds give the same bytes.
func TestBuildBaseCACerts(t *testing.T) {
	if testing.Short() {
		t.Skip("downloads a Debian package")
	}
	for _, bin := range []string{"apt-get", "apt-cache", "dpkg"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Skipf("%s not installed: %v", bin, err)
		}
	}
	ctx := context.Background()
	log := slog.New(slog.NewTextHandler(t.Output(), nil))
	cache, err := filepath.Abs(filepath.Join("..", "out", "image-cache"))
	if err != nil {
		t.Fatal(err)
	}
	deb := Debian{CacheDir: cache, Log: log}
	versions, err := deb.Candidates(ctx, CAPackage)
	if err != nil {
		t.Skipf("apt: %v", err)
	}
	pkg, err := deb.Fetch(ctx, CAPackage, versions[CAPackage])
	if err != nil {
		t.Fatalf("Fetch(%s) = %v", CAPackage, err)
	}

	build := func() Base {
		t.Helper()
		in := BaseInputs{
			CacheDir: t.TempDir(), Commands: []string{"init"}, UrootVersion: "test",
			Kernel:      Kernel{Image: Package{Name: "linux-image-test", Version: "1", Root: t.TempDir()}, Release: "6.1.0-test"},
			CACerts:     &pkg,
			Compression: Gzip,
		}
		// A stand-in for u-root's archive and the kernel files BuildBase
		// copies, so that only the CA bundle is real.
		uroot := NewArchive()
		uroot.AddBytes("init", []byte("#!/bin/sh\n"), 0o755)
		var raw bytes.Buffer
		if err := uroot.Write(&raw); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(in.CacheDir, "uroot-"+in.urootKey()+".cpio"), raw.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		mods := in.Kernel.ModulesDir()
		if err := os.MkdirAll(mods, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, f := range []string{"modules.builtin", "modules.builtin.modinfo"} {
			if err := os.WriteFile(filepath.Join(mods, f), nil, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		base, err := BuildBase(ctx, log, in)
		if err != nil {
			t.Fatalf("BuildBase() = %v", err)
		}
		if base.Cached || base.Uroot != 0 {
			t.Fatalf("BuildBase() used a cached base (%v) or built u-root (%v)", base.Cached, base.Uroot)
		}
		base.Path = filepath.Join(in.CacheDir, base.Path)
		return base
	}
	one, two := build(), build()
	if one.SHA256 != two.SHA256 {
		t.Errorf("two builds of the same base differ: sha256 %s, then %s", one.SHA256, two.SHA256)
	}
	if one.Key != two.Key {
		t.Errorf("cache keys %s and %s for the same inputs", one.Key, two.Key)
	}

	// The bundle as the guest's kernel would unpack it.
	f, err := os.Open(one.Path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	recs, err := cpio.ReadAllRecords(cpio.Newc.Reader(bytes.NewReader(raw)))
	if err != nil {
		t.Fatalf("read base: %v", err)
	}
	var bundle []byte
	var names []string
	for _, r := range recs {
		names = append(names, r.Name)
		if r.Name != CABundlePath {
			continue
		}
		if r.Mode&cpio.S_IFMT != cpio.S_IFREG || r.Mode&0o7777 != 0o644 {
			t.Errorf("%s: mode %o, want a regular file 0644", r.Name, r.Mode)
		}
		if bundle, err = io.ReadAll(io.NewSectionReader(r, 0, int64(r.FileSize))); err != nil {
			t.Fatal(err)
		}
	}
	if bundle == nil {
		t.Fatalf("base has no %s; records: %s", CABundlePath, strings.Join(names, " "))
	}
	if !x509.NewCertPool().AppendCertsFromPEM(bundle) {
		t.Fatalf("AppendCertsFromPEM(%s) = false", CABundlePath)
	}
	n := 0
	for rest := bundle; ; {
		var block *pem.Block
		if block, rest = pem.Decode(rest); block == nil {
			break
		}
		if _, err := x509.ParseCertificate(block.Bytes); err == nil {
			n++
		}
	}
	if n <= 100 {
		t.Errorf("%s has %d certificates Go parses, want more than 100", CABundlePath, n)
	}
	ca := one.CACerts
	if ca == nil {
		t.Fatalf("Base.CACerts = nil")
	}
	if ca.Certificates != n || ca.File.SHA256 != sha256Hex(bundle) || ca.Package.Version != pkg.Version {
		t.Errorf("Base.CACerts = %d certificates, sha256 %s, version %s; want %d, %s, %s",
			ca.Certificates, ca.File.SHA256, ca.Package.Version, n, sha256Hex(bundle), pkg.Version)
	}
	t.Logf("%s %s: %d certificates, %d bytes, rejected %v", pkg.Name, pkg.Version, n, len(bundle), ca.Rejected)

	// Sorted by file name: the certificates in the order of the
	// package's files listed and sorted here.
	files, err := filepath.Glob(filepath.Join(pkg.Root, filepath.FromSlash(caSourceDir), "*.crt"))
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(files)
	var want []byte
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, b...)
		if len(b) > 0 && b[len(b)-1] != '\n' {
			want = append(want, '\n')
		}
	}
	if !bytes.Equal(bundle, want) {
		t.Errorf("bundle is not the package's mozilla/*.crt in name order")
	}
}
