// Package limits bounds what unauthenticated callers can cost the
// controller: a token bucket per key (a source address, a MAC, a node),
// in bounded memory. The API's per-source limit, the boot service and the
// history written on behalf of strangers all use it, so a flood from the
// provisioning network is cut to a known rate wherever it lands.
package limits

import (
	"context"
	"sync"
	"time"
)

// Rate is a token bucket's refill rate and size.
type Rate struct {
	PerSecond float64 // tokens added per second; 0 = unlimited
	Burst     int     // tokens a key may spend at once (at least 1)
}

// Keyed is a token bucket per key. Use NewKeyed.
type Keyed struct {
	rate    Rate
	max     int
	now     func() time.Time
	mu      sync.Mutex
	buckets map[string]*bucket
}

type bucket struct {
	tokens  float64
	at      time.Time
	refused int // takes refused since the last one allowed
}

// DefaultMaxKeys bounds a Keyed's memory when NewKeyed is given 0.
const DefaultMaxKeys = 65536

// NewKeyed limits each key to r, remembering at most maxKeys keys (0:
// DefaultMaxKeys). now is the clock (nil: time.Now).
func NewKeyed(r Rate, maxKeys int, now func() time.Time) *Keyed {
	if maxKeys <= 0 {
		maxKeys = DefaultMaxKeys
	}
	if now == nil {
		now = time.Now
	}
	return &Keyed{rate: r, max: maxKeys, now: now, buckets: map[string]*bucket{}}
}

// Allow takes a token of key's bucket if it has one.
func (k *Keyed) Allow(key string) bool {
	ok, _ := k.Take(key)
	return ok
}

// Take is Allow that also says, when it allows, how many takes of key
// were refused since the last one it allowed (so a caller can say "N
// more were dropped" once the key may speak again).
func (k *Keyed) Take(key string) (ok bool, refusedBefore int) {
	if k.rate.PerSecond <= 0 {
		return true, 0
	}
	burst := float64(max(k.rate.Burst, 1))
	now := k.now()
	k.mu.Lock()
	defer k.mu.Unlock()
	b, found := k.buckets[key]
	if !found {
		if len(k.buckets) >= k.max {
			k.forget(now, burst)
			if len(k.buckets) >= k.max/2 {
				// Too many live keys (a sweep of addresses or made-up
				// MACs): start over rather than scan a full table for
				// every new one.
				k.buckets = map[string]*bucket{}
			}
		}
		b = &bucket{tokens: burst, at: now}
		k.buckets[key] = b
	}
	b.tokens = min(burst, b.tokens+now.Sub(b.at).Seconds()*k.rate.PerSecond)
	b.at = now
	if b.tokens < 1 {
		b.refused++
		return false, 0
	}
	b.tokens--
	refused := b.refused
	b.refused = 0
	return true, refused
}

// forget drops the buckets that have refilled: their keys are idle.
func (k *Keyed) forget(now time.Time, burst float64) {
	full := time.Duration(burst / k.rate.PerSecond * float64(time.Second))
	for key, b := range k.buckets {
		if now.Sub(b.at) >= full {
			delete(k.buckets, key)
		}
	}
}

// Len is the number of keys remembered (for tests and metrics).
func (k *Keyed) Len() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.buckets)
}

// Budgeted wraps record, a writer of lines into a node's history, with a
// budget of r per node: a line over the budget is left out and counted
// (suppressed, if set), and the next line the node may have again says
// how many were left out, in the words note gives (" (N ... were not
// recorded)"). It is what keeps requests from strangers, who cost nothing
// to send, from filling a node's history. now is the clock (nil:
// time.Now).
func Budgeted(record func(ctx context.Context, nodeUUID, severity, msg string), r Rate, now func() time.Time,
	note func(left int) string, suppressed func(n int)) func(ctx context.Context, nodeUUID, severity, msg string) {
	budget := NewKeyed(r, 0, now)
	return func(ctx context.Context, nodeUUID, severity, msg string) {
		ok, left := budget.Take(nodeUUID)
		if !ok {
			if suppressed != nil {
				suppressed(1)
			}
			return
		}
		if left > 0 {
			msg += note(left)
		}
		record(ctx, nodeUUID, severity, msg)
	}
}
