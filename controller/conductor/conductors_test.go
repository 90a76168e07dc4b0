package conductor

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/controller/store"
	"github.com/anvil-metal/anvil/controller/store/sqlite"
)

// TestControllersRecordThemselves: controllers sharing a store (not sole)
// record their host and hardware types with every lease renewal, and
// Conductors shows one entry per host, a stopped peer not alive.
func TestControllersRecordThemselves(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st, err := sqlite.Open(ctx, t.TempDir()+"/anvil.db")
	require.NoError(t, err)
	defer st.Close()
	// a peer that stopped renewing a while ago
	require.NoError(t, st.RecordController(ctx, store.Controller{Holder: "gone/1", Hostname: "gone", Drivers: []string{"ipmi"}}, time.Millisecond))

	c := New(st, Config{Host: "ctl-1", LeaseTTL: 80 * time.Millisecond, CheckInterval: time.Hour}, FakeDriver{})
	done := make(chan struct{})
	go func() { _ = c.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	require.Eventually(t, func() bool {
		recs, err := st.ListControllers(ctx)
		require.NoError(t, err)
		for _, r := range recs {
			if r.Hostname == "ctl-1" && r.Holder == c.Holder() {
				return r.Alive && len(r.Drivers) == 1 && r.Drivers[0] == "fake-hardware"
			}
		}
		return false
	}, 5*time.Second, 10*time.Millisecond)

	got, err := c.Conductors(ctx)
	require.NoError(t, err)
	require.Len(t, got, 2)
	assert.Equal(t, "gone", got[0].Hostname, "registered first")
	assert.False(t, got[0].Alive)
	assert.Equal(t, "ctl-1", got[1].Hostname)
	assert.True(t, got[1].Alive)
	require.NotNil(t, got[1].UpdatedAt)
}
