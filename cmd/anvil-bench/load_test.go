package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/controller/store/postgres/pgserver"
)

// TestLoadSmoke runs the load mode small against the real controller
// binary: it must complete with nodes cleaned, API reads answered and no
// heartbeat dropped, on SQLite and on PostgreSQL.
func TestLoadSmoke(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "anvil-controller")
	build := exec.Command("go", "build", "-o", bin, "../anvil-controller")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "build controller: %s", out)

	for _, db := range []string{"sqlite", "postgres"} {
		t.Run(db, func(t *testing.T) {
			t.Parallel()
			var out bytes.Buffer
			err := run([]string{"load", "-controller", bin, "-database", db, "-nodes", "200", "-cleaning", "20",
				"-duration", "8s", "-heartbeat-interval", "200ms", "-step-heartbeats", "2", "-timeout", "2m"}, &out)
			if errors.Is(err, pgserver.ErrNotInstalled) {
				t.Skipf("%v; install the postgresql package", err)
			}
			require.NoError(t, err, out.String())
			lines := strings.Split(strings.TrimSpace(out.String()), "\n")
			var res loadResult
			require.NoError(t, json.Unmarshal([]byte(lines[len(lines)-1]), &res), "the last line is the JSON summary")

			assert.Equal(t, db, res.Database)
			assert.Positive(t, res.Cleaned, "nodes went through cleaning to available")
			assert.Zero(t, res.CleanFailed)
			assert.Positive(t, res.Heartbeats.OK)
			assert.Zero(t, res.Heartbeats.Failed, "dropped heartbeats: %v", res.Heartbeats.Reasons)
			assert.True(t, res.Targets["no_heartbeat_dropped"])
			for _, kind := range []string{"list", "detail", "show", "provide"} {
				assert.Positive(t, res.API[kind].OK, kind)
				assert.Zero(t, res.API[kind].Failed, "%s: %v", kind, res.API[kind].Reasons)
			}
			require.NotEmpty(t, res.Processes)
			assert.Equal(t, "controller-0", res.Processes[0].Name)
			assert.Positive(t, res.Processes[0].RSSPeakMB)
			assert.Positive(t, res.Processes[0].CPUSeconds)
			if db == "postgres" {
				require.Len(t, res.Processes, 3)
				assert.Equal(t, "postgres (all)", res.Processes[1].Name)
				assert.Positive(t, res.Processes[1].RSSPeakMB, "the server's processes were found in /proc")
			}
			assert.Contains(t, out.String(), "heartbeat latency p50 / p99", "the table is printed too")
		})
	}
}

func TestLoadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		err  string
	}{
		{[]string{"-database", "sqlite", "-controllers", "2"}, "SQLite is one controller's database"},
		{[]string{"-database", "mysql"}, `-database "mysql"`},
		{[]string{"-nodes", "10", "-cleaning", "11"}, "-cleaning <= -nodes"},
		{[]string{"-heartbeat-interval", "0s"}, "must be positive"},
		{[]string{"-database", "postgres", "-controllers", "2", "-lease-ttl", "30s"}, ""},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			cfg, err := parseLoad(tc.args)
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, 2, cfg.controllers)
		})
	}
}

// TestBalancerRoundRobin: requests to the balancer's URL alternate over
// the controllers, as behind an HTTP load balancer.
func TestBalancerRoundRobin(t *testing.T) {
	var urls []string
	for _, name := range []string{"a", "b"} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.WriteString(w, name+r.URL.Path)
		}))
		t.Cleanup(srv.Close)
		urls = append(urls, srv.URL)
	}
	hc := &http.Client{Transport: newBalancer(urls, 2)}
	var got []string
	for range 4 {
		res, err := hc.Get(lbURL + "/x")
		require.NoError(t, err)
		b, err := io.ReadAll(res.Body)
		res.Body.Close()
		require.NoError(t, err)
		got = append(got, string(b))
	}
	assert.ElementsMatch(t, []string{"a/x", "b/x", "a/x", "b/x"}, got)
	assert.NotEqual(t, got[0], got[1], "consecutive requests go to different controllers")
}

func TestIsPostgresOn(t *testing.T) {
	tests := []struct {
		args []string
		want bool
	}{
		{[]string{"/usr/lib/postgresql/17/bin/postgres", "-D", "/tmp/pg", "-p", "5433"}, true},
		{[]string{"postgres", "-p", "5433", "-k", "/tmp"}, true},
		{[]string{"postgres", "-p", "5432"}, false},
		{[]string{"postgres: walwriter"}, false},
		{[]string{"/usr/bin/not-postgres", "-p", "5433"}, false},
		{[]string{"postgres", "-p"}, false},
		{nil, false},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, isPostgresOn(tt.args, 5433), "%q", tt.args)
	}
}
