// Package roundrobin is the HTTP load balancer the soak and the
// multi-controller tests put in front of several controllers: round-robin
// over the backends, the next one tried when one refuses the connection
// (it was just killed), as a load balancer's health check would.
package roundrobin

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync/atomic"
)

// Balancer forwards each request to the next backend that answers.
type Balancer struct {
	// Backends lists the backends' base URLs now; "" is one that is not
	// running.
	Backends func() []string
	Client   *http.Client
	next     atomic.Uint64
}

func (b *Balancer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	backends := b.Backends()
	start := int(b.next.Add(1))
	var lastErr error = errors.New("no backend is running")
	for i := range backends {
		target := backends[(start+i)%len(backends)]
		if target == "" {
			continue
		}
		req, err := http.NewRequestWithContext(r.Context(), r.Method, target+r.URL.RequestURI(), bytes.NewReader(body))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		req.Header = r.Header.Clone()
		res, err := b.Client.Do(req)
		if err != nil {
			lastErr = err
			continue
		}
		defer res.Body.Close()
		for k, v := range res.Header {
			w.Header()[k] = v
		}
		w.WriteHeader(res.StatusCode)
		_, _ = io.Copy(w, res.Body)
		return
	}
	http.Error(w, fmt.Sprintf("no controller answered: %v", lastErr), http.StatusBadGateway)
}
