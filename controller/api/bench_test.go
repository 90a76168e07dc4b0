package api

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/controller/conductor"
	"github.com/anvil-metal/anvil/controller/store"
	"github.com/anvil-metal/anvil/controller/store/sqlite"
)

// benchServer is an API over a file-backed store with n nodes.
func benchServer(b *testing.B, n int) *httptest.Server {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, b.TempDir()+"/anvil.db")
	require.NoError(b, err)
	b.Cleanup(func() { st.Close() })
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("node-%05d", i)
		node := &store.Node{UUID: uuid.NewString(), Name: &name, Driver: "fake-hardware", ProvisionState: "available",
			CreatedAt: time.Now(), Properties: map[string]any{"cpus": 32, "memory_mb": 262144, "local_gb": 960, "cpu_arch": "x86_64"},
			DriverInfo: map[string]any{"ipmi_address": "127.0.0.1", "ipmi_username": "admin", "ipmi_password": "x"}}
		require.NoError(b, st.CreateNode(ctx, node))
	}
	cond := conductor.New(st, conductor.Config{Host: "bench"}, conductor.FakeDriver{})
	srv := httptest.NewServer(New(Config{Store: st, Conductor: cond}))
	b.Cleanup(srv.Close)
	return srv
}

func benchGet(b *testing.B, srv *httptest.Server, path string) {
	req, err := http.NewRequest("GET", srv.URL+path, nil)
	require.NoError(b, err)
	req.Header.Set(versionHeader, latest)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		res, err := srv.Client().Do(req)
		require.NoError(b, err)
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		require.Equal(b, 200, res.StatusCode)
	}
}

func BenchmarkListNodes1000(b *testing.B) { benchGet(b, benchServer(b, 1000), "/v1/nodes") }
func BenchmarkListNodesDetail1000(b *testing.B) {
	benchGet(b, benchServer(b, 1000), "/v1/nodes/detail")
}
func BenchmarkGetNode(b *testing.B) { benchGet(b, benchServer(b, 10), "/v1/nodes/node-00005") }
