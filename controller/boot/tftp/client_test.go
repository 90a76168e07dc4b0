package tftp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// testClient is a minimal TFTP reader for the tests: it speaks to the
// server over real loopback UDP and can be told to lose ACKs.
type testClient struct {
	conn *net.UDPConn
	srv  netip.AddrPort
	// skipAck, if set, is asked before each ACK; true drops it (once per call).
	skipAck func(block uint16) bool
	// window is the windowsize asked for (ACK every window-th block).
	window int
}

type result struct {
	data []byte
	oack map[string]string
	err  error // an ERROR packet from the server, as *tftpError
}

// newClient is a client on 127.0.0.1.
func newClient(t *testing.T, srv netip.AddrPort) *testClient {
	t.Helper()
	return newClientAt(t, srv, netip.MustParseAddr("127.0.0.1"))
}

// newNode is a client on an address of its own in 127.0.0.0/8, as each
// booting node has its own: for tests of many reads, which one address
// may not make (Config.MaxPerSource, RequestRate).
func newNode(t *testing.T, srv netip.AddrPort) *testClient {
	t.Helper()
	return newClientAt(t, srv, randomLoopback())
}

// newClientAt is a client on the given loopback address.
func newClientAt(t *testing.T, srv netip.AddrPort, ip netip.Addr) *testClient {
	t.Helper()
	require.True(t, ip.IsLoopback(), "tests speak over loopback only")
	c, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(ip, 0)))
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return &testClient{conn: c, srv: srv, window: 1}
}

// randomLoopback is an address in 127.0.0.0/8 other than 127.0.0.1
// (Linux answers on all of them); collisions are unlikely enough.
func randomLoopback() netip.Addr {
	return netip.AddrFrom4([4]byte{127, byte(1 + rand.IntN(254)), byte(1 + rand.IntN(254)), byte(1 + rand.IntN(254))})
}

// rrq is a read request for name with options given as name, value pairs.
func rrq(name, mode string, opts ...string) []byte {
	req := &packet{op: opRRQ, filename: name, mode: mode}
	if len(opts) > 0 {
		req.options = map[string]string{}
		for i := 0; i < len(opts); i += 2 {
			req.options[opts[i]] = opts[i+1]
			req.order = append(req.order, opts[i])
		}
	}
	return req.marshal()
}

func (c *testClient) get(name, mode string, opts ...string) result {
	c.conn.WriteToUDPAddrPort(rrq(name, mode, opts...), c.srv)
	res := result{data: []byte{}}
	var tid netip.AddrPort
	blockSize := 512
	var want uint16 = 1
	buf := make([]byte, maxPacket)
	inWindow := 0
	// Where the current window began, to roll back to when its ACK is "lost".
	startWant, startLen := want, 0
	for {
		c.conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		n, from, err := c.conn.ReadFromUDPAddrPort(buf)
		if err != nil {
			res.err = err
			return res
		}
		if tid.IsValid() && from != tid {
			continue
		}
		tid = from
		p, err := parsePacket(buf[:n])
		if err != nil {
			res.err = err
			return res
		}
		switch p.op {
		case opERROR:
			res.err = &tftpError{p.code, p.msg}
			return res
		case opOACK:
			res.oack = p.options
			if v, ok := p.options["blksize"]; ok {
				fmt.Sscan(v, &blockSize)
			}
			c.conn.WriteToUDPAddrPort((&packet{op: opACK}).marshal(), tid)
		case opDATA:
			if p.block != want {
				continue // out of order: wait for the resend
			}
			res.data = append(res.data, p.data...)
			want++
			inWindow++
			lastBlock := len(p.data) < blockSize
			if inWindow == c.window || lastBlock {
				inWindow = 0
				if c.skipAck != nil && c.skipAck(p.block) {
					want, res.data = startWant, res.data[:startLen]
					continue
				}
				startWant, startLen = want, len(res.data)
				c.conn.WriteToUDPAddrPort((&packet{op: opACK, block: p.block}).marshal(), tid)
			}
			if lastBlock {
				return res
			}
		}
	}
}

// startServer serves dir on a loopback port for the test's lifetime.
func startServer(t *testing.T, cfg Config) (*Server, netip.AddrPort) {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	s, err := New(cfg)
	require.NoError(t, err)
	conn, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, conn) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
		s.Close()
	})
	return s, conn.LocalAddr().(*net.UDPAddr).AddrPort()
}

func writeFile(t *testing.T, dir, name string, b []byte) {
	t.Helper()
	require.NoError(t, os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, name), b, 0o644))
}

func pattern(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + i/251)
	}
	return b
}

func tftpCode(err error) int {
	var te *tftpError
	if errors.As(err, &te) {
		return int(te.code)
	}
	return -1
}
