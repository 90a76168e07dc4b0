package controller

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/bcrypt"

	"github.com/anvil-metal/anvil/controller/conductor"
)

// freeAddr is a loopback address nobody listens on (a moment ago).
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return addr
}

func getStatus(t *testing.T, url string) int {
	t.Helper()
	res, err := http.Get(url)
	require.NoError(t, err)
	defer res.Body.Close()
	_, _ = io.Copy(io.Discard, res.Body)
	return res.StatusCode
}

// TestMetricsListen: under http_basic, the daemon's /metrics needs
// credentials; --metrics-listen moves it, without auth, to an address of
// its own; --metrics-public and --metrics-listen together are refused.
func TestMetricsListen(t *testing.T) {
	hash, err := bcrypt.GenerateFromPassword([]byte("pw"), bcrypt.MinCost)
	require.NoError(t, err)
	htpasswd := filepath.Join(t.TempDir(), "htpasswd")
	require.NoError(t, os.WriteFile(htpasswd, []byte("admin:"+string(hash)+"\n"), 0o600))
	base := Config{Database: "sqlite://:memory:", Auth: "http_basic", HTPasswd: htpasswd,
		Logger: slog.New(slog.DiscardHandler), Conductor: conductor.Config{Host: "t", CheckInterval: time.Hour}}

	start := func(cfg Config) string {
		ctx, cancel := context.WithCancel(t.Context())
		addr := make(chan string, 1)
		cfg.Listen = "127.0.0.1:0"
		cfg.Ready = func(a net.Addr) { addr <- a.String() }
		done := make(chan error, 1)
		go func() { done <- Run(ctx, cfg) }()
		t.Cleanup(func() { cancel(); <-done })
		select {
		case a := <-addr:
			return "http://" + a
		case err := <-done:
			t.Fatalf("controller did not start: %v", err)
		}
		return ""
	}

	api := start(base)
	assert.Equal(t, http.StatusUnauthorized, getStatus(t, api+"/metrics"), "metrics need the API's credentials by default")

	sep := base
	sep.MetricsListen = freeAddr(t)
	api = start(sep)
	assert.Equal(t, http.StatusNotFound, getStatus(t, api+"/metrics"), "not on the API")
	assert.Equal(t, http.StatusOK, getStatus(t, "http://"+sep.MetricsListen+"/metrics"), "on their own address, without auth")
	assert.Equal(t, http.StatusNotFound, getStatus(t, "http://"+sep.MetricsListen+"/v1/nodes"), "only metrics there")

	pub := base
	pub.MetricsPublic = true
	api = start(pub)
	assert.Equal(t, http.StatusOK, getStatus(t, api+"/metrics"))

	both := sep
	both.MetricsPublic = true
	both.Listen = "127.0.0.1:0"
	assert.ErrorContains(t, Run(t.Context(), both), "exclude each other")
}
