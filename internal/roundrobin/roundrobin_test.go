package roundrobin

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Requests go round the backends; a stopped one (refusing connections)
// and a missing one ("") are skipped; none answering is a 502.
func TestBalancerSkipsDeadBackends(t *testing.T) {
	serve := func(name string) *httptest.Server {
		return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			b, _ := io.ReadAll(r.Body)
			w.Header().Set("X-Backend", name)
			_, _ = w.Write(append([]byte(name+":"), b...))
		}))
	}
	a, dead := serve("a"), serve("dead")
	defer a.Close()
	dead.Close()
	backends := []string{a.URL, dead.URL, ""}
	front := httptest.NewServer(&Balancer{Backends: func() []string { return backends }, Client: http.DefaultClient})
	defer front.Close()
	for range 4 {
		res, err := http.Post(front.URL+"/x", "text/plain", strings.NewReader("body"))
		require.NoError(t, err)
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		assert.Equal(t, 200, res.StatusCode)
		assert.Equal(t, "a:body", string(b), "the body reaches the live backend")
		assert.Equal(t, "a", res.Header.Get("X-Backend"))
	}
	backends = []string{dead.URL}
	res, err := http.Get(front.URL + "/x")
	require.NoError(t, err)
	res.Body.Close()
	assert.Equal(t, http.StatusBadGateway, res.StatusCode)
}
