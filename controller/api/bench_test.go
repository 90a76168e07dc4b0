package api

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/controller/conductor"
	"github.com/anvil-metal/anvil/controller/store/sqlite"
)

// benchServer is an API over a file-backed store (as the controller
// runs) with n nodes like anvil-bench's fleet (see fixtureNode).
func benchServer(b *testing.B, n int) *httptest.Server {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, b.TempDir()+"/anvil.db")
	require.NoError(b, err)
	b.Cleanup(func() { st.Close() })
	createFixtureNodes(b, st, n)
	cond := conductor.New(st, conductor.Config{Host: "bench"}, conductor.FakeDriver{})
	srv := httptest.NewServer(New(Config{Store: st, Conductor: cond}))
	b.Cleanup(srv.Close)
	return srv
}

func benchGet(b *testing.B, srv *httptest.Server, path string) {
	req, err := http.NewRequest("GET", srv.URL+path, nil)
	require.NoError(b, err)
	req.Header.Set(versionHeader, latest)
	cpu0 := processCPU()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		res, err := srv.Client().Do(req)
		require.NoError(b, err)
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		require.Equal(b, 200, res.StatusCode)
	}
	b.StopTimer()
	// CPU per request (server, client and GC together): on a machine
	// shared with other work, wall time says more about the neighbours.
	b.ReportMetric(float64((processCPU()-cpu0).Microseconds())/1000/float64(b.N), "cpu-ms/op")
}

// processCPU is this process's user and system time so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func BenchmarkListNodes1000(b *testing.B) { benchGet(b, benchServer(b, 1000), "/v1/nodes") }
func BenchmarkListNodesDetail1000(b *testing.B) {
	benchGet(b, benchServer(b, 1000), "/v1/nodes/detail")
}
func BenchmarkGetNode(b *testing.B) { benchGet(b, benchServer(b, 10), "/v1/nodes/n-00005") }
