package main

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestBootFlagErrors: the --boot-* flags reach the boot service, and a
// wrong setting stops the controller at start with a message naming it.
func TestBootFlagErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--boot-dhcp", "sometimes"}, `--boot-dhcp "sometimes": use off, proxy or full`},
		{[]string{"--boot-dhcp", "proxy"}, "--boot-dhcp needs --boot-interface NAME"},
		{[]string{"--boot-dhcp", "proxy", "--boot-interface", "nosuch0"}, "--boot-interface nosuch0"},
		{[]string{"--boot-dhcp-range", "10.0.0.1-10.0.0.9"}, "need --boot-dhcp proxy or full"},
		{[]string{"--boot-tftp-listen", "127.0.0.1:0"}, "needs --boot-dir"},
		{[]string{"--boot-discovery-dhcp-share", "0"}, "--boot-discovery-dhcp-share 0: give a percentage"},
		{[]string{"--boot-discovery-dhcp-share", "100.5"}, "--boot-discovery-dhcp-share 100.5: give a percentage"},
		{[]string{"--boot-discovery-dhcp-share", "NaN"}, "--boot-discovery-dhcp-share NaN"},
		{[]string{"--boot-discovery-dhcp-lease", "0s"}, "--boot-discovery-dhcp-lease 0s: give a duration above 0 and below the 1h0m0s lease"},
		{[]string{"--boot-discovery-dhcp-lease", "1h"}, "--boot-discovery-dhcp-lease 1h0m0s"},
		// Good values pass on to the next check.
		{[]string{"--boot-discovery-dhcp-share", "50", "--boot-discovery-dhcp-lease", "10m", "--boot-dhcp", "proxy"}, "--boot-dhcp needs --boot-interface NAME"},
	} {
		args := append([]string{"--listen", "127.0.0.1:0", "--database", "sqlite://:memory:"}, tc.args...)
		err := run(t.Context(), args, func(string) string { return "" })
		require.Error(t, err, "%v", tc.args)
		assert.Contains(t, err.Error(), tc.want)
	}
}

// TestBootTFTPAlone runs the controller with only --boot-tftp-listen on
// loopback and fetches a boot file with Debian's tftp-hpa client.
func TestBootTFTPAlone(t *testing.T) {
	if _, err := exec.LookPath("tftp"); err != nil {
		t.Skip("tftp (Debian package tftp-hpa) not installed")
	}
	dir := t.TempDir()
	ipxe := bytes.Repeat([]byte("iPXE"), 20_000)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "undionly.kpxe"), ipxe, 0o644))
	// A free UDP port (released just before the controller takes it).
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	require.NoError(t, err)
	port := c.LocalAddr().(*net.UDPAddr).Port
	c.Close()
	p := startController(t, "--database", "sqlite://:memory:", "--boot-dir", dir, "--boot-tftp-listen", fmt.Sprintf("127.0.0.1:%d", port),
		"--metrics-public")
	out := filepath.Join(t.TempDir(), "got")
	msg, err := exec.Command("tftp", "-m", "binary", "127.0.0.1", fmt.Sprint(port), "-c", "get", "undionly.kpxe", out).CombinedOutput()
	require.NoError(t, err, string(msg))
	got, err := os.ReadFile(out)
	require.NoError(t, err)
	assert.True(t, bytes.Equal(ipxe, got), "content differs")

	// A FIFO in the boot directory is refused at once, and the refusal
	// reaches the controller's metrics.
	require.NoError(t, syscall.Mkfifo(filepath.Join(dir, "fifo.efi"), 0o644))
	msg, _ = exec.Command("tftp", "-m", "binary", "127.0.0.1", fmt.Sprint(port), "-c", "get", "fifo.efi", filepath.Join(t.TempDir(), "x")).CombinedOutput()
	assert.Contains(t, string(msg), "not found")
	// The server counts the refusal after it answered: under load the
	// client may read the metrics first, so they are read until it shows.
	var metrics string
	assert.Eventually(t, func() bool {
		res, err := http.Get(p.URL + "/metrics")
		if err != nil {
			return false
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		metrics = string(b)
		return strings.Contains(metrics, `anvil_boot_requests_dropped_total{reason="not_regular",service="tftp"} 1`)
	}, 5*time.Second, 20*time.Millisecond, "metrics: %s", metrics)
}
