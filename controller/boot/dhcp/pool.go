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

// splitRange cuts the top pct percent of r (at least one address, the
// server's own not counted) off for discovery targets: share, and main
// before it (invalid when the share is the whole range). Being a part of
// the range itself, the same on every controller given the same flags,
// it holds across controllers sharing the lease table.
func splitRange(r Range, pct float64, server netip.Addr) (main, share Range) {
	n := u32(r.Last) - u32(r.First) + 1
	k := max(1, min(n, uint32(float64(n)*pct/100)))
	share = Range{fromU32(u32(r.Last) - k + 1), r.Last}
	if share.Contains(server) && k < n {
		k++
		share.First = fromU32(u32(r.Last) - k + 1)
	}
	if k < n {
		main = Range{r.First, fromU32(u32(r.Last) - k)}
	}
	return main, share
}

// pool hands out addresses of a range, recorded in a LeaseStore: to
// enrolled nodes from all of it, the part before the share first, and to
// discovery targets from the share only, so made-up MACs can exhaust no
// more than that.
type pool struct {
	main, share Range
	exclude     netip.Addr // the server's own address, if inside the range
	st          LeaseStore
	mu          sync.Mutex // one allocation at a time in this process; the store arbitrates between processes
	// held are addresses offered and not yet requested. Offers are kept in
	// memory only: an offer is not a lease, and writing each to the
	// database would double the writes of a busy boot storm. The REQUEST's
	// claim in the store decides (another controller's claim in between
	// gets the client a NAK, and it starts over). At most one per address.
	held map[netip.Addr]hold
}

type hold struct {
	mac   string
	until time.Time
}

var errPoolFull = errors.New("dhcp: no free address in the range")

// areas are the parts of the range a client may get, in order of preference.
func (p *pool) areas(discovery bool) []Range {
	if discovery || !p.main.First.IsValid() {
		return []Range{p.share}
	}
	return []Range{p.main, p.share}
}

func within(areas []Range, a netip.Addr) bool {
	return slices.ContainsFunc(areas, func(r Range) bool { return r.Contains(a) })
}

// offer picks and holds (until expires) an address for mac within its
// areas: its current lease's or offer's address, else the one it asks
// for if free, else a never-leased address, else the one whose lease
// expired longest ago (the first area's before the next's).
func (p *pool) offer(ctx context.Context, mac string, requested netip.Addr, discovery bool, now, expires time.Time) (netip.Addr, error) {
	areas := p.areas(discovery)
	p.mu.Lock()
	defer p.mu.Unlock()
	leases, err := p.st.ListDHCPLeases(ctx)
	if err != nil {
		return netip.Addr{}, err
	}
	if p.held == nil {
		p.held = map[netip.Addr]hold{}
	}
	byIP := make(map[netip.Addr]store.DHCPLease, len(leases))
	var mine netip.Addr
	for _, l := range leases {
		a, err := netip.ParseAddr(l.IP)
		if err != nil {
			continue
		}
		byIP[a] = l
		if l.MAC == mac && within(areas, a) {
			mine = a
		}
	}
	for a, h := range p.held {
		switch {
		case !h.until.After(now):
			delete(p.held, a)
		case h.mac == mac && !mine.IsValid() && within(areas, a):
			mine = a
		}
	}
	// usable: not the server's, not offered to another; leased reports
	// whether someone has had a lease on it, live is whether that is
	// another MAC's and still running.
	usable := func(a netip.Addr) (ok, leased, live bool) {
		if a == p.exclude {
			return false, false, false
		}
		if h, held := p.held[a]; held && h.mac != mac {
			return false, false, false
		}
		l, leased := byIP[a]
		return true, leased, leased && l.MAC != mac && l.ExpiresAt.After(now)
	}
	addr := mine
	if ok, _, live := usable(requested); !addr.IsValid() && requested.IsValid() && within(areas, requested) && ok && !live {
		addr = requested
	}
	for _, area := range areas {
		if addr.IsValid() {
			break
		}
		var oldest store.DHCPLease
		for v := u32(area.First); ; v++ {
			a := fromU32(v)
			ok, leased, live := usable(a)
			if ok && !leased {
				addr = a
				break
			}
			if ok && !live && (oldest.IP == "" || byIP[a].ExpiresAt.Before(oldest.ExpiresAt)) {
				oldest = byIP[a]
			}
			if v == u32(area.Last) {
				break // v++ would wrap at 255.255.255.255
			}
		}
		if !addr.IsValid() && oldest.IP != "" {
			addr = netip.MustParseAddr(oldest.IP)
		}
	}
	if !addr.IsValid() {
		return netip.Addr{}, errPoolFull
	}
	p.held[addr] = hold{mac: mac, until: expires}
	return addr, nil
}

// confirm binds addr to mac until expires (a REQUEST); false if the address
// is outside mac's areas or someone else's.
func (p *pool) confirm(ctx context.Context, mac string, addr netip.Addr, discovery bool, now, expires time.Time) (bool, error) {
	if !within(p.areas(discovery), addr) || addr == p.exclude {
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
