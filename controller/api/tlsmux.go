package api

import (
	"bufio"
	"crypto/tls"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
)

// A controller serving HTTPS still serves the boot loaders in plain HTTP
// on the same port: PXE firmware and iPXE cannot be told to trust the
// controller's (usually self-signed) certificate, and a node's boot files
// and scripts are public anyway. SplitTLS tells the two apart by the
// first byte a client sends (a TLS handshake record starts with 0x16, an
// HTTP request with a method name), and PlainBootOnly keeps the plain side
// to the boot paths; the API, the dashboard and the agent's lookup and
// heartbeats are HTTPS only.

// tlsHandshakeRecord is the content type byte of a TLS handshake record.
const tlsHandshakeRecord = 0x16

// SplitTLS accepts from ln and hands each connection to the TLS listener
// (wrapped in conf) or to the plain one. A client that sends nothing
// within firstByte is dropped. Closing either listener closes ln.
func SplitTLS(ln net.Listener, conf *tls.Config, firstByte time.Duration) (tlsLn, plainLn net.Listener) {
	s := &splitter{ln: ln, wait: firstByte, done: make(chan struct{})}
	t := &subListener{s: s, ch: make(chan net.Conn)}
	p := &subListener{s: s, ch: make(chan net.Conn)}
	go s.run(t, p)
	return tls.NewListener(t, conf), p
}

type splitter struct {
	ln    net.Listener
	wait  time.Duration
	once  sync.Once
	done  chan struct{}
	err   error // Accept's error, set before done closes
	errMu sync.Mutex
}

func (s *splitter) run(t, p *subListener) {
	for {
		c, err := s.ln.Accept()
		if err != nil {
			s.errMu.Lock()
			s.err = err
			s.errMu.Unlock()
			s.close()
			return
		}
		// The first byte is read off the accept loop, so that a client
		// that connects and stays silent holds up no one else.
		go func() {
			if s.wait > 0 {
				_ = c.SetReadDeadline(time.Now().Add(s.wait))
			}
			br := bufio.NewReaderSize(c, 512)
			b, err := br.Peek(1)
			_ = c.SetReadDeadline(time.Time{})
			if err != nil {
				c.Close()
				return
			}
			dst := p
			if b[0] == tlsHandshakeRecord {
				dst = t
			}
			select {
			case dst.ch <- &peekedConn{Conn: c, r: br}:
			case <-s.done:
				c.Close()
			}
		}()
	}
}

func (s *splitter) close() {
	s.once.Do(func() {
		close(s.done)
		s.ln.Close()
	})
}

// subListener is one side of a splitter.
type subListener struct {
	s  *splitter
	ch chan net.Conn
}

func (l *subListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.ch:
		return c, nil
	case <-l.s.done:
		l.s.errMu.Lock()
		defer l.s.errMu.Unlock()
		if l.s.err != nil {
			return nil, l.s.err
		}
		return nil, net.ErrClosed
	}
}

func (l *subListener) Close() error   { l.s.close(); return nil }
func (l *subListener) Addr() net.Addr { return l.s.ln.Addr() }

// peekedConn gives back the byte read to choose the side.
type peekedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *peekedConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// NetConn is the connection underneath (tls.Conn has the same method), so
// NewHTTPServer finds the guarded connection through the wrappers.
func (c *peekedConn) NetConn() net.Conn { return c.Conn }

// PlainBootOnly serves the boot paths (/v1/boot/...) and answers every
// other plain-HTTP request with an error that names the https URL.
func (s *Server) PlainBootOnly() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/v1/boot/") {
			s.ServeHTTP(w, r)
			return
		}
		s.writeError(w, r, errf(http.StatusBadRequest,
			"This controller serves its API over HTTPS only (plain HTTP carries just the boot files and scripts): use https://%s%s", r.Host, r.URL.Path))
	})
}
