package console_test

import (
	"bufio"
	"context"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/controller/store"
)

// TestTCPConsoleNeedsTheToken: the plain TCP port gives a console only to
// a client that sends the node's current token; a wrong, stale or absent
// token gets nothing of the console.
func TestTCPConsoleNeedsTheToken(t *testing.T) {
	m, f := newManager(t)
	require.NoError(t, m.Enable(&store.Node{UUID: node}))
	waitOpened(t, f)
	f.Print("SECRET-BOOT-LINE\r\n")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = m.ServeTCP(ctx, ln) }()

	dial := func(line string) (net.Conn, *bufio.Reader) {
		c, err := net.Dial("tcp", ln.Addr().String())
		require.NoError(t, err)
		t.Cleanup(func() { c.Close() })
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		_, err = io.WriteString(c, line)
		require.NoError(t, err)
		return c, bufio.NewReader(c)
	}
	for name, line := range map[string]string{"wrong": strings.Repeat("0", 48) + "\n", "empty": "\n", "uuid": node + "\n"} {
		_, r := dial(line)
		all, _ := io.ReadAll(r)
		assert.Equal(t, "anvil: invalid console token\r\n", string(all), name)
	}

	tok := m.Token(node)
	c, r := dial(tok + "\r\n")
	got := ""
	for !strings.Contains(got, "SECRET-BOOT-LINE") {
		l, err := r.ReadString('\n')
		require.NoError(t, err, "so far: %q", got)
		got += l
	}
	assert.Contains(t, got, "you have the input")
	_, err = io.WriteString(c, "ls\r")
	require.NoError(t, err)
	require.Eventually(t, func() bool { return f.Typed() == "ls\r" }, 5*time.Second, 5*time.Millisecond)

	// Disabling ends the connection and voids the token.
	m.Disable(node)
	_, err = io.ReadAll(r)
	assert.NoError(t, err)
	require.NoError(t, m.Enable(&store.Node{UUID: node}))
	assert.NotEqual(t, tok, m.Token(node), "a new token at every enabling")
	_, r = dial(tok + "\n")
	all, _ := io.ReadAll(r)
	assert.Equal(t, "anvil: invalid console token\r\n", string(all), "the old token is void")
}
