package api

import (
	"net"
	"net/http"
	"time"

	"github.com/anvil-metal/anvil/controller/limits"
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

// limiter is the per-source limit of the public endpoints: a token
// bucket per address (controller/limits), loopback exempt unless asked.
type limiter struct {
	cfg     PublicLimit
	buckets *limits.Keyed
}

func newLimiter(cfg PublicLimit, now func() time.Time) *limiter {
	return &limiter{cfg: cfg, buckets: limits.NewKeyed(limits.Rate{PerSecond: cfg.Rate, Burst: cfg.Burst}, 0, now)}
}

// allow takes one token of src's bucket, if it has one.
func (l *limiter) allow(src string) bool {
	if ip := net.ParseIP(src); ip != nil && ip.IsLoopback() && !l.cfg.LimitLoopback {
		return true
	}
	return l.buckets.Allow(src)
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
