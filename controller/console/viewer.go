package console

import (
	"context"
	"io"
	"sync"
)

// nodeConsole is one node's console: its session loop, scrollback and
// viewers.
type nodeConsole struct {
	uuid string

	mu      sync.Mutex
	ring    *ring
	viewers map[*Viewer]struct{}
	writer  *Viewer        // holds the input; nil: free
	input   *io.PipeWriter // the current session's input; nil between sessions
	token   string
	// tenancy is the node's owner, lessee and instance when its console
	// was last enabled: the scrollback is theirs (tenancyOf).
	tenancy string
	cancel  context.CancelFunc // nil: stopped
	done    chan struct{}
}

func (c *nodeConsole) running() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cancel != nil
}

// stop ends the session loop and disconnects the viewers; it reports
// whether the console was running.
func (c *nodeConsole) stop() bool {
	c.mu.Lock()
	cancel, done := c.cancel, c.done
	c.cancel, c.token = nil, ""
	c.mu.Unlock()
	if cancel == nil {
		return false
	}
	cancel()
	<-done
	c.mu.Lock()
	for v := range c.viewers {
		c.detachLocked(v)
	}
	c.mu.Unlock()
	return true
}

// Write is the session's output: into the scrollback and to every viewer.
func (c *nodeConsole) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ring.Write(p)
	for v := range c.viewers {
		v.sendLocked(c, append([]byte(nil), p...))
	}
	return len(p), nil
}

// notice writes one "[anvil] ..." line into the stream.
func (c *nodeConsole) notice(msg string) {
	_, _ = c.Write([]byte("\r\n[anvil] " + msg + "\r\n"))
}

func (c *nodeConsole) setInput(pw *io.PipeWriter) {
	c.mu.Lock()
	c.input = pw
	c.mu.Unlock()
}

func (c *nodeConsole) attach(wantInput bool, buffer int) (*Viewer, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cancel == nil {
		return nil, ErrNotEnabled
	}
	v := &Viewer{c: c, out: make(chan []byte, buffer)}
	if wantInput && c.writer == nil {
		c.writer = v
		v.canWrite = true
	}
	c.viewers[v] = struct{}{}
	if sb := c.ring.Bytes(); len(sb) > 0 {
		v.out <- sb
	}
	return v, nil
}

// detachLocked removes v and ends its output; c.mu is held.
func (c *nodeConsole) detachLocked(v *Viewer) {
	if _, ok := c.viewers[v]; !ok {
		return
	}
	delete(c.viewers, v)
	if c.writer == v {
		c.writer = nil
	}
	close(v.out)
}

// Viewer is one watcher of a node's console.
type Viewer struct {
	c        *nodeConsole
	out      chan []byte
	canWrite bool
	inputMu  sync.Mutex // one Write at a time into the session's pipe
}

// Output delivers the scrollback, then live output; it is closed when the
// console is disabled, the viewer lagged too far behind, or Close.
func (v *Viewer) Output() <-chan []byte { return v.out }

// CanWrite reports whether this viewer holds the console's input.
func (v *Viewer) CanWrite() bool { return v.canWrite }

// sendLocked queues p for v, or drops v if it is too far behind (a stuck
// browser tab must not hold up the console); c.mu is held.
func (v *Viewer) sendLocked(c *nodeConsole, p []byte) {
	select {
	case v.out <- p:
	default:
		c.detachLocked(v)
	}
}

// Write types p into the console. Input typed while the BMC session is
// being reopened is dropped, as on a disconnected serial line.
func (v *Viewer) Write(p []byte) (int, error) {
	if !v.canWrite {
		return 0, ErrReadOnly
	}
	v.c.mu.Lock()
	in, still := v.c.input, v.c.writer == v
	v.c.mu.Unlock()
	if !still {
		return 0, ErrNotEnabled
	}
	if in == nil {
		return len(p), nil
	}
	v.inputMu.Lock()
	defer v.inputMu.Unlock()
	if _, err := in.Write(p); err != nil {
		return len(p), nil // the session ended meanwhile: dropped
	}
	return len(p), nil
}

// Close detaches the viewer and frees the input if it held it.
func (v *Viewer) Close() {
	v.c.mu.Lock()
	defer v.c.mu.Unlock()
	v.c.detachLocked(v)
}
