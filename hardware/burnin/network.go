package burnin

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/anvil-metal/anvil/hardware"
	"github.com/anvil-metal/anvil/protocol"
)

// Network roles (Ironic's agent_burnin_fio_network_config role).
const (
	RoleWriter = "writer"
	RoleReader = "reader"
)

const (
	hello      = "anvil-burnin-network 1\n"
	netBlock   = 64 << 10
	ackTimeout = 30 * time.Second
)

// NetworkOptions is what burnin_network runs.
type NetworkOptions struct {
	Role           string        // this node's role in the first direction
	Partner        string        // the other node's host name or address
	Runtime        time.Duration // how long this node writes
	PairingTimeout time.Duration // how long to wait for the partner in each direction
	Port           int           // 0 = NetworkPort
	Listen         string        // the writer's listen host; "" = every address
}

// NetworkResult is burnin_network's evidence: both directions.
type NetworkResult struct {
	Role       string         `json:"role"`
	Partner    string         `json:"partner"`
	Port       int            `json:"port"`
	Directions []NetworkPhase `json:"directions"`
	Stopped    string         `json:"stopped,omitempty"`
}

// NetworkPhase is one direction of the exchange, seen from this node.
type NetworkPhase struct {
	Role        string  `json:"role"`
	Peer        string  `json:"peer,omitempty"` // the partner's address as connected
	Bytes       uint64  `json:"bytes"`
	Seconds     float64 `json:"seconds"`
	MBPerSecond float64 `json:"mb_per_second"`
	Error       string  `json:"error,omitempty"`
}

// Summary says the throughput both ways.
func (r NetworkResult) Summary() string {
	parts := []string{fmt.Sprintf("%s paired with %s", r.Role, r.Partner)}
	for _, d := range r.Directions {
		verb := "sent"
		if d.Role == RoleReader {
			verb = "received and verified"
		}
		p := fmt.Sprintf("%s %.0f MB in %.1f s (%.1f MB/s)", verb, float64(d.Bytes)/1e6, d.Seconds, d.MBPerSecond)
		if d.Error != "" {
			p += ": " + d.Error
		}
		parts = append(parts, p)
	}
	if r.Stopped != "" {
		parts = append(parts, "stopped: "+r.Stopped)
	}
	return strings.Join(parts, "; ")
}

// Network runs burnin_network as IPA's static pairing does: the writer
// listens and writes for its runtime, the reader connects to its partner
// and reads; then the roles swap. Each block carries its sequence number
// and a pattern derived from it, which the reader checks; at the end the
// reader acknowledges the byte count, so both sides' figures are what
// crossed the wire intact. A partner that does not show up within the
// pairing timeout fails the step.
func Network(ctx context.Context, o NetworkOptions, progress hardware.ProgressFunc) (NetworkResult, error) {
	port := o.Port
	if port == 0 {
		port = NetworkPort
	}
	res := NetworkResult{Role: o.Role, Partner: o.Partner, Port: port}
	roles := []string{o.Role, RoleReader}
	if o.Role == RoleReader {
		roles[1] = RoleWriter
	}
	for i, role := range roles {
		ph := NetworkPhase{Role: role}
		var err error
		if role == RoleWriter {
			err = write(ctx, o, port, &ph, progress, i)
		} else {
			err = read(ctx, o, port, &ph, progress, i)
		}
		if ph.Seconds > 0 {
			ph.MBPerSecond = float64(ph.Bytes) / 1e6 / ph.Seconds
		}
		if err != nil {
			ph.Error = err.Error()
		}
		res.Directions = append(res.Directions, ph)
		if ctx.Err() != nil {
			res.Stopped = ctx.Err().Error()
			return res, stopped(ctx, "burnin_network", fmt.Sprintf("stopped in direction %d as %s", i+1, role))
		}
		if err != nil {
			return res, &protocol.Error{Type: protocol.ErrTypeInternal, Code: 500,
				Message: fmt.Sprintf("burnin_network as %s with %s: %v", role, o.Partner, err)}
		}
	}
	return res, nil
}

func phaseReport(progress hardware.ProgressFunc, i int, role string, bytes uint64, start time.Time, total time.Duration) {
	el := time.Since(start)
	pct := 50 * float64(i)
	msg := fmt.Sprintf("network: direction %d of 2 as %s, %.0f MB (%.1f MB/s)", i+1, role, float64(bytes)/1e6, float64(bytes)/1e6/max(el.Seconds(), 1e-9))
	if role == RoleWriter && total > 0 {
		pct += 50 * min(1, float64(el)/float64(total))
		msg += fmt.Sprintf(", %s left", remaining(total-el))
	}
	progress.Report(hardware.Progress{Percent: min(pct, 99.9), Message: msg})
}

// write listens, takes the partner's connection and writes for Runtime.
func write(ctx context.Context, o NetworkOptions, port int, ph *NetworkPhase, progress hardware.ProgressFunc, i int) error {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", net.JoinHostPort(o.Listen, strconv.Itoa(port)))
	if err != nil {
		return fmt.Errorf("listen on port %d: %w", port, err)
	}
	defer ln.Close()
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	deadline := time.Now().Add(o.PairingTimeout)
	var conn net.Conn
	for conn == nil {
		if tl, ok := ln.(*net.TCPListener); ok {
			_ = tl.SetDeadline(deadline)
		}
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				return fmt.Errorf("partner %s did not connect to port %d within %s", o.Partner, port, o.PairingTimeout)
			}
			return fmt.Errorf("accept: %w", err)
		}
		// Anything that does not greet as a burn-in reader is not our
		// partner (a scanner, a health check): wait on.
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		line, err := bufio.NewReader(io.LimitReader(c, int64(len(hello)))).ReadString('\n')
		if err != nil || line != hello {
			c.Close()
			continue
		}
		_ = c.SetReadDeadline(time.Time{})
		conn = c
	}
	defer conn.Close()
	ln.Close()
	ph.Peer = conn.RemoteAddr().String()
	stopConn := context.AfterFunc(ctx, func() { conn.Close() })
	defer stopConn()
	buf := make([]byte, netBlock)
	start := time.Now()
	last := start
	for seq := uint64(0); time.Since(start) < o.Runtime; seq++ {
		netFill(buf, seq)
		if _, err := conn.Write(buf); err != nil {
			ph.Seconds = time.Since(start).Seconds()
			return fmt.Errorf("write after %d bytes: %w", ph.Bytes, err)
		}
		ph.Bytes += netBlock
		if time.Since(last) >= reportEvery {
			last = time.Now()
			phaseReport(progress, i, RoleWriter, ph.Bytes, start, o.Runtime)
		}
	}
	ph.Seconds = time.Since(start).Seconds()
	if tc, ok := conn.(*net.TCPConn); ok {
		if err := tc.CloseWrite(); err != nil {
			return fmt.Errorf("close: %w", err)
		}
	}
	_ = conn.SetReadDeadline(time.Now().Add(ackTimeout))
	line, err := bufio.NewReader(io.LimitReader(conn, 64)).ReadString('\n')
	if err != nil {
		return fmt.Errorf("no acknowledgement from the reader after %d bytes: %w", ph.Bytes, err)
	}
	if want := fmt.Sprintf("ok %d\n", ph.Bytes); line != want {
		return fmt.Errorf("reader acknowledged %q, sent %d bytes", strings.TrimSpace(line), ph.Bytes)
	}
	return nil
}

// read connects to the partner (retrying until the pairing timeout: the
// writer may not listen yet) and reads and checks until the writer ends.
func read(ctx context.Context, o NetworkOptions, port int, ph *NetworkPhase, progress hardware.ProgressFunc, i int) error {
	addr := net.JoinHostPort(o.Partner, strconv.Itoa(port))
	deadline := time.Now().Add(o.PairingTimeout)
	var d net.Dialer
	var conn net.Conn
	for {
		dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		c, err := d.DialContext(dctx, "tcp", addr)
		cancel()
		if err == nil {
			if _, err = io.WriteString(c, hello); err == nil {
				conn = c
				break
			}
			c.Close()
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("partner %s not reachable within %s: %w", addr, o.PairingTimeout, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
	defer conn.Close()
	ph.Peer = conn.RemoteAddr().String()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	buf := make([]byte, netBlock)
	start := time.Now()
	last := start
	for seq := uint64(0); ; seq++ {
		// A writer that stalls longer than the pairing timeout is gone.
		_ = conn.SetReadDeadline(time.Now().Add(max(o.PairingTimeout, time.Minute)))
		n, err := io.ReadFull(conn, buf)
		if errors.Is(err, io.EOF) {
			break
		}
		ph.Seconds = time.Since(start).Seconds()
		if err != nil {
			return fmt.Errorf("read after %d bytes: %w", ph.Bytes, err)
		}
		if bad := netCheck(buf[:n], seq); bad >= 0 {
			return fmt.Errorf("block %d arrived wrong at byte %d", seq, bad)
		}
		ph.Bytes += uint64(n)
		if time.Since(last) >= reportEvery {
			last = time.Now()
			phaseReport(progress, i, RoleReader, ph.Bytes, start, 0)
		}
	}
	ph.Seconds = time.Since(start).Seconds()
	if _, err := fmt.Fprintf(conn, "ok %d\n", ph.Bytes); err != nil {
		return fmt.Errorf("acknowledge: %w", err)
	}
	return nil
}

func netFill(buf []byte, seq uint64) {
	for i := 0; i+8 <= len(buf); i += 8 {
		binary.LittleEndian.PutUint64(buf[i:], seq<<20^uint64(i))
	}
}

func netCheck(buf []byte, seq uint64) int {
	for i := 0; i+8 <= len(buf); i += 8 {
		if binary.LittleEndian.Uint64(buf[i:]) != seq<<20^uint64(i) {
			return i
		}
	}
	return -1
}
