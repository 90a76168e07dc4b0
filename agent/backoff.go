package agent

import (
	"math/rand/v2"
	"time"
)

// Backoff is a bounded exponential backoff with full jitter. Jitter matters
// more than the curve: a rack of agents losing the controller together must
// not come back together (LP#2038438).
type Backoff struct {
	Initial time.Duration // first delay; 0 means 1 s
	Max     time.Duration // cap; 0 means 30 s
}

func (b Backoff) withDefaults() Backoff {
	if b.Initial <= 0 {
		b.Initial = time.Second
	}
	if b.Max <= 0 {
		b.Max = 30 * time.Second
	}
	if b.Max < b.Initial {
		b.Max = b.Initial
	}
	return b
}

// retrier counts consecutive failures of one loop.
type retrier struct {
	b        Backoff
	failures int
}

func newRetrier(b Backoff) *retrier { return &retrier{b: b.withDefaults()} }

// next returns the delay before the next attempt: a random duration in
// [d/2, d] where d doubles per failure up to Max.
func (r *retrier) next() time.Duration {
	d := r.b.Delay(r.failures)
	r.failures++
	return d
}

// Delay is the wait after the given number of consecutive failures: a
// random duration in [d/2, d] where d doubles per failure up to Max.
func (b Backoff) Delay(failures int) time.Duration {
	b = b.withDefaults()
	d := b.Initial
	for i := 0; i < failures && d < b.Max; i++ {
		d *= 2
	}
	d = min(d, b.Max)
	return d/2 + rand.N(d/2+1)
}

func (r *retrier) reset() { r.failures = 0 }

// jitter spreads an interval by ±10% so heartbeats of many agents drift
// apart instead of arriving in bursts.
func jitter(d time.Duration) time.Duration {
	if d <= 0 {
		return d
	}
	spread := d / 5
	return d - d/10 + rand.N(spread+1)
}
