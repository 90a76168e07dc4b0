package api

import (
	"context"
	"io"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/controller/store/sqlite"
)

// A deploy's boot and steps parts reach Prometheus by the path its agent
// took (the conductor's DeployTimed).
func TestDeployDurationMetric(t *testing.T) {
	st, err := sqlite.Open(context.Background(), ":memory:")
	require.NoError(t, err)
	t.Cleanup(func() { st.Close() })
	m := NewMetrics(st)
	m.DeployTimed("fast track", 0, 41*time.Second)
	m.DeployTimed("full boot", 95*time.Second, 40*time.Second)
	srv := httptest.NewServer(m.Handler())
	t.Cleanup(srv.Close)
	res, err := srv.Client().Get(srv.URL)
	require.NoError(t, err)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	body := string(b)
	for _, want := range []string{
		`anvil_deploy_duration_seconds_count{part="boot",path="fast track"} 1`,
		`anvil_deploy_duration_seconds_sum{part="boot",path="fast track"} 0`,
		`anvil_deploy_duration_seconds_sum{part="steps",path="fast track"} 41`,
		`anvil_deploy_duration_seconds_sum{part="boot",path="full boot"} 95`,
		`anvil_deploy_duration_seconds_sum{part="steps",path="full boot"} 40`,
	} {
		assert.Contains(t, body, want)
	}
}
