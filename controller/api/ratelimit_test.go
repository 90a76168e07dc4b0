package api

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestLimiterPerSource(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	l := newLimiter(PublicLimit{Rate: 2, Burst: 3}, func() time.Time { return now })
	for i := 0; i < 3; i++ {
		assert.True(t, l.allow("192.0.2.1"), "burst %d", i)
	}
	assert.False(t, l.allow("192.0.2.1"), "over the burst")
	assert.True(t, l.allow("192.0.2.2"), "another source has its own bucket")
	for i := 0; i < 10; i++ {
		assert.True(t, l.allow("127.0.0.1"), "loopback is exempt")
	}
	now = now.Add(500 * time.Millisecond)
	assert.True(t, l.allow("192.0.2.1"), "refilled at the rate")
	assert.False(t, l.allow("192.0.2.1"))

	unlimited := newLimiter(PublicLimit{}, time.Now)
	for i := 0; i < 1000; i++ {
		require.True(t, unlimited.allow("192.0.2.1"))
	}
}

// A flood of lookups from one stranger is cut off with 429 and counted.
func TestPublicEndpointsAreRateLimited(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.PublicLimit = PublicLimit{Rate: 1, Burst: 5} })
	codes := map[int]int{}
	for i := 0; i < 20; i++ {
		codes[strangerRequest(e, "GET", "/v1/lookup", "addresses="+mac1, nil).status]++
	}
	assert.Equal(t, 5, codes[http.StatusNotFound], "within the burst: answered (no such port)")
	assert.Equal(t, 15, codes[http.StatusTooManyRequests])
	assert.Contains(t, metricsText(e), `anvil_public_requests_limited_total{route="lookup"} 15`)
}
