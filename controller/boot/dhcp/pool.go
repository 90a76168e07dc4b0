package dhcp

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/anvil-metal/anvil/controller/store"
)

// LeaseStore keeps full-mode leases in the database, so that a restarted
// controller (or another one sharing PostgreSQL) never hands out an address
// that is still someone's.
type LeaseStore interface {
	ListDHCPLeases(ctx context.Context) ([]store.DHCPLease, error)
	// ClaimDHCPLease gives l.IP to l.MAC until l.ExpiresAt, replacing the
	// MAC's earlier lease; store.ErrConflict if another MAC's lease on the
	// address is live at now.
	ClaimDHCPLease(ctx context.Context, l store.DHCPLease, now time.Time) error
}

// Range is an inclusive range of IPv4 addresses.
type Range struct{ First, Last netip.Addr }

// maxRange bounds a range so the free-address scan stays cheap.
const maxRange = 1 << 16

// ParseRange reads "FIRST-LAST" (both IPv4, FIRST <= LAST).
func ParseRange(s string) (Range, error) {
	a, b, ok := strings.Cut(s, "-")
	if !ok {
		return Range{}, fmt.Errorf("DHCP range %q: want FIRST-LAST, e.g. 10.0.0.100-10.0.0.199", s)
	}
	first, err1 := netip.ParseAddr(strings.TrimSpace(a))
	last, err2 := netip.ParseAddr(strings.TrimSpace(b))
	if err1 != nil || err2 != nil || !first.Is4() || !last.Is4() {
		return Range{}, fmt.Errorf("DHCP range %q: both ends must be IPv4 addresses", s)
	}
	if last.Less(first) {
		return Range{}, fmt.Errorf("DHCP range %q: the first address is after the last", s)
	}
	if u32(last)-u32(first) >= maxRange {
		return Range{}, fmt.Errorf("DHCP range %q: more than %d addresses", s, maxRange)
	}
	return Range{first, last}, nil
}

func (r Range) Contains(a netip.Addr) bool {
	return a.Is4() && !a.Less(r.First) && !r.Last.Less(a)
}

func u32(a netip.Addr) uint32 {
	b := a.As4()
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
}

func fromU32(v uint32) netip.Addr {
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

// pool hands out addresses of a range, recorded in a LeaseStore.
type pool struct {
	r       Range
	exclude netip.Addr // the server's own address, if inside the range
	st      LeaseStore
	mu      sync.Mutex // one allocation at a time in this process; the store arbitrates between processes
	// held are addresses offered and not yet requested. Offers are kept in
	// memory only: an offer is not a lease, and writing each to the
	// database would double the writes of a busy boot storm. The REQUEST's
	// claim in the store decides (another controller's claim in between
	// gets the client a NAK, and it starts over).
	held map[netip.Addr]hold
}

type hold struct {
	mac   string
	until time.Time
}

var errPoolFull = errors.New("dhcp: no free address in the range")

// offer picks and holds (until expires) an address for mac: its current
// lease's or offer's address, else the one it asks for if free, else a
// never-leased address, else the one whose lease expired longest ago.
func (p *pool) offer(ctx context.Context, mac string, requested netip.Addr, now, expires time.Time) (netip.Addr, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	leases, err := p.st.ListDHCPLeases(ctx)
	if err != nil {
		return netip.Addr{}, err
	}
	if p.held == nil {
		p.held = map[netip.Addr]hold{}
	}
	heldByOther := func(a netip.Addr) bool {
		h, ok := p.held[a]
		return ok && h.mac != mac && h.until.After(now)
	}
	byIP := make(map[netip.Addr]store.DHCPLease, len(leases))
	var mine netip.Addr
	for _, l := range leases {
		a, err := netip.ParseAddr(l.IP)
		if err != nil {
			continue
		}
		byIP[a] = l
		if l.MAC == mac && p.r.Contains(a) {
			mine = a
		}
	}
	for a, h := range p.held {
		switch {
		case !h.until.After(now):
			delete(p.held, a)
		case h.mac == mac && !mine.IsValid():
			mine = a
		}
	}
	free := func(a netip.Addr) bool {
		if !p.r.Contains(a) || a == p.exclude || heldByOther(a) {
			return false
		}
		l, held := byIP[a]
		return !held || l.MAC == mac || !l.ExpiresAt.After(now)
	}
	var cands []netip.Addr
	if mine.IsValid() {
		cands = append(cands, mine)
	}
	if requested.IsValid() && requested != mine && free(requested) {
		cands = append(cands, requested)
	}
	var expired []store.DHCPLease
	for v := u32(p.r.First); v <= u32(p.r.Last) && len(cands) < 8; v++ {
		a := fromU32(v)
		if a == p.exclude || a == mine || a == requested || heldByOther(a) {
			continue
		}
		if l, held := byIP[a]; !held {
			cands = append(cands, a)
		} else if !l.ExpiresAt.After(now) {
			expired = append(expired, l)
		}
		if v == u32(p.r.Last) {
			break // v++ would wrap at 255.255.255.255
		}
	}
	slices.SortFunc(expired, func(a, b store.DHCPLease) int { return a.ExpiresAt.Compare(b.ExpiresAt) })
	for _, l := range expired {
		cands = append(cands, netip.MustParseAddr(l.IP))
	}
	if len(cands) == 0 {
		return netip.Addr{}, errPoolFull
	}
	p.held[cands[0]] = hold{mac: mac, until: expires}
	return cands[0], nil
}

// confirm binds addr to mac until expires (a REQUEST); false if the address
// is outside the range or someone else's.
func (p *pool) confirm(ctx context.Context, mac string, addr netip.Addr, now, expires time.Time) (bool, error) {
	if !p.r.Contains(addr) || addr == p.exclude {
		return false, nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if h, ok := p.held[addr]; ok && h.mac != mac && h.until.After(now) {
		return false, nil // offered to someone else a moment ago
	}
	err := p.st.ClaimDHCPLease(ctx, store.DHCPLease{MAC: mac, IP: addr.String(), ExpiresAt: expires}, now)
	if errors.Is(err, store.ErrConflict) {
		return false, nil
	}
	if err == nil {
		delete(p.held, addr)
	}
	return err == nil, err
}
