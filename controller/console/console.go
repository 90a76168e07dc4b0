// Package console holds the serial consoles of the nodes whose console is
// enabled (Ironic's PUT /v1/nodes/{node}/states/console): one session to
// the node's BMC per enabled node, reopened with backoff when the BMC drops
// it, a ring of scrollback kept whether or not anyone watches, and any
// number of viewers (the API's WebSocket, the TCP console port) of which
// one at a time may type.
package console

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/anvil-metal/anvil/controller/store"
)

// Session is one open console stream to a node's BMC (an IPMI SOL
// payload, or a fake in tests).
type Session interface {
	// Run copies the server's output to out and in to the server until
	// ctx ends or the BMC drops the stream.
	Run(ctx context.Context, in io.Reader, out io.Writer) error
	// Close ends the stream on the BMC's side.
	Close(ctx context.Context) error
}

// Opener opens a node's console stream.
type Opener interface {
	Open(ctx context.Context, n *store.Node) (Session, error)
}

// Config configures a Manager.
type Config struct {
	Opener Opener
	Logger *slog.Logger
	// Scrollback is how many bytes of output are kept per node (256 KiB
	// when zero: some thousands of lines of a booting Linux).
	Scrollback int
	// MinBackoff and MaxBackoff bound the wait before reopening a dropped
	// or refused session (1 s and 30 s when zero).
	MinBackoff, MaxBackoff time.Duration
	// ViewerBuffer is how many output chunks a viewer may lag behind
	// before it is disconnected as too slow (256 when zero).
	ViewerBuffer int
}

// Errors of Attach and viewers.
var (
	ErrNotEnabled = errors.New("the node's console is not enabled")
	ErrReadOnly   = errors.New("another viewer has the console input; this one is read-only")
)

// Manager holds the enabled consoles of this controller.
type Manager struct {
	cfg Config
	log *slog.Logger

	mu       sync.Mutex
	consoles map[string]*nodeConsole // by node UUID; stopped ones keep their scrollback
	closed   bool
}

// New returns a Manager holding no console.
func New(cfg Config) *Manager {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Scrollback <= 0 {
		cfg.Scrollback = 256 << 10
	}
	if cfg.MinBackoff <= 0 {
		cfg.MinBackoff = time.Second
	}
	if cfg.MaxBackoff < cfg.MinBackoff {
		cfg.MaxBackoff = max(30*time.Second, cfg.MinBackoff)
	}
	if cfg.ViewerBuffer <= 0 {
		cfg.ViewerBuffer = 256
	}
	return &Manager{cfg: cfg, log: cfg.Logger, consoles: map[string]*nodeConsole{}}
}

// Enable starts holding n's console (nothing if it is already held). Each
// enabling draws a new TCP console token.
func (m *Manager) Enable(n *store.Node) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return errors.New("console: the controller is shutting down")
	}
	c := m.consoles[n.UUID]
	if c != nil && c.running() {
		return nil
	}
	tok := make([]byte, 24)
	if _, err := rand.Read(tok); err != nil {
		return fmt.Errorf("console: token: %w", err)
	}
	if c == nil {
		c = &nodeConsole{uuid: n.UUID, ring: newRing(m.cfg.Scrollback), viewers: map[*Viewer]struct{}{}}
		m.consoles[n.UUID] = c
	}
	ctx, cancel := context.WithCancel(context.Background())
	node := *n
	c.mu.Lock()
	if t := tenancyOf(n); t != c.tenancy {
		// another tenant (or none) since the scrollback was kept: what the
		// previous one's server printed (typed passwords, cloud-init
		// output) is not the new one's to read
		c.ring, c.tenancy = newRing(m.cfg.Scrollback), t
	}
	c.token, c.cancel, c.done = hex.EncodeToString(tok), cancel, make(chan struct{})
	done := c.done
	c.mu.Unlock()
	go func() {
		defer close(done)
		m.run(ctx, c, &node)
	}()
	m.log.Info("console: enabled", "node", n.UUID)
	return nil
}

// Disable stops holding the node's console: the BMC session is closed and
// every viewer disconnected. The scrollback stays readable.
func (m *Manager) Disable(nodeUUID string) {
	m.mu.Lock()
	c := m.consoles[nodeUUID]
	m.mu.Unlock()
	if c != nil && c.stop() {
		m.log.Info("console: disabled", "node", nodeUUID)
	}
}

// Forget drops a node's console and scrollback (the node was deleted).
func (m *Manager) Forget(nodeUUID string) {
	m.Disable(nodeUUID)
	m.mu.Lock()
	delete(m.consoles, nodeUUID)
	m.mu.Unlock()
}

// Enabled reports whether this controller holds the node's console.
func (m *Manager) Enabled(nodeUUID string) bool {
	c := m.get(nodeUUID)
	return c != nil && c.running()
}

// Held lists the nodes whose console this controller holds.
func (m *Manager) Held() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	for id, c := range m.consoles {
		if c.running() {
			out = append(out, id)
		}
	}
	return out
}

// Known lists the nodes whose console or scrollback this controller has.
func (m *Manager) Known() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]string, 0, len(m.consoles))
	for id := range m.consoles {
		out = append(out, id)
	}
	return out
}

// Token is the node's current TCP console token ("" when not enabled).
func (m *Manager) Token(nodeUUID string) string {
	c := m.get(nodeUUID)
	if c == nil || !c.running() {
		return ""
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.token
}

// Scrollback returns the node's kept output, oldest first; ok is false
// when this controller has never held the node's console.
// ScrollbackOf is the scrollback of n's console if it was kept under n's
// present owner, lessee and instance: a node that changed hands shows none
// of what its console printed before.
func (m *Manager) ScrollbackOf(n *store.Node) (b []byte, ok bool) {
	c := m.get(n.UUID)
	if c == nil {
		return nil, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.tenancy != tenancyOf(n) {
		return nil, false
	}
	return c.ring.Bytes(), true
}

// tenancyOf names who a node's console output belongs to.
func tenancyOf(n *store.Node) string {
	s := func(p *string) string {
		if p == nil {
			return ""
		}
		return *p
	}
	return s(n.Owner) + "\x00" + s(n.Lessee) + "\x00" + s(n.InstanceUUID)
}

// Scrollback is the kept scrollback of the node's console, whoever it
// belongs to (tests, and callers that checked the node).
func (m *Manager) Scrollback(nodeUUID string) (b []byte, ok bool) {
	c := m.get(nodeUUID)
	if c == nil {
		return nil, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ring.Bytes(), true
}

// Attach adds a viewer of the node's console. The viewer first receives
// the scrollback, then live output. With wantInput it gets the console's
// input unless another viewer has it (Viewer.CanWrite says which).
func (m *Manager) Attach(nodeUUID string, wantInput bool) (*Viewer, error) {
	c := m.get(nodeUUID)
	if c == nil || !c.running() {
		return nil, ErrNotEnabled
	}
	return c.attach(wantInput, m.cfg.ViewerBuffer)
}

// Close stops every console (controller shutdown).
func (m *Manager) Close() {
	m.mu.Lock()
	m.closed = true
	all := make([]*nodeConsole, 0, len(m.consoles))
	for _, c := range m.consoles {
		all = append(all, c)
	}
	m.mu.Unlock()
	var wg sync.WaitGroup
	for _, c := range all {
		wg.Go(func() { c.stop() })
	}
	wg.Wait()
}

func (m *Manager) get(nodeUUID string) *nodeConsole {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.consoles[nodeUUID]
}

// run keeps a session open until ctx ends, reopening it with exponential
// backoff; every change is written into the console's stream as an
// "[anvil] ..." line, so viewers and the scrollback show the gaps.
func (m *Manager) run(ctx context.Context, c *nodeConsole, n *store.Node) {
	backoff := m.cfg.MinBackoff
	wait := func() bool {
		t := time.NewTimer(backoff)
		defer t.Stop()
		backoff = min(backoff*2, m.cfg.MaxBackoff)
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
			return true
		}
	}
	for ctx.Err() == nil {
		s, err := m.cfg.Opener.Open(ctx, n)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			m.log.Warn("console: opening failed", "node", n.UUID, "error", err, "retry_in", backoff)
			c.notice(fmt.Sprintf("cannot open the console: %v; retrying in %s", err, backoff))
			if !wait() {
				return
			}
			continue
		}
		c.notice("console connected")
		pr, pw := io.Pipe()
		c.setInput(pw)
		start := time.Now()
		err = s.Run(ctx, pr, c)
		c.setInput(nil)
		_ = pw.Close()
		if cerr := s.Close(ctx); cerr != nil {
			m.log.Debug("console: closing the session", "node", n.UUID, "error", cerr)
		}
		if ctx.Err() != nil {
			return
		}
		if time.Since(start) > 4*m.cfg.MaxBackoff {
			backoff = m.cfg.MinBackoff // it had been working: a fresh drop
		}
		reason := "the BMC ended the session"
		if err != nil {
			reason = err.Error()
		}
		m.log.Warn("console: session dropped", "node", n.UUID, "reason", reason, "reopen_in", backoff)
		c.notice(fmt.Sprintf("console lost (%s); reopening in %s", reason, backoff))
		if !wait() {
			return
		}
	}
}
