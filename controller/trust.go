package controller

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/anvil-metal/anvil/controller/limits"
	"github.com/anvil-metal/anvil/controller/store"
)

// leaseBook answers the conductor's "which addresses did our DHCP server
// lease to these MACs since?" from the lease table (full mode), so a
// node's boot script carries its nonce only to the address its port was
// given in this boot.
type leaseBook struct {
	st interface {
		ListDHCPLeases(context.Context) ([]store.DHCPLease, error)
	}
	now func() time.Time
	// term is the lease time the DHCP server gives nodes being booted: a
	// lease expiring at t was given (or renewed) at t-term. The table
	// keeps no grant time; every answer to a booting node's DHCP
	// REQUEST moves its expiry to now+term.
	term time.Duration
}

// LeasedTo returns the addresses of macs' live leases given or renewed
// at or after since.
func (b leaseBook) LeasedTo(ctx context.Context, macs []string, since time.Time) ([]netip.Addr, error) {
	leases, err := b.st.ListDHCPLeases(ctx)
	if err != nil {
		return nil, err
	}
	now := b.now()
	var out []netip.Addr
	for _, l := range leases {
		if !slices.Contains(macs, l.MAC) || !l.ExpiresAt.After(now) || l.ExpiresAt.Add(-b.term).Before(since) {
			continue
		}
		if a, err := netip.ParseAddr(l.IP); err == nil {
			out = append(out, a)
		}
	}
	return out, nil
}

// bootHistoryBudget bounds the history lines the boot service writes into
// one node's history (DHCP answers, TFTP transfers): a real boot writes
// about ten, a stranger forging requests for a node's addresses no more
// than a burst and then one every ten seconds.
var bootHistoryBudget = limits.Rate{PerSecond: 0.1, Burst: 30}

// bootRecorder is record within each node's bootHistoryBudget.
func bootRecorder(record func(ctx context.Context, nodeUUID, severity, msg string), suppressed func(n int)) func(ctx context.Context, nodeUUID, severity, msg string) {
	return limits.Budgeted(record, bootHistoryBudget, time.Now, bootHistoryNote, suppressed)
}

// bootHistoryNote says how many boot-service lines a node's budget left out.
func bootHistoryNote(left int) string {
	return fmt.Sprintf(" (%d earlier boot-service lines for this node were not recorded: over its budget)", left)
}
