package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func TestServeSelfSignedHTTPS(t *testing.T) {
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	ctx, cancel := context.WithCancel(context.Background())
	var logs bytes.Buffer
	done := make(chan error, 1)
	go func() {
		done <- serve(ctx, []string{"--listen", addr, "--node", "n1", "--node", "n2", "--password", "pw", "--tls-self-signed", caFile}, &logs)
	}()

	var client *http.Client
	require.Eventually(t, func() bool {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return false
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return false
		}
		client = &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}, Timeout: time.Second}
		req, _ := http.NewRequest("GET", "https://"+addr+"/redfish/v1/Systems/n2", nil)
		req.SetBasicAuth("admin", "pw")
		resp, err := client.Do(req)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, 5*time.Second, 20*time.Millisecond)

	cancel()
	require.NoError(t, <-done)
	assert.NotContains(t, logs.String(), "pw\"")
}

func TestServeNeedsNodes(t *testing.T) {
	err := serve(context.Background(), []string{"--listen", "127.0.0.1:0"}, &bytes.Buffer{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "no nodes")
}

func TestChassisControlUsage(t *testing.T) {
	assert.Equal(t, 2, chassisControl([]string{"0x20", "get", "power"}), "--url required")
	port := freePort(t) // nothing listens: the call fails fast
	assert.Equal(t, 1, chassisControl([]string{"--url", fmt.Sprintf("http://127.0.0.1:%d/control/n1", port), "0x20", "get", "power"}))
}

func TestFirstNonEmpty(t *testing.T) {
	assert.Equal(t, "b", firstNonEmpty("", "b", "c"))
	assert.Equal(t, "", firstNonEmpty("", ""))
}
