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
// lease to these MACs?" from the lease table (full mode), so a node's boot
// script carries its nonce only to the address its port was given.
type leaseBook struct {
	st interface {
		ListDHCPLeases(context.Context) ([]store.DHCPLease, error)
	}
	now func() time.Time
}

// LeasedTo returns the live leases' addresses of macs.
func (b leaseBook) LeasedTo(ctx context.Context, macs []string) ([]netip.Addr, error) {
	leases, err := b.st.ListDHCPLeases(ctx)
	if err != nil {
		return nil, err
	}
	now := b.now()
	var out []netip.Addr
	for _, l := range leases {
		if !slices.Contains(macs, l.MAC) || !l.ExpiresAt.After(now) {
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

// budgeted wraps a history recorder with a per-node budget; what it
// leaves out is counted (suppressed) and said by the next line it writes.
func budgeted(record func(ctx context.Context, nodeUUID, severity, msg string), r limits.Rate, now func() time.Time,
	suppressed func(n int)) func(ctx context.Context, nodeUUID, severity, msg string) {
	budget := limits.NewKeyed(r, 0, now)
	return func(ctx context.Context, nodeUUID, severity, msg string) {
		ok, dropped := budget.Take(nodeUUID)
		if !ok {
			if suppressed != nil {
				suppressed(1)
			}
			return
		}
		if dropped > 0 {
			msg += fmt.Sprintf(" (%d earlier boot-service lines for this node were not recorded: over its budget)", dropped)
		}
		record(ctx, nodeUUID, severity, msg)
	}
}
