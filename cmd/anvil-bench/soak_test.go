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

	"github.com/anvil-metal/anvil/controller/store/postgres/pgserver"
)

// TestSoakShort is CI's soak: 50 simulated machines through their
// lifecycles for half a minute, and as long as they need to come to rest
// (under a minute in all unless the machine is very loaded), while the controller is SIGKILLed and
// restarted (SQLite), or one of two controllers is (PostgreSQL); every
// invariant must hold at the end.
func TestSoakShort(t *testing.T) {
	if testing.Short() {
		t.Skip("a minute of lifecycles with controllers killed")
	}
	bin := filepath.Join(t.TempDir(), "anvil-controller")
	build := exec.Command("go", "build", "-o", bin, "../anvil-controller")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "build controller: %s", out)

	for _, tc := range []struct{ db, controllers string }{{"sqlite", "1"}, {"postgres", "2"}} {
		t.Run(tc.db, func(t *testing.T) {
			t.Parallel()
			var out bytes.Buffer
			err := run([]string{"soak", "-controller", bin, "-database", tc.db, "-controllers", tc.controllers, "-nodes", "50",
				"-duration", "30s", "-kill-every", "7s", "-settle", "60s", "-step-timeout", "10s", "-lease-ttl", "3s", "-timeout", "3m"}, &out)
			if errors.Is(err, pgserver.ErrNotInstalled) {
				t.Skipf("%v; install the postgresql package", err)
			}
			t.Log(out.String())
			require.NoError(t, err)
			lines := strings.Split(strings.TrimSpace(out.String()), "\n")
			var rep soakReport
			require.NoError(t, json.Unmarshal([]byte(lines[len(lines)-1]), &rep), "the last line is the JSON report")
			assert.Empty(t, rep.Violations)
			assert.Positive(t, rep.Kills, "controllers were killed")
			assert.Positive(t, rep.Actions, "lifecycle verbs were done")
			assert.Len(t, rep.Checked, 5, "every invariant was checked")
		})
	}
}

func TestSoakFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		err  string
	}{
		{[]string{"-database", "sqlite", "-controllers", "2"}, "SQLite is one controller's database"},
		{[]string{"-database", "mysql"}, `-database "mysql"`},
		{[]string{"-nodes", "0"}, "-nodes >= 1"},
		{[]string{"-duration", "0s"}, "must be positive"},
		{[]string{"-database", "postgres", "-controllers", "2", "-seed", "7"}, ""},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			cfg, err := parseSoak(tc.args)
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, uint64(7), cfg.seed)
		})
	}
}

// TestTransitionLines: the soak reads a node's last state from the
// history lines of the engine's transitions and of the API's verbs.
func TestTransitionLines(t *testing.T) {
	for line, to := range map[string]string{
		"clean wait -> clean failed (fail)":             "clean failed",
		"clean failed -> manageable (manage requested)": "manageable",
		"cleaning -> clean wait (wait)":                 "clean wait",
		"step deploy.erase_devices finished":            "",
	} {
		m := transitionRe.FindStringSubmatch(line)
		if to == "" {
			assert.Nil(t, m, line)
			continue
		}
		require.NotNil(t, m, line)
		assert.Equal(t, to, m[2], line)
	}
}
