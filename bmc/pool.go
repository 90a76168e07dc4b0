package bmc

// Redfish sessions kept across operations, the per-BMC cap on operations
// at once, and the pacing of commands to one BMC. A BMC allows few sessions (iDRAC and iLO about
// eight, shared with the web UI and every other client), and a login
// costs it more than the request it precedes: logging in and out around
// every power read ran small BMCs out of sessions under load. So a
// session that ended its operation in good health is kept (at most
// RedfishMaxConcurrent per BMC, idle ones included), reused by the next
// operation on the same BMC with the same credentials and system, logged
// out after SessionIdle without use or by Close, and replaced by a fresh
// login when the BMC refuses it (expired or forgotten in a BMC restart).

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sync"
	"time"

	"github.com/anvil-metal/anvil/internal/pause"
)

// bmcLock is the state of one physical BMC: sem caps the operations on it
// at once (1 for IPMI, RedfishMaxConcurrent for Redfish).
type bmcLock struct {
	sem chan struct{}

	mu   sync.Mutex
	last time.Time      // end of the previous command
	open int            // sessions held by running operations
	idle []*keptSession // sessions kept for reuse, oldest first
}

// keptSession is an idle session and what it was opened for.
type keptSession struct {
	s     session
	ident string
	timer *time.Timer
}

func (l *bmcLock) lastAt() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.last
}

func (l *bmcLock) touch() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.last = time.Now()
}

// dropped notes that an operation's session is gone (closed or kept).
func (l *bmcLock) dropped() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.open--
}

// sessionIdent is what a kept session must match to be reused: the BMC,
// the credentials (a changed password must be tried, not bypassed by an
// old session) and everything its transport was built with but the
// system, which a kept session switches (retargeter).
func sessionIdent(t Target) string {
	pw := sha256.Sum256([]byte(t.Password))
	return fmt.Sprintf("%s|%s|%s|%t|%s|%s", t.key(), t.Username, t.Scheme, t.VerifyCA, t.CAFile, hex.EncodeToString(pw[:8]))
}

// keeps reports whether this operation's sessions are kept: Redfish
// sessions only (ipmitool is one-shot; the fake counts its opens).
func (op *operation) keeps() bool {
	return op.t.HardwareType == HardwareRedfish && op.m.cfg.SessionIdle > 0
}

// openSession takes a kept session for this target, or logs in, first
// logging out kept sessions that would take the BMC over its cap.
func (op *operation) openSession(ctx context.Context) error {
	l := op.lock
	ident := sessionIdent(op.t)
	var evict []*keptSession
	l.mu.Lock()
	if op.keeps() {
		for i, k := range l.idle {
			if k.ident == ident && k.timer.Stop() {
				l.idle = append(l.idle[:i], l.idle[i+1:]...)
				l.open++
				l.mu.Unlock()
				if r, ok := k.s.(retargeter); ok {
					r.retarget(op.t.SystemID)
				}
				op.sess, op.reused = k.s, true
				return nil
			}
		}
	}
	for len(l.idle) > 0 && l.open+len(l.idle) >= cap(l.sem) {
		evict = append(evict, l.takeOldest())
	}
	l.open++ // counted from now: a concurrent operation must not log in past the cap
	l.mu.Unlock()
	for _, k := range evict {
		if k != nil {
			op.logout(ctx, k.s)
		}
	}
	s, err := op.login(ctx)
	if err != nil {
		l.dropped()
		return err
	}
	op.sess, op.reused = s, false
	return nil
}

// login opens a session. A BMC out of sessions (a busy answer to the
// login) first gets back the sessions kept idle for it, which may be what
// fills it (when RedfishMaxConcurrent is above its limit).
func (op *operation) login(ctx context.Context) (session, error) {
	if err := op.pace(ctx, op.minInterval()); err != nil {
		return nil, err
	}
	octx, cancel := context.WithTimeout(ctx, op.m.cfg.ConnectTimeout)
	s, err := op.m.openers[op.t.HardwareType].open(octx, op.t)
	cancel()
	op.lock.touch()
	if err != nil && kindOf(err) == kindBusy {
		op.lock.mu.Lock()
		k := op.lock.takeOldest()
		op.lock.mu.Unlock()
		if k != nil {
			op.log.InfoContext(ctx, "bmc: the BMC refused a login; logging out a kept session", "error", err)
			op.logout(ctx, k.s)
		}
	}
	return s, err
}

// takeOldest removes the oldest idle session from the pool (nil: none,
// or its idle timer is logging it out already). Called with l.mu held.
func (l *bmcLock) takeOldest() *keptSession {
	if len(l.idle) == 0 {
		return nil
	}
	k := l.idle[0]
	l.idle = l.idle[1:]
	if !k.timer.Stop() {
		return nil
	}
	return k
}

// retargeter is a session that can act for another system of its BMC
// (Redfish: the transport narrows the Systems collection to one member).
type retargeter interface {
	retarget(systemID string)
}

// finish ends the operation's use of its session: kept for the next one
// when it is healthy (its last command succeeded), else logged out.
func (op *operation) finish(ctx context.Context) {
	if op.sess == nil {
		return
	}
	if !op.keeps() || !op.healthy {
		op.closeSession(ctx)
		return
	}
	l, s := op.lock, op.sess
	k := &keptSession{s: s, ident: sessionIdent(op.t)}
	l.mu.Lock()
	k.timer = time.AfterFunc(op.m.cfg.SessionIdle, func() {
		l.mu.Lock()
		for i, kk := range l.idle {
			if kk == k {
				l.idle = append(l.idle[:i], l.idle[i+1:]...)
				break
			}
		}
		l.mu.Unlock()
		op.logout(context.Background(), s)
	})
	l.idle = append(l.idle, k)
	l.open--
	l.mu.Unlock()
	op.sess = nil
}

// logout closes a session no operation holds, with its own deadline.
func (op *operation) logout(ctx context.Context, s session) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), op.m.cfg.ConnectTimeout)
	defer cancel()
	s.close(cctx)
}

// Close logs out every kept session. The Manager stays usable (later
// operations log in again).
func (m *Manager) Close(ctx context.Context) {
	m.mu.Lock()
	locks := make([]*bmcLock, 0, len(m.bmcs))
	for _, l := range m.bmcs {
		locks = append(locks, l)
	}
	m.mu.Unlock()
	for _, l := range locks {
		l.mu.Lock()
		var out []*keptSession
		for _, k := range l.idle {
			if k.timer.Stop() {
				out = append(out, k)
			}
		}
		l.idle = nil
		l.mu.Unlock()
		for _, k := range out {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), m.cfg.ConnectTimeout)
			k.s.close(cctx)
			cancel()
		}
	}
}

// resendAfter is how long a boot override may take to show before it is
// set again: a few read-backs, so a BMC that applies it lazily is not
// flooded with PATCHes.
func resendAfter(cfg Config) time.Duration {
	return min(3*cfg.PollInterval, cfg.VerifyTimeout/4)
}

// minInterval is the spacing of commands to this operation's BMC.
func (op *operation) minInterval() time.Duration {
	if op.t.HardwareType == HardwareRedfish {
		return op.m.cfg.RedfishMinInterval
	}
	return op.m.cfg.MinInterval
}

// pace waits until MinInterval has passed since the previous command to
// this BMC.
func (op *operation) pace(ctx context.Context, gap time.Duration) error {
	wait := time.Until(op.lock.lastAt().Add(gap))
	if wait <= 0 {
		return nil
	}
	if !pause.For(ctx, wait) {
		return ctx.Err()
	}
	return nil
}
