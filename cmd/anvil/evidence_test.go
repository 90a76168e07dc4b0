package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/controller/api"
	"github.com/anvil-metal/anvil/controller/conductor"
	"github.com/anvil-metal/anvil/controller/store"
	"github.com/anvil-metal/anvil/controller/store/sqlite"
)

func TestLastEvidence(t *testing.T) {
	rs := []stepResult{
		{Step: "deploy.burnin_disk", Outcome: "failed", Error: "burn-in of /dev/sdb failed:\n I/O error", FinishedAt: "t5"},
		{Step: "deploy.verify_hardware", Outcome: "succeeded", Summary: "hardware verified", FinishedAt: "t4"},
		{Step: "deploy.erase_devices", Outcome: "succeeded", FinishedAt: "t3"},
		{Step: "deploy.burnin_disk", Outcome: "succeeded", FinishedAt: "t2"},
		{Step: "deploy.verify_hardware", Outcome: "failed", FinishedAt: "t1"},
		{Step: "deploy.burnin_cpu", Outcome: "succeeded", Summary: "cpu burn-in passed", FinishedAt: "t0"},
		{Step: "deploy.burnin_memory", Outcome: "failed", Summary: "memory burn-in FAILED", Error: "pattern mismatch at DIMM A1", FinishedAt: "t-1"},
	}
	v, b := lastEvidence(rs)
	assert.Equal(t, []string{
		"LAST VERIFICATION: deploy.verify_hardware succeeded at t4: hardware verified",
		"LAST BURN-IN: deploy.burnin_disk failed at t5: burn-in of /dev/sdb failed: I/O error",
		"LAST BURN-IN: deploy.burnin_cpu succeeded at t0: cpu burn-in passed",
		"LAST BURN-IN: deploy.burnin_memory failed at t-1: memory burn-in FAILED: pattern mismatch at DIMM A1",
	}, evidenceLines(v, b))
	v, b = lastEvidence(rs[2:3])
	assert.Equal(t, []string{"LAST VERIFICATION: none", "LAST BURN-IN: none"}, evidenceLines(v, b))
}

// anvil node show reads the evidence from the real API, paging past runs
// of other steps.
func TestShowEvidence(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st, err := sqlite.Open(ctx, ":memory:")
	require.NoError(t, err)
	defer st.Close()
	cond := conductor.New(st, conductor.Config{Host: "cli", CheckInterval: time.Hour}, conductor.FakeDriver{})
	srv := httptest.NewServer(api.New(api.Config{Store: st, Conductor: cond}))
	defer srv.Close()
	c := newClient(srv.URL)
	var created map[string]any
	require.NoError(t, c.Do(ctx, "POST", "/v1/nodes", map[string]any{"driver": "fake-hardware", "name": "ev"}, &created))
	node := created["uuid"].(string)

	var out bytes.Buffer
	require.NoError(t, show(ctx, c, "ev", &out))
	assert.Contains(t, out.String(), "LAST VERIFICATION: none\nLAST BURN-IN: none\n")

	base := time.Date(2026, 11, 20, 10, 0, 0, 0, time.UTC)
	put := func(i int, step, outcome, summary string) {
		r := &store.StepResult{UUID: uuid.NewString(), NodeUUID: node, Kind: "clean", Step: step, Outcome: outcome, Summary: summary,
			StartedAt: base.Add(time.Duration(i) * time.Minute), FinishedAt: base.Add(time.Duration(i)*time.Minute + 30*time.Second),
			Result: json.RawMessage(`{}`)}
		require.NoError(t, st.PutStepResult(ctx, r))
	}
	put(0, "deploy.burnin_memory", "succeeded", "memory burn-in passed")
	put(1, "deploy.verify_hardware", "failed", "hardware verification FAILED: 1 differences failed, 0 accepted; health: 0 failed, 0 warnings")
	for i := range 60 { // more than a page of other steps since
		put(2+i, "deploy.erase_devices_metadata", "succeeded", fmt.Sprint("wiped ", i))
	}
	out.Reset()
	require.NoError(t, show(ctx, c, "ev", &out))
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	assert.Equal(t, []string{
		"LAST VERIFICATION: deploy.verify_hardware failed at 2026-11-20T10:01:30.000000+00:00: hardware verification FAILED: 1 differences failed, 0 accepted; health: 0 failed, 0 warnings",
		"LAST BURN-IN: deploy.burnin_memory succeeded at 2026-11-20T10:00:30.000000+00:00: memory burn-in passed",
	}, lines[len(lines)-2:])
}
