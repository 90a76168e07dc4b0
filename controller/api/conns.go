package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"time"
)

// HTTPLimits bound what one client can hold of the server: slow clients
// (a header or body trickling in, a response never read) are cut off, and
// one source cannot fill the server with connections that never
// authenticate.
type HTTPLimits struct {
	ReadHeaderTimeout time.Duration // request line and headers
	ReadTimeout       time.Duration // the whole request, body included
	WriteTimeout      time.Duration // from the end of the headers to the end of the response
	IdleTimeout       time.Duration // a keep-alive connection waiting for its next request
	// MaxUnauthConnsPerSource caps the connections one source IP holds
	// open before any of their requests authenticated (0: no cap).
	// Operator credentials, or noauth, authenticate a connection, and so
	// does an agent's heartbeat with its token; a lookup does not.
	MaxUnauthConnsPerSource int
}

// DefaultHTTPLimits are the defaults of the controller's flags. Requests
// carry at most 1 MiB and are answered in milliseconds, so the read and
// write limits are generous for every honest client.
func DefaultHTTPLimits() HTTPLimits {
	return HTTPLimits{ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second, WriteTimeout: 60 * time.Second,
		IdleTimeout: 120 * time.Second, MaxUnauthConnsPerSource: 64}
}

// bootFileWriteTimeout replaces the write timeout for a boot file: an
// initramfs of tens of MB to a node on a slow provisioning network.
const bootFileWriteTimeout = 10 * time.Minute

// NewHTTPServer is an http.Server for h with lim's timeouts, whose
// requests can mark their connection authenticated (see Listen).
func NewHTTPServer(h http.Handler, lim HTTPLimits, log *slog.Logger) *http.Server {
	return &http.Server{Handler: h, ReadHeaderTimeout: lim.ReadHeaderTimeout, ReadTimeout: lim.ReadTimeout,
		WriteTimeout: lim.WriteTimeout, IdleTimeout: lim.IdleTimeout,
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			// Under HTTPS the guarded connection is inside a tls.Conn and
			// SplitTLS's wrapper; both unwrap with NetConn.
			for {
				if gc, ok := c.(*guardedConn); ok {
					return context.WithValue(ctx, ctxConn, gc)
				}
				w, ok := c.(interface{ NetConn() net.Conn })
				if !ok {
					return ctx
				}
				c = w.NetConn()
			}
		}}
}

// Listen wraps ln so that a source holding lim.MaxUnauthConnsPerSource
// unauthenticated connections has further ones answered 503 and closed.
func Listen(ln net.Listener, lim HTTPLimits, log *slog.Logger) net.Listener {
	if lim.MaxUnauthConnsPerSource <= 0 {
		return ln
	}
	return &connGuard{Listener: ln, max: lim.MaxUnauthConnsPerSource, log: log,
		unauth: map[string]int{}, warned: map[string]time.Time{}}
}

// refusalLogEvery limits the warnings about one source's refused
// connections: a flood must not become a flood of log lines.
const refusalLogEvery = 10 * time.Second

type connGuard struct {
	net.Listener
	max    int
	log    *slog.Logger
	mu     sync.Mutex
	unauth map[string]int       // source IP -> unauthenticated connections
	warned map[string]time.Time // source IP -> last refusal logged
}

func (g *connGuard) Accept() (net.Conn, error) {
	for {
		c, err := g.Listener.Accept()
		if err != nil {
			return nil, err
		}
		src := sourceIP(c.RemoteAddr())
		g.mu.Lock()
		if g.unauth[src] >= g.max {
			logIt := time.Since(g.warned[src]) >= refusalLogEvery
			if logIt {
				g.forgetOldWarnings()
				g.warned[src] = time.Now()
			}
			g.mu.Unlock()
			if logIt {
				g.log.Warn("refusing connection: too many unauthenticated connections from one source",
					"source", src, "limit", g.max)
			}
			go refuse(c)
			continue
		}
		g.unauth[src]++
		g.mu.Unlock()
		return &guardedConn{Conn: c, g: g, src: src}, nil
	}
}

// forgetOldWarnings keeps the warning times of many sources from piling up.
func (g *connGuard) forgetOldWarnings() {
	if len(g.warned) < 1024 {
		return
	}
	for src, at := range g.warned {
		if time.Since(at) >= refusalLogEvery {
			delete(g.warned, src)
		}
	}
}

func (g *connGuard) release(src string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.unauth[src]--; g.unauth[src] <= 0 {
		delete(g.unauth, src)
	}
}

// refuse answers a connection over the cap with a 503 in Ironic's format
// and closes it, without reading its request.
func refuse(c net.Conn) {
	defer c.Close()
	inner, _ := json.Marshal(map[string]any{"faultcode": "Server", "debuginfo": nil,
		"faultstring": "Too many unauthenticated connections from this address; retry later."})
	body, _ := json.Marshal(map[string]string{"error_message": string(inner)})
	_ = c.SetWriteDeadline(time.Now().Add(time.Second))
	_, _ = fmt.Fprintf(c, "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"+
		"Retry-After: 1\r\nConnection: close\r\n\r\n%s", len(body), body)
}

func sourceIP(a net.Addr) string {
	if ta, ok := a.(*net.TCPAddr); ok {
		return ta.IP.String()
	}
	host, _, err := net.SplitHostPort(a.String())
	if err != nil {
		return a.String()
	}
	return host
}

// guardedConn counts against its source until it authenticates or closes.
type guardedConn struct {
	net.Conn
	g    *connGuard
	src  string
	once sync.Once
}

func (c *guardedConn) authenticated() { c.once.Do(func() { c.g.release(c.src) }) }

func (c *guardedConn) Close() error {
	c.once.Do(func() { c.g.release(c.src) })
	return c.Conn.Close()
}

// markAuthenticated takes the request's connection off its source's count
// of unauthenticated connections.
func markAuthenticated(ctx context.Context) {
	if gc, ok := ctx.Value(ctxConn).(*guardedConn); ok {
		gc.authenticated()
	}
}

// isTimeout tells a read cut off by the server's deadline.
func isTimeout(err error) bool {
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// extendWrite gives a long download more time than the write timeout.
func extendWrite(w http.ResponseWriter, d time.Duration) {
	_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(d))
}
