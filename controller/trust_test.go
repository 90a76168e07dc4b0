package controller

import (
	"context"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/controller/limits"
	"github.com/anvil-metal/anvil/controller/store"
)

type leaseTable []store.DHCPLease

func (l leaseTable) ListDHCPLeases(context.Context) ([]store.DHCPLease, error) { return l, nil }

func TestLeaseBookGivesLiveLeasesOfTheMACs(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	b := leaseBook{now: func() time.Time { return now }, term: time.Hour, st: leaseTable{
		{MAC: "52:54:00:00:00:01", IP: "10.0.0.101", ExpiresAt: now.Add(time.Hour)},
		{MAC: "52:54:00:00:00:02", IP: "10.0.0.102", ExpiresAt: now.Add(time.Hour)},
		{MAC: "52:54:00:00:00:03", IP: "10.0.0.103", ExpiresAt: now.Add(-time.Second)},
		{MAC: "52:54:00:00:00:04", IP: "10.0.0.104", ExpiresAt: now.Add(50 * time.Minute)},
	}}
	macs := []string{"52:54:00:00:00:01", "52:54:00:00:00:03", "52:54:00:00:00:04"}
	got, err := b.LeasedTo(context.Background(), macs, time.Time{})
	require.NoError(t, err)
	assert.Equal(t, []netip.Addr{netip.MustParseAddr("10.0.0.101"), netip.MustParseAddr("10.0.0.104")}, got,
		"another MAC's lease and an expired one do not count")
	got, err = b.LeasedTo(context.Background(), macs, now.Add(-5*time.Minute))
	require.NoError(t, err)
	assert.Equal(t, []netip.Addr{netip.MustParseAddr("10.0.0.101")}, got,
		"a lease given ten minutes ago is the previous boot's, not one given since this boot started")
}

// A stranger forging boot requests for a node's address fills its history
// up to the budget; what is left out is counted and said once the node
// may speak again.
func TestBudgetedRecorder(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	var lines []string
	suppressed := 0
	rec := limits.Budgeted(func(_ context.Context, node, sev, msg string) { lines = append(lines, node+" "+msg) },
		limits.Rate{PerSecond: 0.1, Burst: 3}, func() time.Time { return now }, bootHistoryNote, func(n int) { suppressed += n })
	for range 100 {
		rec(context.Background(), "n1", "WARNING", "TFTP of undionly.kpxe failed")
	}
	rec(context.Background(), "n2", "INFO", "DHCP ACK")
	assert.Len(t, lines, 4, "the burst for n1, and n2 has its own budget")
	assert.Equal(t, 97, suppressed)
	now = now.Add(10 * time.Second)
	rec(context.Background(), "n1", "INFO", "TFTP sent vmlinuz")
	require.Len(t, lines, 5)
	assert.True(t, strings.HasSuffix(lines[4], "(97 earlier boot-service lines for this node were not recorded: over its budget)"), lines[4])
}
