//go:build ironic

package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/internal/ironicserver"
)

// TestIronicSideBySideSmoke runs "anvil-bench ironic" small, end to end,
// against the real controller binary and Debian's stock Ironic 21.4: both
// sides must take their nodes to active, list them all through the next
// links, and be measured (CPU, memory, latencies), with the ratios and
// the table printed.
func TestIronicSideBySideSmoke(t *testing.T) {
	if err := ironicserver.Installed(); errors.Is(err, ironicserver.ErrNotInstalled) {
		t.Skip(err)
	}
	bin := filepath.Join(t.TempDir(), "anvil-controller")
	build := exec.Command("go", "build", "-o", bin, "../anvil-controller")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "build controller: %s", out)

	var buf bytes.Buffer
	err = run([]string{"ironic", "-controller", bin, "-nodes", "30", "-lifecycle", "4", "-requests", "3",
		"-clients", "2", "-delete-ironic", "10", "-timeout", "3m"}, &buf)
	require.NoError(t, err, buf.String())
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	var rep ironicReport
	require.NoError(t, json.Unmarshal([]byte(lines[len(lines)-1]), &rep), "the last line is the JSON summary")

	require.Len(t, rep.Sides, 2)
	assert.Equal(t, "anvil", rep.Sides[0].Server)
	assert.Equal(t, "ironic 21.4", rep.Sides[1].Server)
	for _, s := range rep.Sides {
		assert.Positive(t, s.IdleRSSMB, s.Server)
		assert.Positive(t, s.PeakRSSMB, s.Server)
		assert.GreaterOrEqual(t, s.RunPeakRSSMB, s.PeakRSSMB*0.9, "%s: the whole run's peak covers the lifecycle's", s.Server)
		assert.Positive(t, s.CreateSeconds, s.Server)
		assert.Positive(t, s.DeleteSeconds, s.Server)
		assert.GreaterOrEqual(t, s.PeakRSSMB, s.HWMMB*0.5, "%s: the sampled peak and VmHWM agree roughly", s.Server)
		assert.Positive(t, s.CPUSeconds, "%s: the lifecycle cost the server CPU", s.Server)
		assert.Positive(t, s.Lifecycle, s.Server)
		for _, l := range []latencies{s.List1, s.ListN} {
			assert.Positive(t, l.P50ms, s.Server)
			assert.GreaterOrEqual(t, l.P95ms, l.P50ms, s.Server)
			assert.Equal(t, 1, l.Requests, "%s: 34 nodes fit one page", s.Server)
		}
		assert.Equal(t, 2, s.ListN.Clients)
	}
	assert.Equal(t, 30, rep.Sides[0].Deleted, "anvil deletes every created node")
	assert.Equal(t, 10, rep.Sides[1].Deleted, "Ironic deletes -delete-ironic of them")
	for _, k := range []string{"list_1_p50_speedup", "list_n_p50_speedup", "lifecycle_cpu_ratio", "peak_rss_fraction", "idle_rss_fraction",
		"create_speedup", "delete_speedup"} {
		assert.Positive(t, rep.Ratios[k], k)
	}
	assert.Len(t, rep.Targets, 6)
	assert.Contains(t, buf.String(), "GET /v1/nodes/detail (all pages), 1 client p50", "the table is printed too")
}
