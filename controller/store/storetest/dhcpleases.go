package storetest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/controller/store"
)

// dhcpLeases is what the boot service needs of a store.
type dhcpLeases interface {
	ListDHCPLeases(ctx context.Context) ([]store.DHCPLease, error)
	ClaimDHCPLease(ctx context.Context, l store.DHCPLease, now time.Time) error
}

// RunDHCPLeases checks the DHCP lease table: an address belongs to one MAC
// while its lease lives, a MAC moving to another address frees its old
// one, an expired lease can be taken over, and of many racing claims for
// one address exactly one wins.
func RunDHCPLeases(t *testing.T, open func(t *testing.T) store.Store) {
	ctx := context.Background()
	get := func(t *testing.T) dhcpLeases {
		s := open(t)
		t.Cleanup(func() { s.Close() })
		dl, ok := s.(dhcpLeases)
		require.True(t, ok, "%T keeps no DHCP leases", s)
		return dl
	}
	now := time.Unix(1_800_000_000, 0)
	lease := func(mac, ip string, d time.Duration) store.DHCPLease {
		return store.DHCPLease{MAC: mac, IP: ip, ExpiresAt: now.Add(d)}
	}
	t.Run("Claim", func(t *testing.T) {
		s := get(t)
		require.NoError(t, s.ClaimDHCPLease(ctx, lease("aa", "10.0.0.10", time.Hour), now))
		assert.ErrorIs(t, s.ClaimDHCPLease(ctx, lease("bb", "10.0.0.10", time.Hour), now), store.ErrConflict)
		// Renewing one's own lease is fine; moving frees the old address.
		require.NoError(t, s.ClaimDHCPLease(ctx, lease("aa", "10.0.0.10", 2*time.Hour), now))
		require.NoError(t, s.ClaimDHCPLease(ctx, lease("aa", "10.0.0.11", time.Hour), now))
		require.NoError(t, s.ClaimDHCPLease(ctx, lease("bb", "10.0.0.10", time.Minute), now))
		// Expired: taken over.
		require.NoError(t, s.ClaimDHCPLease(ctx, lease("cc", "10.0.0.10", time.Hour), now.Add(2*time.Minute)))
		ls, err := s.ListDHCPLeases(ctx)
		require.NoError(t, err)
		require.Len(t, ls, 2)
		assert.Equal(t, "cc", ls[0].MAC)
		assert.Equal(t, "10.0.0.10", ls[0].IP)
		assert.True(t, ls[0].ExpiresAt.Equal(now.Add(time.Hour)), ls[0].ExpiresAt)
		assert.Equal(t, "aa", ls[1].MAC)
		assert.Equal(t, "10.0.0.11", ls[1].IP)
	})
	t.Run("Race", func(t *testing.T) {
		s := get(t)
		var wg sync.WaitGroup
		var mu sync.Mutex
		won := 0
		for i := range 8 {
			wg.Go(func() {
				err := s.ClaimDHCPLease(ctx, lease(string(rune('a'+i)), "10.0.0.20", time.Hour), now)
				if err == nil {
					mu.Lock()
					won++
					mu.Unlock()
				} else {
					assert.ErrorIs(t, err, store.ErrConflict)
				}
			})
		}
		wg.Wait()
		assert.Equal(t, 1, won)
	})
}
