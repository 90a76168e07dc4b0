package tftp

import (
	"log/slog"
	"net/netip"
	"sync"
	"time"

	"github.com/anvil-metal/anvil/controller/limits"
)

// Reasons a request is refused or a transfer abandoned, as passed to
// Config.Dropped (short, for a metric's label).
const (
	// DropRate: the source sent more packets than RequestRate allows;
	// dropped without an answer.
	DropRate = "rate"
	// DropBusy: all MaxTransfers slots were taken.
	DropBusy = "busy"
	// DropPerSource: the source already held MaxPerSource transfers.
	DropPerSource = "per_source"
	// DropUnknownShare: sources Known does not know already held
	// MaxUnknown transfers together.
	DropUnknownShare = "unknown_share"
	// DropSilent: the client acknowledged nothing (SilentTries sends of
	// the first packet); a forged source never does.
	DropSilent = "silent"
	// DropStalled: the client stopped acknowledging mid-transfer.
	DropStalled = "stalled"
	// DropLifetime: the transfer ran longer than MaxLifetime.
	DropLifetime = "lifetime"
	// DropNotRegular: the name is not a regular file (a FIFO, directory,
	// device, socket); answered "file not found".
	DropNotRegular = "not_regular"
)

// duplicate is admit's answer for a retransmitted request.
const duplicate = "duplicate"

// slots counts the running transfers: all, per source address, and those
// of sources Known does not know.
type slots struct {
	mu        sync.Mutex
	active    map[netip.AddrPort]bool // by client TID: a repeated RRQ is a retransmit; true = known source
	perSource map[netip.Addr]int
	total     int
	unknown   int
}

// admit takes a slot for a request from client, known or not, or returns
// why not (a Drop reason, or duplicate).
func (s *Server) admit(client netip.AddrPort, known bool) string {
	sl := &s.slots
	sl.mu.Lock()
	defer sl.mu.Unlock()
	if _, dup := sl.active[client]; dup {
		return duplicate // the client sent its RRQ again before our first reply arrived
	}
	switch {
	case sl.perSource[client.Addr()] >= s.cfg.MaxPerSource:
		return DropPerSource
	case !known && sl.unknown >= s.cfg.MaxUnknown:
		return DropUnknownShare
	case sl.total >= s.cfg.MaxTransfers:
		return DropBusy
	}
	sl.active[client] = known
	sl.perSource[client.Addr()]++
	sl.total++
	if !known {
		sl.unknown++
	}
	return ""
}

// release gives back the slot admit took for client.
func (s *Server) release(client netip.AddrPort) {
	sl := &s.slots
	sl.mu.Lock()
	defer sl.mu.Unlock()
	known, ok := sl.active[client]
	if !ok {
		return
	}
	delete(sl.active, client)
	if sl.perSource[client.Addr()]--; sl.perSource[client.Addr()] <= 0 {
		delete(sl.perSource, client.Addr())
	}
	sl.total--
	if !known {
		sl.unknown--
	}
}

// inUse is the number of running transfers, and of those of unknown sources.
func (s *Server) inUse() (total, unknown int) {
	s.slots.mu.Lock()
	defer s.slots.mu.Unlock()
	return s.slots.total, s.slots.unknown
}

// maxRateSources bounds the rate limiter's memory (controller/limits
// forgets idle sources beyond it): sources are cheap to forge.
const maxRateSources = 16384

// newRateLimiter is a token bucket per source address; nil (no limit) for
// a negative rate.
func newRateLimiter(rate float64, burst int) *limits.Keyed {
	if rate < 0 {
		return nil
	}
	return limits.NewKeyed(limits.Rate{PerSecond: rate, Burst: burst}, maxRateSources, nil)
}

// allowSource takes a token of src's bucket, if it has one.
func (s *Server) allowSource(src netip.Addr) bool {
	return s.rate == nil || s.rate.Allow(src.String())
}

// throttle bounds the log lines of refusals: one per reason and interval
// (a token bucket per reason), saying how many were left out. The Dropped
// hook counts them all.
type throttle struct{ lines *limits.Keyed }

func newThrottle(every time.Duration, now func() time.Time) *throttle {
	return &throttle{lines: limits.NewKeyed(limits.Rate{PerSecond: 1 / every.Seconds(), Burst: 1}, 0, now)}
}

// warn logs msg for reason unless it did in the last interval.
func (t *throttle) warn(log *slog.Logger, reason, msg string, args ...any) {
	if ok, skipped := t.lines.Take(reason); ok {
		log.Warn(msg, append(args, "reason", reason, "similar_not_logged", skipped)...)
	}
}
