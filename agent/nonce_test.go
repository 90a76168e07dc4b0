package agent

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/protocol"
)

// TestLookupCarriesTheBootNonce: anvil.token= from the kernel command line
// goes out with every lookup, next to the boot id.
func TestLookupCarriesTheBootNonce(t *testing.T) {
	queries := make(chan url.Values, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		queries <- r.URL.Query()
		http.Error(w, `{"error_message": "{\"faultstring\": \"not yet\"}"}`, http.StatusNotFound)
	}))
	defer srv.Close()
	c, err := NewClient(ClientConfig{API: srv.URL, Version: "test", Nonce: "n0nce"})
	require.NoError(t, err)
	_, err = c.Lookup(context.Background(), []string{"52:54:00:00:00:01"}, "boot-1")
	require.ErrorIs(t, err, ErrNotFound)
	q := <-queries
	assert.Equal(t, "n0nce", q.Get(protocol.LookupNonce))
	assert.Equal(t, "boot-1", q.Get(protocol.LookupBootID))
}
