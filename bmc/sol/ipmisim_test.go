package sol_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/bmc/sol"
	"github.com/anvil-metal/anvil/bmc/vbmc/ipmisim"
)

// syncBuffer is an io.Writer the test can read while Run writes.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestAgainstIPMISim runs the client against OpenIPMI's ipmi_sim, whose SOL
// is bridged to a TCP listener standing in for a QEMU serial port: what the
// "server" prints reaches the client, what the client types reaches the
// server, and Close lets a second session activate SOL again.
func TestAgainstIPMISim(t *testing.T) {
	serial, err := net.Listen("tcp4", "127.0.0.1:0")
	require.NoError(t, err)
	defer serial.Close()
	// ipmi_sim connects to its SOL device once, at startup.
	accepted := make(chan net.Conn, 1)
	go func() {
		if c, err := serial.Accept(); err == nil {
			accepted <- c
		}
	}()
	sim := ipmisim.Start(t, ipmisim.Options{ChassisControl: "/bin/true", SOL: "tcp:" + serial.Addr().String()})
	var conn net.Conn
	select {
	case conn = <-accepted:
		defer conn.Close()
	case <-time.After(5 * time.Second):
		log, _ := os.ReadFile(filepath.Join(sim.Dir, "sim.log"))
		t.Fatalf("ipmi_sim did not connect to the serial port\n%s", log)
	}
	target := sol.Target{Host: "127.0.0.1", Port: sim.Port, Username: "admin", Password: "password", CipherSuite: 3,
		PollInterval: 50 * time.Millisecond}

	for round := 1; round <= 2; round++ {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		s, err := sol.Open(ctx, target)
		require.NoError(t, err, "round %d", round)
		inR, inW := io.Pipe()
		out := &syncBuffer{}
		done := make(chan error, 1)
		go func() { done <- s.Run(ctx, inR, out) }()

		msg := fmt.Sprintf("Linux version 6.1 round %d\r\n", round)
		_, err = conn.Write([]byte(msg))
		require.NoError(t, err)
		require.Eventually(t, func() bool { return strings.Contains(out.String(), msg) }, 10*time.Second, 20*time.Millisecond, "output so far: %q", out.String())

		_, err = inW.Write([]byte("x"))
		require.NoError(t, err)
		_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		b, err := bufio.NewReader(conn).ReadByte()
		require.NoError(t, err)
		assert.Equal(t, byte('x'), b)

		cancel()
		assert.NoError(t, <-done)
		assert.NoError(t, s.Close(context.Background()))
		inW.Close()
	}
}
