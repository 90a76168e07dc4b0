package console

import (
	"context"
	"errors"
	"io"
	"sync"

	"github.com/anvil-metal/anvil/controller/store"
)

// Fake is an Opener whose sessions are driven by the test: Print sends
// server output to the open session, Typed returns what viewers typed,
// Drop ends the session as a BMC that went away, and Fail makes the next
// opens fail. For the API's, dashboard's and this package's tests.
type Fake struct {
	mu     sync.Mutex
	cur    *fakeSession
	typed  []byte
	fail   error
	opens  int
	closes int
	opened chan struct{} // signalled at every successful open
}

// NewFake returns a Fake whose opens succeed.
func NewFake() *Fake { return &Fake{opened: make(chan struct{}, 16)} }

type fakeSession struct {
	f      *Fake
	output chan []byte
	drop   chan struct{}
	once   sync.Once
}

// Open implements Opener.
func (f *Fake) Open(ctx context.Context, _ *store.Node) (Session, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail != nil {
		return nil, f.fail
	}
	s := &fakeSession{f: f, output: make(chan []byte, 64), drop: make(chan struct{})}
	f.cur = s
	f.opens++
	select {
	case f.opened <- struct{}{}:
	default:
	}
	return s, nil
}

// Opened is signalled at every successful open.
func (f *Fake) Opened() <-chan struct{} { return f.opened }

// Opens and Closes count sessions opened and closed.
func (f *Fake) Opens() int { f.mu.Lock(); defer f.mu.Unlock(); return f.opens }

// Closes counts sessions closed.
func (f *Fake) Closes() int { f.mu.Lock(); defer f.mu.Unlock(); return f.closes }

// Fail makes opens fail with err (nil: succeed again).
func (f *Fake) Fail(err error) { f.mu.Lock(); f.fail = err; f.mu.Unlock() }

// Print sends output from the "server"; false when no session is open.
func (f *Fake) Print(s string) bool {
	f.mu.Lock()
	cur := f.cur
	f.mu.Unlock()
	if cur == nil {
		return false
	}
	select {
	case cur.output <- []byte(s):
		return true
	case <-cur.drop:
		return false
	}
}

// Typed returns everything viewers typed so far.
func (f *Fake) Typed() string { f.mu.Lock(); defer f.mu.Unlock(); return string(f.typed) }

// Drop ends the open session as a BMC that dropped it.
func (f *Fake) Drop() {
	f.mu.Lock()
	cur := f.cur
	f.cur = nil
	f.mu.Unlock()
	if cur != nil {
		cur.once.Do(func() { close(cur.drop) })
	}
}

func (s *fakeSession) Run(ctx context.Context, in io.Reader, out io.Writer) error {
	go func() {
		buf := make([]byte, 256)
		for {
			n, err := in.Read(buf)
			if n > 0 {
				s.f.mu.Lock()
				s.f.typed = append(s.f.typed, buf[:n]...)
				s.f.mu.Unlock()
			}
			if err != nil {
				return
			}
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-s.drop:
			return errors.New("fake BMC dropped the session")
		case p := <-s.output:
			if _, err := out.Write(p); err != nil {
				return err
			}
		}
	}
}

func (s *fakeSession) Close(context.Context) error {
	s.f.mu.Lock()
	s.f.closes++
	if s.f.cur == s {
		s.f.cur = nil
	}
	s.f.mu.Unlock()
	s.once.Do(func() { close(s.drop) })
	return nil
}
