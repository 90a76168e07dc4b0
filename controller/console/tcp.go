package console

import (
	"bufio"
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"
)

// The TCP console port (--console-tcp-listen): for tools (socat, nc,
// conserver) that speak plain TCP rather than WebSocket. Anyone on the
// network can reach the port, so a connection must first send the node's
// console token (from GET /v1/nodes/{node}/states/console, which needs
// the API's credentials) on a line of its own; the token is 192 random
// bits, drawn anew at every enabling and void once the console is
// disabled. The port is plaintext: keystrokes and output cross the
// network in the clear, so bind it to loopback or a management network
// (the WebSocket behind the API's TLS is the way across anything else).
const (
	tcpAuthTimeout = 10 * time.Second
	tcpMaxPending  = 64 // connections not yet past the token, or viewing
	tcpTokenLine   = 128
)

// ServeTCP serves the TCP console port on ln until ctx ends.
func (m *Manager) ServeTCP(ctx context.Context, ln net.Listener) error {
	stop := context.AfterFunc(ctx, func() { _ = ln.Close() })
	defer stop()
	slots := make(chan struct{}, tcpMaxPending)
	for {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return nil
			}
			return fmt.Errorf("console: tcp: %w", err)
		}
		select {
		case slots <- struct{}{}:
		default:
			_ = c.Close() // a flood of idle connections must not pile up
			continue
		}
		go func() {
			defer func() { <-slots }()
			m.serveTCP(ctx, c)
		}()
	}
}

// nodeByToken finds the enabled console whose token is tok, comparing in
// constant time against every one.
func (m *Manager) nodeByToken(tok string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	found := ""
	for id, c := range m.consoles {
		c.mu.Lock()
		cur := c.token
		c.mu.Unlock()
		if cur != "" && subtle.ConstantTimeCompare([]byte(cur), []byte(tok)) == 1 {
			found = id
		}
	}
	return found
}

func (m *Manager) serveTCP(ctx context.Context, c net.Conn) {
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(tcpAuthTimeout))
	r := bufio.NewReaderSize(c, tcpTokenLine)
	line, err := r.ReadSlice('\n')
	if err != nil {
		return
	}
	id := m.nodeByToken(strings.TrimSpace(string(line)))
	if id == "" {
		m.log.Warn("console: tcp: a connection sent a wrong token", "from", c.RemoteAddr().String())
		_, _ = c.Write([]byte("anvil: invalid console token\r\n"))
		return
	}
	_ = c.SetReadDeadline(time.Time{})
	v, err := m.Attach(id, true)
	if err != nil {
		_, _ = fmt.Fprintf(c, "anvil: %v\r\n", err)
		return
	}
	defer v.Close()
	m.log.Info("console: tcp viewer attached", "node", id, "from", c.RemoteAddr().String(), "input", v.CanWrite())
	if v.CanWrite() {
		_, _ = fmt.Fprintf(c, "[anvil] console of node %s: you have the input\r\n", id)
	} else {
		_, _ = fmt.Fprintf(c, "[anvil] console of node %s: read-only, another viewer has the input\r\n", id)
	}
	stop := context.AfterFunc(ctx, func() { _ = c.Close() })
	defer stop()
	go func() {
		buf := make([]byte, 512)
		for {
			n, err := r.Read(buf)
			if n > 0 && v.CanWrite() {
				_, _ = v.Write(buf[:n])
			}
			if err != nil {
				v.Close() // the client left: free the input
				return
			}
		}
	}()
	for p := range v.Output() {
		_ = c.SetWriteDeadline(time.Now().Add(10 * time.Second))
		if _, err := c.Write(p); err != nil {
			return
		}
	}
}
