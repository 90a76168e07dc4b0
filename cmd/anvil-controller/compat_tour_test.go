//go:build compat

package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/internal/docscheck"
)

// TestCompatReadmeTour runs the README's five-minute tour as written, line
// by line in one shell, so the tour cannot drift from what works. It runs in
// a network namespace of its own, where the tour's fixed port (6385) is
// free and nothing it starts can reach beyond loopback. The one addition is
// a wait after the line that starts the controller in the background,
// which a reader does by eye.
func TestCompatReadmeTour(t *testing.T) {
	if _, err := exec.LookPath("baremetal"); err != nil {
		t.Fatalf("the baremetal CLI is required (apt-get install python3-ironicclient python3-openstackclient): %v", err)
	}
	root, err := filepath.Abs("../..")
	require.NoError(t, err)
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	require.NoError(t, err)
	block := tourBlock(t, string(readme))

	endpoint := regexp.MustCompile(`OS_ENDPOINT=http://([0-9.]+):([0-9]+)`).FindStringSubmatch(block)
	require.NotNil(t, endpoint, "the tour sets OS_ENDPOINT to a loopback address")
	wait := "for i in $(seq 300); do (exec 3<>/dev/tcp/" + endpoint[1] + "/" + endpoint[2] + ") 2>/dev/null && break; sleep 0.1; done"

	var script strings.Builder
	script.WriteString("set -euo pipefail\nip link set lo up\ntrap 'kill $(jobs -p) 2>/dev/null || true; wait' EXIT\n")
	started := false
	for _, line := range strings.Split(block, "\n") {
		script.WriteString(line + "\n")
		if t := strings.TrimSpace(line); strings.HasSuffix(t, "&") && !strings.HasSuffix(t, "&&") {
			script.WriteString(wait + "\n")
			started = true
		}
	}
	require.True(t, started, "the tour starts the controller in the background")

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "unshare", "--net", "bash", "-c", script.String())
	cmd.Dir = root
	// The CLI caches versions under $HOME, so HOME is the test's; Go's
	// caches stay where they are (the namespace has no module proxy).
	goEnv, err := exec.Command("go", "env", "GOMODCACHE", "GOCACHE", "GOPATH").Output()
	require.NoError(t, err)
	vals := strings.Split(strings.TrimSpace(string(goEnv)), "\n")
	require.Len(t, vals, 3)
	cmd.Env = append(os.Environ(), "HOME="+t.TempDir(), "GOMODCACHE="+vals[0], "GOCACHE="+vals[1], "GOPATH="+vals[2], "GOFLAGS=-mod=mod", "GOPROXY=off")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "the tour failed:\n%s", out)
	// The last command lists the nodes: the tour's node ends deployed.
	assert.Regexp(t, `\| node-1 \|.*\| power on +\| active +\|`, string(out))
}

// tourBlock is the shell block under the README's "A five-minute tour".
func tourBlock(t *testing.T, readme string) string {
	t.Helper()
	at := strings.Index(readme, "\n## A five-minute tour")
	require.GreaterOrEqual(t, at, 0, "README.md has the tour")
	headingLine := strings.Count(readme[:at+1], "\n") + 1
	for _, b := range docscheck.Blocks(readme) {
		if b.Line > headingLine && b.Shell() {
			require.False(t, b.Marked, "the tour is run by this test; it carries no marker")
			return b.Text
		}
	}
	t.Fatal("no shell block under the tour's heading")
	return ""
}
