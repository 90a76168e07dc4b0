package api

import (
	"net"
	"net/http"
	"sync"
	"time"
)

// PublicLimit bounds how often one source address may call the
// unauthenticated endpoints (lookup, heartbeat, boot script and files).
// A real agent heartbeats every few seconds and iPXE fetches three files
// per boot, so the default leaves a wide margin while a flood from one
// address (a takeover attempt, a guessing loop) is cut to Rate per second.
type PublicLimit struct {
	Rate  float64 // requests per second per source; 0 = unlimited
	Burst int     // requests a source may send at once
	// Loopback sources are exempt: simulated fleets and tools on the
	// controller's host share one address.
	LimitLoopback bool
}

// DefaultPublicLimit is the limit of a production controller.
func DefaultPublicLimit() PublicLimit { return PublicLimit{Rate: 10, Burst: 40} }

// maxSources bounds the limiter's memory: beyond it, sources idle for a
// full bucket's refill are forgotten, and all of them if that is not
// enough.
const maxSources = 65536

// limiter is a token bucket per source address.
type limiter struct {
	cfg     PublicLimit
	now     func() time.Time
	mu      sync.Mutex
	buckets map[string]*bucket
}

type bucket struct {
	tokens float64
	at     time.Time
}

func newLimiter(cfg PublicLimit, now func() time.Time) *limiter {
	return &limiter{cfg: cfg, now: now, buckets: map[string]*bucket{}}
}

// allow takes one token of src's bucket, if it has one.
func (l *limiter) allow(src string) bool {
	if l.cfg.Rate <= 0 {
		return true
	}
	if ip := net.ParseIP(src); ip != nil && ip.IsLoopback() && !l.cfg.LimitLoopback {
		return true
	}
	burst := float64(max(l.cfg.Burst, 1))
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	b, ok := l.buckets[src]
	if !ok {
		if len(l.buckets) >= maxSources {
			l.forget(now, burst)
			if len(l.buckets) >= maxSources/2 {
				// Too many live sources (a sweep of addresses): start
				// over rather than scan a full table for every new one.
				l.buckets = map[string]*bucket{}
			}
		}
		b = &bucket{tokens: burst, at: now}
		l.buckets[src] = b
	}
	b.tokens = min(burst, b.tokens+now.Sub(b.at).Seconds()*l.cfg.Rate)
	b.at = now
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

// forget drops the buckets that have refilled (their sources are idle).
func (l *limiter) forget(now time.Time, burst float64) {
	full := time.Duration(burst / l.cfg.Rate * float64(time.Second))
	for src, b := range l.buckets {
		if now.Sub(b.at) >= full {
			delete(l.buckets, src)
		}
	}
}

// limitPublic refuses with 429 the requests of a source over its rate.
func (s *Server) limitPublic(route string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !s.limiter.allow(sourceAddr(r)) {
			if s.metrics != nil {
				s.metrics.limited.WithLabelValues(route).Inc()
			}
			w.Header().Set("Retry-After", "1")
			s.writeError(w, r, errf(http.StatusTooManyRequests, "Too many requests from %s; retry later.", sourceAddr(r)))
			return
		}
		next.ServeHTTP(w, r)
	})
}
