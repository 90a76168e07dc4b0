package limits

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestKeyedBucketPerKey(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	k := NewKeyed(Rate{PerSecond: 2, Burst: 3}, 0, func() time.Time { return now })
	for i := range 3 {
		assert.True(t, k.Allow("192.0.2.1"), "burst %d", i)
	}
	assert.False(t, k.Allow("192.0.2.1"), "over the burst")
	assert.True(t, k.Allow("192.0.2.2"), "another key has its own bucket")
	now = now.Add(500 * time.Millisecond)
	assert.True(t, k.Allow("192.0.2.1"), "refilled at the rate")
	assert.False(t, k.Allow("192.0.2.1"))

	unlimited := NewKeyed(Rate{}, 0, nil)
	for range 1000 {
		require.True(t, unlimited.Allow("192.0.2.1"))
	}
}

// Take says how many were refused before the key may speak again, once.
func TestTakeCountsRefusals(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	k := NewKeyed(Rate{PerSecond: 1, Burst: 1}, 0, func() time.Time { return now })
	ok, n := k.Take("node")
	require.True(t, ok)
	assert.Zero(t, n)
	for range 7 {
		ok, _ = k.Take("node")
		require.False(t, ok)
	}
	now = now.Add(time.Second)
	ok, n = k.Take("node")
	require.True(t, ok)
	assert.Equal(t, 7, n, "the refusals since the last allowed take")
	now = now.Add(time.Second)
	_, n = k.Take("node")
	assert.Zero(t, n, "reported once")
}

// A sweep of made-up keys cannot grow the table without bound.
func TestKeyedForgetsIdleKeys(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	k := NewKeyed(Rate{PerSecond: 10, Burst: 10}, 1000, func() time.Time { return now })
	for i := range 1000 {
		k.Allow(fmt.Sprintf("10.0.%d.%d", i>>8, i&255))
	}
	assert.Equal(t, 1000, k.Len())
	now = now.Add(2 * time.Second)
	k.Allow("192.0.2.1")
	assert.Equal(t, 1, k.Len(), "idle keys forgotten when the table is full")
	for i := range 2000 {
		k.Allow(fmt.Sprintf("10.1.%d.%d", i>>8, i&255))
	}
	assert.LessOrEqual(t, k.Len(), 1000, "live keys beyond the bound start the table over")
}
