package api

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/bcrypt"
)

// syncBuffer is a log sink the server's goroutines may write concurrently.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// serveLimited serves the API of a fresh test environment on a real
// listener with lim, as the controller does, and returns its address and
// its log.
func serveLimited(t *testing.T, lim HTTPLimits, opts ...func(*Config)) (string, *syncBuffer) {
	t.Helper()
	var cfg Config
	newEnv(t, append(opts, func(c *Config) { cfg = *c })...)
	logs := &syncBuffer{}
	cfg.Logger = slog.New(slog.NewTextHandler(logs, nil))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	hs := NewHTTPServer(New(cfg), lim, cfg.Logger)
	go func() { _ = hs.Serve(Listen(ln, lim, cfg.Logger)) }()
	t.Cleanup(func() { _ = hs.Close() })
	return ln.Addr().String(), logs
}

// readResponse reads one response from c, or fails the test.
func readResponse(t *testing.T, c net.Conn) (*http.Response, []byte) {
	t.Helper()
	require.NoError(t, c.SetReadDeadline(time.Now().Add(5*time.Second)))
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	require.NoError(t, err)
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return res, body
}

func faultOf(t *testing.T, body []byte) string {
	t.Helper()
	return resp{body: body}.fault(t)
}

// closedSoon asserts the server closes c within d.
//
// A server closing a socket with bytes it never read (the rest of a
// trickled request, which keeps arriving) makes the kernel answer with a
// reset, not a FIN: the read then ends in ECONNRESET rather than EOF.
// Which one the client sees depends on whether its next byte reached
// the server before the close, so a loaded machine turned the reset into
// a flake; both mean the server closed the connection.
func closedSoon(t *testing.T, c net.Conn, d time.Duration) {
	t.Helper()
	require.NoError(t, c.SetReadDeadline(time.Now().Add(d)))
	_, err := io.Copy(io.Discard, c)
	if errors.Is(err, syscall.ECONNRESET) {
		return
	}
	require.NoError(t, err, "the server closes the connection (EOF or reset), not our deadline")
}

// TestSlowBodyIsCutOff: clients that send a body one byte at a time are
// answered 408 when the read timeout passes, their connections are
// closed, the cut-off is logged, and nothing of their request is done.
func TestSlowBodyIsCutOff(t *testing.T) {
	lim := HTTPLimits{ReadHeaderTimeout: time.Second, ReadTimeout: 500 * time.Millisecond, WriteTimeout: 2 * time.Second, IdleTimeout: time.Second}
	addr, logs := serveLimited(t, lim)
	const clients = 20
	body := `{"driver": "fake-hardware", "name": "slow"}`
	start := time.Now()
	type outcome struct {
		status int
		body   []byte
		err    error // the request's, or the connection staying open
	}
	outcomes := make([]outcome, clients)
	var wg sync.WaitGroup
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			outcomes[i] = func() outcome {
				c, err := net.Dial("tcp", addr)
				if err != nil {
					return outcome{err: err}
				}
				defer c.Close()
				if _, err = fmt.Fprintf(c, "POST /v1/nodes HTTP/1.1\r\nHost: anvil\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", len(body)+1000); err != nil {
					return outcome{err: err}
				}
				go func() { // one byte every 50 ms until the server hangs up
					for j := 0; ; j++ {
						if _, err := c.Write([]byte{body[j%len(body)]}); err != nil {
							return
						}
						time.Sleep(50 * time.Millisecond)
					}
				}()
				_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
				br := bufio.NewReader(c)
				res, err := http.ReadResponse(br, nil)
				if err != nil {
					return outcome{err: err}
				}
				got, err := io.ReadAll(res.Body)
				if err != nil {
					return outcome{err: err}
				}
				// then the server hangs up (EOF, or a reset as our bytes
				// keep coming), before our own deadline
				_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
				if _, err = io.Copy(io.Discard, br); errors.Is(err, syscall.ECONNRESET) {
					err = nil
				}
				return outcome{status: res.StatusCode, body: got, err: err}
			}()
		}()
	}
	wg.Wait()
	for i, o := range outcomes {
		require.NoError(t, o.err, "client %d", i)
		assert.Equal(t, http.StatusRequestTimeout, o.status, "client %d: %s", i, o.body)
		assert.Contains(t, faultOf(t, o.body), "did not arrive in time")
	}
	assert.Less(t, time.Since(start), 4*time.Second, "every slow client is cut off about when the read timeout passes")
	assert.Equal(t, clients, strings.Count(logs.String(), "slow client cut off"), logs.String())

	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer c.Close()
	fmt.Fprint(c, "GET /v1/nodes/slow HTTP/1.1\r\nHost: anvil\r\n\r\n")
	res, _ := readResponse(t, c)
	assert.Equal(t, http.StatusNotFound, res.StatusCode, "no slow request created its node")
}

// TestSlowHeadersAreCutOff: a client trickling its headers is disconnected
// when the read-header timeout passes.
func TestSlowHeadersAreCutOff(t *testing.T) {
	lim := HTTPLimits{ReadHeaderTimeout: 300 * time.Millisecond, ReadTimeout: time.Second, WriteTimeout: time.Second, IdleTimeout: time.Second}
	addr, _ := serveLimited(t, lim)
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer c.Close()
	start := time.Now()
	go func() {
		for _, b := range []byte("GET /v1/nodes HTTP/1.1\r\nHost: anvil\r\nX-Slow: ") {
			if _, err := c.Write([]byte{b}); err != nil {
				return
			}
			time.Sleep(30 * time.Millisecond)
		}
	}()
	closedSoon(t, c, 3*time.Second)
	assert.Less(t, time.Since(start), 2*time.Second)
}

// TestUnauthenticatedConnectionsPerSource: one source may hold only so
// many connections that have not authenticated; further ones get a 503 in
// Ironic's format. Authenticating or closing a connection frees its place;
// a refused request (401) or a public one (/) does not.
func TestUnauthenticatedConnectionsPerSource(t *testing.T) {
	hash, err := bcrypt.GenerateFromPassword([]byte("s3cret"), bcrypt.MinCost)
	require.NoError(t, err)
	h, err := ParseHTPasswd(strings.NewReader("admin:" + string(hash) + "\n"))
	require.NoError(t, err)
	lim := DefaultHTTPLimits()
	lim.MaxUnauthConnsPerSource = 3
	addr, logs := serveLimited(t, lim, func(c *Config) { c.Auth = h })

	dial := func() net.Conn {
		c, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		t.Cleanup(func() { c.Close() })
		return c
	}
	// send sends one request on c and returns the status.
	send := func(c net.Conn, path string, creds bool) int {
		req := "GET " + path + " HTTP/1.1\r\nHost: anvil\r\n"
		if creds {
			req += "Authorization: Basic YWRtaW46czNjcmV0\r\n" // admin:s3cret
		}
		_, err := fmt.Fprint(c, req+"\r\n")
		require.NoError(t, err)
		res, body := readResponse(t, c)
		if res.StatusCode == http.StatusServiceUnavailable {
			assert.Contains(t, faultOf(t, body), "Too many unauthenticated connections")
		}
		return res.StatusCode
	}
	// acceptedEventually retries a new connection while the server has not
	// yet seen a freed place (closing is noticed asynchronously).
	acceptedEventually := func() net.Conn {
		for deadline := time.Now().Add(5 * time.Second); ; {
			c := dial()
			if send(c, "/", false) == http.StatusOK {
				return c
			}
			require.True(t, time.Now().Before(deadline), "no place was freed")
			time.Sleep(20 * time.Millisecond)
		}
	}

	conns := []net.Conn{dial(), dial(), dial()}
	assert.Equal(t, http.StatusOK, send(conns[0], "/", false), "public requests are served")
	assert.Equal(t, http.StatusUnauthorized, send(conns[1], "/v1/nodes", false))
	assert.Equal(t, http.StatusServiceUnavailable, send(dial(), "/", false), "a fourth unauthenticated connection is refused")
	assert.Contains(t, logs.String(), "too many unauthenticated connections")

	assert.Equal(t, http.StatusOK, send(conns[2], "/v1/nodes", true), "credentials authenticate the connection")
	acceptedEventually()
	assert.Equal(t, http.StatusOK, send(conns[2], "/v1/nodes", true), "an authenticated connection keeps working")
	assert.Equal(t, http.StatusServiceUnavailable, send(dial(), "/", false), "three unauthenticated again")

	conns[1].Close()
	acceptedEventually()
}

// TestBodyReadErrorsAreClassified: a body cut by the read deadline is a
// 408, a too large one a 413, malformed JSON a 400.
func TestBodyReadErrorsAreClassified(t *testing.T) {
	tests := map[string]struct {
		err    error
		status int
	}{
		"deadline":  {&net.OpError{Op: "read", Net: "tcp", Err: timeoutErr{}}, http.StatusRequestTimeout},
		"too large": {&http.MaxBytesError{Limit: maxBody}, http.StatusRequestEntityTooLarge},
		"syntax":    {&json.SyntaxError{}, http.StatusBadRequest},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var ae *apiError
			require.ErrorAs(t, bodyError(tc.err), &ae)
			assert.Equal(t, tc.status, ae.status)
		})
	}
}

type timeoutErr struct{}

func (timeoutErr) Error() string   { return "i/o timeout" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }
