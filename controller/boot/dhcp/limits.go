package dhcp

// Limits bound what DHCP clients may cost the responder. A PXE ROM sends
// a handful of packets per boot (DISCOVER and REQUEST, resent after a few
// seconds, then iPXE's and the ramdisk's own), so the per-MAC default
// leaves a wide margin while one looping client is cut to PerMAC a second.
// A flood of made-up MACs escapes a per-MAC bound, and in discovery mode
// each of them would be answered (a lease-table read and an address
// held): Discovery bounds the MACs no port has that are answered for the
// first time, over all of them.
type Limits struct {
	PerMAC      float64 // packets handled per second from one client MAC
	PerMACBurst int     // packets one MAC may send at once
	// Discovery is how many MACs no port has, not answered in the last
	// discoveryWindow, are answered per second (bursts of DiscoveryBurst).
	Discovery      float64
	DiscoveryBurst int
}

// DefaultLimits are the limits of a production controller.
func DefaultLimits() Limits {
	return Limits{PerMAC: 5, PerMACBurst: 20, Discovery: 20, DiscoveryBurst: 20}
}

// withDefaults fills the fields left zero from DefaultLimits.
func (l Limits) withDefaults() Limits {
	d := DefaultLimits()
	if l.PerMAC <= 0 {
		l.PerMAC = d.PerMAC
	}
	if l.PerMACBurst <= 0 {
		l.PerMACBurst = d.PerMACBurst
	}
	if l.Discovery <= 0 {
		l.Discovery = d.Discovery
	}
	if l.DiscoveryBurst <= 0 {
		l.DiscoveryBurst = d.DiscoveryBurst
	}
	return l
}

// maxClients bounds the per-MAC buckets.
const maxClients = 16384

// allowMAC takes a token of mac's bucket: false if mac is over its rate.
func (r *Responder) allowMAC(mac string) bool { return r.perMAC.Allow(mac) }

// makeRoom keeps table m below limit entries before one is added: it drops
// the stale entries, and all of them if that frees less than a quarter
// (a flood of made-up MACs), so a full table is scanned once per many
// additions rather than for each.
func makeRoom[K comparable, V any](m map[K]V, limit int, stale func(V) bool) {
	if len(m) < limit {
		return
	}
	for k, v := range m {
		if stale(v) {
			delete(m, k)
		}
	}
	if len(m) > limit*3/4 {
		clear(m)
	}
}

// drop counts a request refused or ignored for one of the bounds.
func (r *Responder) drop(reason string) {
	if r.cfg.Dropped != nil {
		r.cfg.Dropped(reason)
	}
}
