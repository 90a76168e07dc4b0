package api

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
)

// benchCreateBody is anvil-bench ironic's enrolment body: what a create
// costs there is what these benchmarks measure.
func benchCreateBody(i int64) []byte {
	return fmt.Appendf(nil, `{"driver":"fake-hardware","name":"b-%07d","deploy_interface":"fake",`+
		`"properties":{"cpus":32,"memory_mb":262144,"local_gb":960,"cpu_arch":"x86_64"},`+
		`"driver_info":{"ipmi_address":"127.0.0.1","ipmi_username":"admin","ipmi_password":"x"}}`, i)
}

func benchDo(b *testing.B, srv *httptest.Server, method, path string, body []byte, want int) {
	req, err := http.NewRequest(method, srv.URL+path, bytes.NewReader(body))
	require.NoError(b, err)
	req.Header.Set(versionHeader, "1.81")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := srv.Client().Do(req)
	require.NoError(b, err)
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	require.Equal(b, want, res.StatusCode)
}

// BenchmarkCreateNode is POST /v1/nodes over real HTTP into a file-backed
// SQLite store, serially and from 8 clients (anvil-bench's enrolment).
func BenchmarkCreateNode(b *testing.B) {
	for _, clients := range []int{1, 8} {
		b.Run(fmt.Sprintf("clients=%d", clients), func(b *testing.B) {
			srv := benchServer(b, 0)
			var seq atomic.Int64
			b.SetParallelism(clients)
			b.ReportAllocs()
			cpu0 := processCPU()
			b.ResetTimer()
			if clients == 1 {
				for i := 0; i < b.N; i++ {
					benchDo(b, srv, http.MethodPost, "/v1/nodes", benchCreateBody(seq.Add(1)), http.StatusCreated)
				}
			} else {
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						benchDo(b, srv, http.MethodPost, "/v1/nodes", benchCreateBody(seq.Add(1)), http.StatusCreated)
					}
				})
			}
			b.StopTimer()
			b.ReportMetric(float64((processCPU()-cpu0).Microseconds())/1000/float64(b.N), "cpu-ms/op")
		})
	}
}

// BenchmarkDeleteNode is DELETE /v1/nodes/{name} of enrolled nodes with
// two ports each (the fixture's), serially.
func BenchmarkDeleteNode(b *testing.B) {
	srv := benchServer(b, 0)
	names := make([]string, b.N)
	for i := range names {
		benchDo(b, srv, http.MethodPost, "/v1/nodes", benchCreateBody(int64(i)), http.StatusCreated)
		names[i] = fmt.Sprintf("b-%07d", i)
	}
	b.ReportAllocs()
	cpu0 := processCPU()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		benchDo(b, srv, http.MethodDelete, "/v1/nodes/"+names[i], nil, http.StatusNoContent)
	}
	b.StopTimer()
	b.ReportMetric(float64((processCPU()-cpu0).Microseconds())/1000/float64(b.N), "cpu-ms/op")
}
