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
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/bmc/vbmc"
	"github.com/anvil-metal/anvil/internal/cli"
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

// TestHelpAndUsageErrors: the virtual BMC and chassis-control answer -h,
// --help and help on stdout; an unknown flag, a stray word or a missing
// argument is a usage error (exit 2), a failed call exit 1.
func TestHelpAndUsageErrors(t *testing.T) {
	down := fmt.Sprintf("--url=http://127.0.0.1:%d/control/n1", freePort(t)) // nothing listens: the call fails fast
	tests := []struct {
		chassis bool // anvil-vbmc chassis-control
		args    []string
		code    int
		stdout  string
		stderr  string
	}{
		{args: []string{"--help"}, stdout: "usage: anvil-vbmc [--listen ADDR]"},
		{args: []string{"-h"}, stdout: "  -node value"},
		{args: []string{"-h"}, stdout: "  -fault-bmc-offline-after-update"},
		{args: []string{"-h"}, stdout: "  -fault-stall-tasks"},
		{args: []string{"help"}, stdout: "anvil-vbmc chassis-control --url URL"},
		{chassis: true, args: []string{"--help"}, stdout: "usage: anvil-vbmc chassis-control --url URL"},
		{chassis: true, args: []string{"help"}, stdout: "  -url string"},
		{chassis: true, args: []string{"-h", "0x20", "get", "power"}, stdout: "ipmi_sim's chassis-control program"},

		{args: []string{"--bogus"}, code: 2, stderr: "anvil-vbmc: flag provided but not defined: -bogus\n\nusage: anvil-vbmc"},
		{args: []string{"--node", "n1", "--bmc-restart-time", "soon"}, code: 2, stderr: `invalid value "soon" for flag -bmc-restart-time`},
		{args: []string{"--node", "n1", "n2"}, code: 2, stderr: `anvil-vbmc: unexpected argument "n2"`},
		{args: []string{"--node", "n1", "--", "-n2"}, code: 2, stderr: `"-n2" cannot be an argument: it starts with "-"`},
		{chassis: true, args: []string{"0x20", "get", "power"}, code: 2, stderr: "chassis-control: --url is required\n\nusage: anvil-vbmc chassis-control"},
		{chassis: true, args: []string{down, "0x20", "get"}, code: 2, stderr: "chassis-control: missing PARAM"},
		{chassis: true, args: []string{down, "--bogus", "0x20", "get", "power"}, code: 2, stderr: "flag provided but not defined: -bogus"},
		{chassis: true, args: []string{down, "0x20", "get", "power"}, code: 1, stderr: "chassis-control: "},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			var code int
			if tt.chassis {
				code = cli.Exit(&stdout, &stderr, "chassis-control", chassisControl(tt.args, &stdout))
			} else {
				ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second) // ends a server started by mistake
				defer cancel()
				code = cli.Exit(&stdout, &stderr, "anvil-vbmc", serve(ctx, tt.args, &stderr))
			}
			assert.Equal(t, tt.code, code, "stderr: %s", stderr.String())
			if tt.code == 0 {
				assert.Contains(t, stdout.String(), tt.stdout)
				assert.Empty(t, stderr.String())
				return
			}
			assert.Empty(t, stdout.String())
			assert.Contains(t, stderr.String(), tt.stderr)
		})
	}
}

func TestFirstNonEmpty(t *testing.T) {
	assert.Equal(t, "b", firstNonEmpty("", "b", "c"))
	assert.Equal(t, "", firstNonEmpty("", ""))
}

// TestServeQuirkFlags: --quirk-system-id-uuid moves every system to its
// UUID path (the name path is gone); --quirk-firmware-push-only takes
// SimpleUpdate away.
func TestServeQuirkFlags(t *testing.T) {
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		done <- serve(ctx, []string{"--listen", addr, "--node", "n1", "--password", "pw",
			"--quirk-system-id-uuid", "--quirk-bios-apply-time-required", "--quirk-firmware-push-only"}, &bytes.Buffer{})
	}()
	do := func(method, path string) int {
		req, _ := http.NewRequest(method, "http://"+addr+path, strings.NewReader(`{"ImageURI":"http://127.0.0.1:1/x"}`))
		req.SetBasicAuth("admin", "pw")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	get := func(path string) int { return do("GET", path) }
	require.Eventually(t, func() bool { return get("/redfish/v1/Systems") == http.StatusOK }, 5*time.Second, 20*time.Millisecond)
	assert.Equal(t, http.StatusNotFound, get("/redfish/v1/Systems/n1"))
	assert.Equal(t, http.StatusOK, get("/redfish/v1/Systems/"+vbmc.NewNode("n1", nil).UUID()+"/Bios"))
	assert.Equal(t, http.StatusNotFound, do("POST", "/redfish/v1/UpdateService/Actions/UpdateService.SimpleUpdate"))
	cancel()
	require.NoError(t, <-done)
}
