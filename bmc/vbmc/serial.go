package vbmc

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"
)

// SerialBridge serves a QEMU node's serial port on a loopback TCP address
// for ipmi_sim's Serial-over-LAN (lan.conf: sol "tcp:127.0.0.1:PORT").
//
// QEMU's serial is a unix-socket chardev in server mode, which exists only
// while the QEMU process does: every power off or boot-device change starts
// a new process. ipmi_sim, though, connects to its SOL device once, at
// startup, and never again. The bridge sits between them: its TCP listener
// lives as long as the virtual BMC, and it re-dials QEMU's socket whenever
// a new process appears. Output while nobody is connected and input while
// the node is off are dropped, as a real BMC's UART does.
type SerialBridge struct {
	log  *slog.Logger
	ln   net.Listener
	sock string
	done chan struct{}
	wg   sync.WaitGroup

	mu     sync.Mutex
	client net.Conn // ipmi_sim's side
	guest  net.Conn // QEMU's side
}

// redial is how often the bridge tries QEMU's socket while QEMU is off.
const redial = 100 * time.Millisecond

// NewSerialBridge listens on addr (which must be a loopback address) and
// bridges it to the QEMU chardev socket at sock.
func NewSerialBridge(log *slog.Logger, addr, sock string) (*SerialBridge, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("serial bridge: %w", err)
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return nil, fmt.Errorf("serial bridge: %s is not a loopback address: a serial console is a root shell", addr)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("serial bridge: %w", err)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	b := &SerialBridge{log: log, ln: ln, sock: sock, done: make(chan struct{})}
	b.wg.Add(2)
	go b.acceptLoop()
	go b.guestLoop()
	return b, nil
}

// Addr is the TCP address ipmi_sim connects to.
func (b *SerialBridge) Addr() string { return b.ln.Addr().String() }

// Close stops the listener and both connections.
func (b *SerialBridge) Close() error {
	select {
	case <-b.done:
		return nil
	default:
	}
	close(b.done)
	err := b.ln.Close()
	b.mu.Lock()
	for _, c := range []net.Conn{b.client, b.guest} {
		if c != nil {
			_ = c.Close()
		}
	}
	b.mu.Unlock()
	b.wg.Wait()
	return err
}

// set makes c the current connection of one side, closing the one it
// replaces (a second SOL device client wins, as on a serial line).
func (b *SerialBridge) set(side *net.Conn, c net.Conn) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	select {
	case <-b.done: // Close has already closed the connections it knew
		_ = c.Close()
		return false
	default:
	}
	if *side != nil && *side != c {
		_ = (*side).Close()
	}
	*side = c
	return true
}

func (b *SerialBridge) get(side *net.Conn) net.Conn {
	b.mu.Lock()
	defer b.mu.Unlock()
	return *side
}

func (b *SerialBridge) acceptLoop() {
	defer b.wg.Done()
	for {
		c, err := b.ln.Accept()
		if err != nil {
			return // closed
		}
		b.log.Info("serial bridge: SOL side connected", "from", c.RemoteAddr().String())
		if !b.set(&b.client, c) {
			return
		}
		b.wg.Add(1)
		go func() {
			defer b.wg.Done()
			b.pump(c, &b.guest)
		}()
	}
}

func (b *SerialBridge) guestLoop() {
	defer b.wg.Done()
	for {
		c, err := net.Dial("unix", b.sock)
		if err == nil {
			b.log.Info("serial bridge: connected to the guest's serial port", "socket", b.sock)
			if !b.set(&b.guest, c) {
				return
			}
			b.pump(c, &b.client) // until QEMU exits
			continue
		}
		select {
		case <-b.done:
			return
		case <-time.After(redial):
		}
	}
}

// pump copies what src sends to the current connection on the other side
// until src ends.
func (b *SerialBridge) pump(src net.Conn, dst *net.Conn) {
	defer src.Close()
	buf := make([]byte, 4096)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if d := b.get(dst); d != nil {
				_ = d.SetWriteDeadline(time.Now().Add(time.Second))
				if _, werr := d.Write(buf[:n]); werr != nil && !errors.Is(werr, net.ErrClosed) {
					b.log.Debug("serial bridge: write dropped", "error", werr)
				}
			}
		}
		if err != nil {
			return
		}
	}
}
