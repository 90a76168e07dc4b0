package imagewrite

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/md5"
	"crypto/rand"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/hex"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anvil-metal/anvil/hardware"
	"github.com/anvil-metal/anvil/hardware/internal/testdev"
	"github.com/anvil-metal/anvil/protocol"
	"github.com/klauspost/compress/zstd"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/internal/redact"
)

var outside = hardware.Environment{Evidence: "test"}

func sha256sum(b []byte) string { s := sha256.Sum256(b); return "sha256:" + hex.EncodeToString(s[:]) }
func sha512sum(b []byte) string { s := sha512.Sum512(b); return "sha512:" + hex.EncodeToString(s[:]) }
func md5sum(b []byte) string    { s := md5.Sum(b); return "md5:" + hex.EncodeToString(s[:]) }

func randomImage(t testing.TB, n int) []byte {
	b := make([]byte, n)
	_, err := rand.Read(b)
	require.NoError(t, err)
	copy(b[510:], []byte{0x55, 0xAA}) // looks like a bootable disk
	return b
}

func gz(t testing.TB, b []byte) []byte {
	var buf bytes.Buffer
	w := gzip.NewWriter(&buf)
	_, err := w.Write(b)
	require.NoError(t, err)
	require.NoError(t, w.Close())
	return buf.Bytes()
}

func zst(t testing.TB, b []byte) []byte {
	enc, err := zstd.NewWriter(nil)
	require.NoError(t, err)
	return enc.EncodeAll(b, nil)
}

// target makes a plain file standing in for a disk, pre-filled with 0xCC.
func target(t testing.TB, size int) string {
	p := filepath.Join(t.TempDir(), "disk")
	require.NoError(t, os.WriteFile(p, bytes.Repeat([]byte{0xCC}, size), 0o600))
	return p
}

func serve(t testing.TB, files map[string][]byte) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/short":
			// Announce more than we send: the client must see a short read.
			w.Header().Set("Content-Length", strconv.Itoa(len(files["/short"])+1<<20))
			w.Write(files["/short"])
			return
		}
		b, ok := files[r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Length", strconv.Itoa(len(b)))
		w.Write(b)
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestWriteImage(t *testing.T) {
	img := randomImage(t, 6<<20+1234) // ragged tail: exercises the non-O_DIRECT last write
	files := map[string][]byte{"/img.raw": img, "/img.gz": gz(t, img), "/img.zst": zst(t, img)}
	srv := serve(t, files)
	tests := []struct {
		name, path, format, checksum, wantFormat string
	}{
		{"raw, explicit", "/img.raw", "raw", sha256sum(files["/img.raw"]), "raw"},
		{"raw, auto", "/img.raw", "", sha256sum(files["/img.raw"]), "raw"},
		{"gzip, auto, sha512", "/img.gz", "auto", sha512sum(files["/img.gz"]), "gzip"},
		{"gzip, explicit", "/img.gz", "gzip", sha256sum(files["/img.gz"]), "gzip"},
		{"zstd, auto", "/img.zst", "auto", sha256sum(files["/img.zst"]), "zstd"},
		{"raw, IPA's legacy md5", "/img.raw", "raw", md5sum(files["/img.raw"]), "raw"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dev := target(t, 8<<20)
			w := &Writer{Opener: hardware.NewGuard(outside, []string{dev})}
			var mu sync.Mutex
			var reports []hardware.Progress
			res, err := w.Write(context.Background(), Request{URL: srv.URL + tt.path, Checksum: tt.checksum, Format: tt.format, Device: dev},
				func(p hardware.Progress) { mu.Lock(); reports = append(reports, p); mu.Unlock() })
			require.NoError(t, err)
			assert.Equal(t, tt.wantFormat, res.Format)
			assert.Equal(t, tt.checksum, res.Checksum)
			assert.Equal(t, int64(len(img)), res.BytesWritten)
			assert.Equal(t, int64(len(files[tt.path])), res.BytesDownloaded)
			got, err := os.ReadFile(dev)
			require.NoError(t, err)
			assert.True(t, bytes.Equal(img, got[:len(img)]), "image on disk")
			assert.Equal(t, bytes.Repeat([]byte{0xCC}, 8<<20-len(img)), got[len(img):], "rest of the disk untouched")
			require.NotEmpty(t, reports)
			assert.Equal(t, 100.0, reports[len(reports)-1].Percent)
		})
	}
}

func TestWriteImageFailsCleanly(t *testing.T) {
	img := randomImage(t, 3<<20)
	big := randomImage(t, 9<<20)
	files := map[string][]byte{"/img": img, "/short": img[:2<<20], "/big": big, "/big.gz": gz(t, big)}
	srv := serve(t, files)
	tests := []struct {
		name      string
		req       Request
		wantType  string
		wantMsg   string
		headWiped bool // something was written, so the first MiB must be zero
		untouched bool // nothing may have been written (neither: either, as the error says)
	}{
		{"checksum mismatch", Request{URL: srv.URL + "/img", Checksum: sha256sum([]byte("other"))}, protocol.ErrTypeImageWrite, "checksum mismatch", true, false},
		// Whether the block before the short end reached the disk depends
		// on which writer noticed the failure first; either way clean.
		{"short read", Request{URL: srv.URL + "/short", Checksum: sha256sum(img)}, protocol.ErrTypeImageWrite, "", false, false},
		{"raw image larger than the disk", Request{URL: srv.URL + "/big", Checksum: sha256sum(big)}, protocol.ErrTypeImageWrite, "larger than", false, true},
		{"compressed image larger than the disk", Request{URL: srv.URL + "/big.gz", Checksum: sha256sum(files["/big.gz"])}, protocol.ErrTypeImageWrite, "larger than the device", true, false},
		{"404", Request{URL: srv.URL + "/missing", Checksum: sha256sum(img)}, protocol.ErrTypeImageWrite, "404", false, true},
		{"unsupported algorithm", Request{URL: srv.URL + "/img", Checksum: "sha1:abc"}, protocol.ErrTypeInvalidArgs, "not supported", false, true},
		{"truncated digest", Request{URL: srv.URL + "/img", Checksum: "sha256:abcd"}, protocol.ErrTypeInvalidArgs, "hex digest", false, true},
		{"bad format", Request{URL: srv.URL + "/img", Checksum: sha256sum(img), Format: "vmdk"}, protocol.ErrTypeInvalidArgs, "vmdk", false, true},
		{"raw image declared qcow2", Request{URL: srv.URL + "/img", Checksum: sha256sum(img), Format: "qcow2"}, protocol.ErrTypeImageWrite, "not a qcow2 image", false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dev := target(t, 8<<20)
			tt.req.Device = dev
			w := &Writer{Opener: hardware.NewGuard(outside, []string{dev})}
			_, err := w.Write(context.Background(), tt.req, nil)
			require.False(t, tt.headWiped && tt.untouched)
			headWiped := tt.headWiped
			if !tt.headWiped && !tt.untouched {
				headWiped = strings.Contains(err.Error(), "first MiB")
			}
			failedCleanly(t, dev, err, tt.wantType, tt.wantMsg, headWiped)
		})
	}
}

// failedCleanly checks a failed write's error and what it left on an
// 8 MiB target filled with 0xCC: the first MiB zeroed when something had
// been written (headWiped), otherwise nothing changed at all.
func failedCleanly(t *testing.T, dev string, err error, wantType, wantMsg string, headWiped bool) {
	t.Helper()
	var pe *protocol.Error
	require.ErrorAs(t, err, &pe)
	assert.Equal(t, wantType, pe.Type)
	assert.Contains(t, pe.Message, wantMsg)
	got, err := os.ReadFile(dev)
	require.NoError(t, err)
	if headWiped {
		assert.Contains(t, pe.Message, "first MiB")
		assert.Equal(t, make([]byte, 1<<20), got[:1<<20], "first MiB zeroed")
		return
	}
	assert.Equal(t, bytes.Repeat([]byte{0xCC}, 8<<20), got, "nothing written")
}

func TestWriteImageRefusesUnlistedDevice(t *testing.T) {
	img := randomImage(t, 1<<20)
	srv := serve(t, map[string][]byte{"/img": img})
	listed, other := target(t, 2<<20), target(t, 2<<20)
	w := &Writer{Opener: hardware.NewGuard(outside, []string{listed})}
	_, err := w.Write(context.Background(), Request{URL: srv.URL + "/img", Checksum: sha256sum(img), Device: other}, nil)
	var pe *protocol.Error
	require.ErrorAs(t, err, &pe)
	assert.Equal(t, protocol.ErrTypeProtectedDevice, pe.Type)
	got, _ := os.ReadFile(other)
	assert.Equal(t, bytes.Repeat([]byte{0xCC}, 2<<20), got)
}

// TestWriteImageToLoopDevice writes through O_DIRECT to a real block
// device. The raw image's ragged tail cannot be written with O_DIRECT: its
// writer drops the flag on the shared file while the other writer may
// still be busy with the block before.
func TestWriteImageToLoopDevice(t *testing.T) {
	img := randomImage(t, 20<<20)
	ragged := randomImage(t, 3*chunk+4096+1000)
	tests := []struct {
		name string
		file []byte // served
		want []byte // on the device
	}{
		{"zstd", zst(t, img), img},
		{"raw, ragged tail", ragged, ragged},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dev := testdev.Loop(t, 32<<20, true)
			testdev.Fill(t, dev, 0, 32<<20, 0xCC)
			srv := serve(t, map[string][]byte{"/img": tt.file})
			w := &Writer{Opener: hardware.NewGuard(outside, []string{dev})}
			res, err := w.Write(context.Background(), Request{URL: srv.URL + "/img", Checksum: sha256sum(tt.file), Device: dev}, nil)
			if err != nil && bytes.Contains([]byte(err.Error()), []byte("checksum")) {
				t.Fatalf("zstd encoding must be deterministic for this test: %v", err)
			}
			require.NoError(t, err)
			assert.Equal(t, int64(32<<20), res.DeviceSize)
			assert.Equal(t, int64(len(tt.want)), res.BytesWritten)
			assert.NotEmpty(t, res.PartitionReread)
			f, err := os.Open(dev)
			require.NoError(t, err)
			defer f.Close()
			got := make([]byte, len(tt.want)+4096)
			_, err = f.ReadAt(got, 0)
			require.NoError(t, err)
			assert.True(t, bytes.Equal(tt.want, got[:len(tt.want)]), "image on the device")
			assert.Equal(t, bytes.Repeat([]byte{0xCC}, 4096), got[len(tt.want):], "the device after the image untouched")
		})
	}
}

// TestWriteImageKeepsURLSecrets: a signed URL's credentials and query
// (Swift temp URL, S3 presigned) must not reach the result or any error,
// whatever went wrong, including errors net/http wrote.
func TestWriteImageKeepsURLSecrets(t *testing.T) {
	img := randomImage(t, 3<<20)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/img":
			w.Write(img)
		case "/loop":
			http.Redirect(w, r, "/loop?temp_url_sig=SECRET", http.StatusFound)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	refused := ln.Addr().String()
	require.NoError(t, ln.Close())
	host := strings.TrimPrefix(srv.URL, "http://")
	signed := func(host, path string) string {
		return "http://user:pass@" + host + path + "?temp_url_sig=SECRET&temp_url_expires=1#SECRET"
	}
	tests := []struct {
		name, url, checksum, wantMsg, wantURL string
		wantErr                               bool
	}{
		{"success", signed(host, "/img"), sha256sum(img), "", "http://" + host + "/img", false},
		{"404", signed(host, "/missing"), sha256sum(img), "HTTP 404", "http://" + host + "/missing", true},
		{"connection refused", signed(refused, "/img"), sha256sum(img), "connection refused", "http://" + refused + "/img", true},
		{"checksum mismatch", signed(host, "/img"), sha256sum([]byte("other")), "checksum mismatch", "http://" + host + "/img", true},
		{"redirect loop", signed(host, "/loop"), sha256sum(img), "redirects", "http://" + host + "/loop", true},
		{"unparseable", "http://user:pass@" + host + ":bad/img?temp_url_sig=SECRET", sha256sum(img), "image_url", "(unparseable URL)", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dev := target(t, 8<<20)
			w := &Writer{Opener: hardware.NewGuard(outside, []string{dev})}
			res, err := w.Write(context.Background(), Request{URL: tt.url, Checksum: tt.checksum, Device: dev}, nil)
			assert.Equal(t, tt.wantURL, res.URL)
			if !tt.wantErr {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			msg := strings.ReplaceAll(err.Error(), dev, "DEV") // a temp dir's name is not the URL
			assert.Contains(t, msg, tt.wantMsg)
			assert.Contains(t, msg, tt.wantURL, "the error still says which image")
			for _, secret := range []string{"SECRET", "pass", "user"} {
				assert.NotContains(t, msg, secret)
			}
		})
	}
}

// TestWriteImageStalls: a server that stops sending fails the write after
// StallTimeout, not hours later at the controller's step timeout; what was
// written is made unbootable as with any other failure.
func TestWriteImageStalls(t *testing.T) {
	img := randomImage(t, 6<<20)
	const sent = 5 << 20 // more than a chunk: the first block reaches the disk
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/body" {
			w.Header().Set("Content-Length", strconv.Itoa(len(img)))
			w.Write(img[:sent])
			w.(http.Flusher).Flush()
		}
		<-r.Context().Done() // stalls until the client gives up
	}))
	t.Cleanup(srv.Close)
	tests := []struct {
		name, path, wantMsg string
		headWiped           bool
	}{
		{"no response headers", "/headers", "no data received for 200ms after 0 bytes", false},
		{"body stops", "/body", "no data received for 200ms after " + strconv.Itoa(sent) + " bytes", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dev := target(t, 8<<20)
			w := &Writer{Opener: hardware.NewGuard(outside, []string{dev}), StallTimeout: 200 * time.Millisecond}
			start := time.Now()
			_, err := w.Write(context.Background(), Request{URL: srv.URL + tt.path, Checksum: sha256sum(img), Device: dev}, nil)
			assert.Less(t, time.Since(start), 10*time.Second)
			failedCleanly(t, dev, err, protocol.ErrTypeImageWrite, tt.wantMsg, tt.headWiped)
		})
	}
}

// TestWriteImageSlowServerIsNotAStall: the stall timeout bounds a pause,
// not the transfer: a server that trickles for longer than it succeeds.
func TestWriteImageSlowServerIsNotAStall(t *testing.T) {
	img := randomImage(t, 1<<20)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(len(img)))
		for part := range slices.Chunk(img, 128<<10) {
			w.Write(part)
			w.(http.Flusher).Flush()
			time.Sleep(60 * time.Millisecond)
		}
	}))
	t.Cleanup(srv.Close)
	dev := target(t, 8<<20)
	w := &Writer{Opener: hardware.NewGuard(outside, []string{dev}), StallTimeout: 200 * time.Millisecond}
	res, err := w.Write(context.Background(), Request{URL: srv.URL + "/img", Checksum: sha256sum(img), Device: dev}, nil)
	require.NoError(t, err)
	assert.Equal(t, int64(len(img)), res.BytesWritten)
	assert.Greater(t, res.Seconds, 0.2, "the transfer outlasted the stall timeout")
}

func TestRedactURL(t *testing.T) {
	tests := []struct{ in, want string }{
		{"https://images.example/os.qcow2", "https://images.example/os.qcow2"},
		{"https://user:pw@images.example/v1/AUTH_x/c/os.qcow2?temp_url_sig=abc&temp_url_expires=1#frag", "https://images.example/v1/AUTH_x/c/os.qcow2"},
		{"https://bucket.s3.example/os.img?X-Amz-Signature=abc&X-Amz-Credential=k", "https://bucket.s3.example/os.img"},
		{"http://token@127.0.0.1:8080/img?", "http://127.0.0.1:8080/img"},
		{"http://127.0.0.1:bad/img?sig=abc", "(unparseable URL)"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			assert.Equal(t, tt.want, redact.URL(tt.in))
			assert.Equal(t, tt.want, redact.URL(redact.URL(tt.in)), "idempotent")
		})
	}
}

// TestCAHint: an unverifiable HTTPS server is blamed on the missing CA
// bundle only when the client uses the system roots and there are none.
func TestCAHint(t *testing.T) {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshake is expected
	srv.StartTLS()
	t.Cleanup(srv.Close)
	_, tlsErr := NewClient().Get(srv.URL)
	require.Error(t, tlsErr, "the test server's certificate is signed by no system root")
	assert.True(t, usesSystemRoots(NewClient()))
	assert.True(t, usesSystemRoots(&http.Client{}))
	assert.False(t, usesSystemRoots(srv.Client()), "httptest's client trusts the test CA")
	tests := []struct {
		name        string
		err         error
		systemRoots bool
		noRoots     bool
		want        bool
	}{
		{"unknown authority, no CA bundle", tlsErr, true, true, true},
		{"unknown authority, CA bundle present", tlsErr, true, false, false},
		{"client with its own roots", tlsErr, false, true, false},
		{"not a TLS error", errors.New("connection refused"), true, true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			hint := caHint(tt.err, tt.systemRoots, func() bool { return tt.noRoots })
			if tt.want {
				assert.Contains(t, hint, "no CA bundle")
			} else {
				assert.Empty(t, hint)
			}
		})
	}
}

// TestWriteImageAbort: an operator's abort (the step's context cancelled)
// stops the write between chunks with CommandAborted, says how far it got
// in the error and the partial result, and leaves the disk unbootable.
func TestWriteImageAbort(t *testing.T) {
	img := randomImage(t, 6<<20)
	const sent = 5 << 20
	flushed := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(len(img)))
		w.Write(img[:sent])
		w.(http.Flusher).Flush()
		close(flushed)
		<-r.Context().Done() // the rest never comes: only the abort ends it
	}))
	t.Cleanup(srv.Close)
	dev := target(t, 8<<20)
	w := &Writer{Opener: hardware.NewGuard(outside, []string{dev})}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-flushed
		time.Sleep(300 * time.Millisecond) // the first chunks reach the disk
		cancel()
	}()
	start := time.Now()
	res, err := w.Write(ctx, Request{URL: srv.URL + "/img", Checksum: sha256sum(img), Device: dev}, nil)
	assert.Less(t, time.Since(start), 10*time.Second)
	failedCleanly(t, dev, err, protocol.ErrTypeAborted, "aborted after writing ", true)
	assert.Contains(t, err.Error(), " of "+strconv.Itoa(len(img))+" bytes")
	assert.Greater(t, res.BytesWritten, int64(0), "the partial result names the bytes written")
	assert.Contains(t, err.Error(), "aborted after writing "+strconv.FormatInt(res.BytesWritten, 10))
}
