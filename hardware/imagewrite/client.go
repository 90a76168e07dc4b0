package imagewrite

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/anvil-metal/anvil/internal/redact"
)

// DefaultStallTimeout is how long a download may wait for its next bytes
// (or for the response headers) before it fails. A stalled image server
// would otherwise keep the agent busy until the controller's step timeout,
// hours later.
const DefaultStallTimeout = 2 * time.Minute

// Timeouts of NewClient's transport. None of them bounds the whole
// transfer: a large image on a slow link may take hours while still making
// progress; the stall guard catches one that stops.
const (
	dialTimeout           = 30 * time.Second
	tlsHandshakeTimeout   = 30 * time.Second
	responseHeaderTimeout = DefaultStallTimeout
	idleConnTimeout       = 90 * time.Second
)

// NewClient returns the HTTP client Writer uses when it has none: the
// settings of http.DefaultClient (proxy from the environment, HTTP/2) plus
// dial, TLS handshake and response-header timeouts, and no overall one.
func NewClient() *http.Client {
	d := &net.Dialer{Timeout: dialTimeout, KeepAlive: 30 * time.Second}
	return &http.Client{Transport: &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           d.DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          10,
		IdleConnTimeout:       idleConnTimeout,
		TLSHandshakeTimeout:   tlsHandshakeTimeout,
		ResponseHeaderTimeout: responseHeaderTimeout,
		ExpectContinueTimeout: time.Second,
	}}
}

// stallError is the cause a stalled download is cancelled with.
type stallError struct {
	period time.Duration
	got    int64
}

func (e *stallError) Error() string {
	return fmt.Sprintf("no data received for %s after %d bytes", e.period, e.got)
}

// stallGuard cancels a download that waits longer than period for its
// response or its next bytes. Only time spent inside the wait counts: while
// the pipeline holds the body back (a slow disk, all buffers in use) the
// network is not to blame and the guard is off.
type stallGuard struct {
	period time.Duration
	cancel context.CancelCauseFunc
	timer  *time.Timer
	epoch  time.Time    // monotonic base of waiting
	wait   atomic.Int64 // start of the current wait, ns since epoch + 1; 0 = not waiting
	got    atomic.Int64 // bytes received
}

func newStallGuard(period time.Duration, cancel context.CancelCauseFunc) *stallGuard {
	g := &stallGuard{period: period, cancel: cancel, epoch: time.Now()}
	g.timer = time.AfterFunc(period, g.check)
	g.timer.Stop()
	return g
}

func (g *stallGuard) begin() {
	g.wait.Store(int64(time.Since(g.epoch)) + 1)
	g.timer.Reset(g.period)
}

func (g *stallGuard) end(n int) {
	g.wait.Store(0)
	g.timer.Stop()
	g.got.Add(int64(n))
}

// check runs when the timer fires. A timer armed by an earlier wait can
// fire just as a new one begins: only a wait that really lasted period
// cancels the download.
func (g *stallGuard) check() {
	w := g.wait.Load()
	if w == 0 || time.Since(g.epoch)-time.Duration(w-1) < g.period {
		return
	}
	g.cancel(&stallError{period: g.period, got: g.got.Load()})
}

// stop disarms the guard for good (the download is over).
func (g *stallGuard) stop() {
	g.wait.Store(0)
	g.timer.Stop()
}

// guardedBody times every read of the response body.
type guardedBody struct {
	r io.Reader
	g *stallGuard
}

func (b *guardedBody) Read(p []byte) (int, error) {
	b.g.begin()
	n, err := b.r.Read(p)
	b.g.end(n)
	if err != nil {
		b.g.stop() // EOF: nothing more to wait for
	}
	return n, err
}

// downloadFailure is what a download error says: the stall when the guard
// cancelled it, net/http's errors with their URLs redacted, and a hint when
// an HTTPS server cannot be verified because the agent has no CA
// certificates at all.
func downloadFailure(dlCtx context.Context, client *http.Client, err error) error {
	var se *stallError
	if errors.As(context.Cause(dlCtx), &se) {
		return se
	}
	redact.Errors(err)
	if hint := caHint(err, usesSystemRoots(client), systemRootsEmpty); hint != "" {
		return fmt.Errorf("%w%s", err, hint)
	}
	return err
}

// caHint explains an unknown-authority TLS error when the client verifies
// against the system roots and there are none: the ramdisk ships no CA
// bundle (/etc/ssl/certs/ca-certificates.crt or SSL_CERT_FILE), so no
// HTTPS image server can be verified, however valid its certificate.
func caHint(err error, systemRoots bool, noRoots func() bool) string {
	var ua x509.UnknownAuthorityError
	if !systemRoots || !errors.As(err, &ua) || !noRoots() {
		return ""
	}
	return " (the agent's image has no CA bundle: /etc/ssl/certs/ca-certificates.crt is missing and SSL_CERT_FILE is unset, so no HTTPS server can be verified; add CA certificates to the ramdisk or serve the image over HTTP, its checksum still protects it)"
}

// usesSystemRoots reports whether client verifies servers against the
// system's CA certificates (no RootCAs of its own).
func usesSystemRoots(client *http.Client) bool {
	rt := client.Transport
	if rt == nil {
		rt = http.DefaultTransport
	}
	tr, ok := rt.(*http.Transport)
	return ok && (tr.TLSClientConfig == nil || tr.TLSClientConfig.RootCAs == nil)
}

// systemRootsEmpty reports whether crypto/x509 found no CA certificate on
// this system.
func systemRootsEmpty() bool {
	p, err := x509.SystemCertPool()
	return err != nil || p.Equal(x509.NewCertPool())
}

// scrub replaces the raw URL wherever it still appears in msg (an error
// from further down that quoted it) by its redacted form.
func scrub(msg, raw, redacted string) string {
	if raw == "" || raw == redacted {
		return msg
	}
	return strings.ReplaceAll(msg, raw, redacted)
}
