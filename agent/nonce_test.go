package agent

import (
	"context"
	"io"
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

// TestHeartbeatNeverCarriesANUL: a disk serial or firmware string with a
// NUL in it (odd hardware) goes out as U+FFFD, so the controller's bound
// on stored JSON (protocol.CheckJSON) never refuses the heartbeat.
func TestHeartbeatNeverCarriesANUL(t *testing.T) {
	bodies := make(chan []byte, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		bodies <- b
		_, _ = w.Write([]byte(`{"heartbeat_interval": 1}`))
	}))
	defer srv.Close()
	c, err := NewClient(ClientConfig{API: srv.URL, Version: "test"})
	require.NoError(t, err)
	hb := &protocol.Heartbeat{AgentToken: "t", AgentVersion: "v", BootID: "b", Command: &protocol.CommandStatus{
		ID: "c", Name: "inventory", State: protocol.CommandSucceeded, Result: []byte(`{"serial":"ZC1\u0000\u0000"}`), Summary: "sda \x00"}}
	_, err = c.Heartbeat(context.Background(), "node", hb)
	require.NoError(t, err)
	body := <-bodies
	require.NoError(t, protocol.CheckJSON(body), "%s", body)
	assert.Contains(t, string(body), `"serial":"ZC1\ufffd\ufffd"`)
	assert.Contains(t, string(body), `"summary":"sda \ufffd"`)
}
