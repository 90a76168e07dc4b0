package conductor

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/controller/state"
	"github.com/anvil-metal/anvil/controller/store"
	"github.com/anvil-metal/anvil/protocol"
)

// TestStepResultsOfEveryRun: an out-of-band step that finishes at once,
// one that waits and is completed later, and one that fails each leave a
// result with its outcome, error and times, newest first.
func TestStepResultsOfEveryRun(t *testing.T) {
	drv := &scriptDriver{steps: append(twoSteps(true), protocol.Step{Interface: "bios", Step: "y", Priority: 50}),
		outcome: map[string]string{"deploy.erase_devices_metadata": "wait", "deploy.erase_devices": "fail"}}
	e := start(t, drv, Config{}, nil)
	ctx := context.Background()
	id := e.manageable(t)
	require.NoError(t, e.c.Provision(ctx, id, ProvisionRequest{Target: "provide"}))
	e.wait(t, id, state.CleanWait)
	require.NoError(t, e.c.CompleteAsyncStep(ctx, id, "deploy.erase_devices_metadata", nil))
	e.wait(t, id, state.CleanFailed)

	rs, err := e.st.ListStepResults(ctx, store.ResultPage{NodeUUID: id})
	require.NoError(t, err)
	require.Len(t, rs, 3)
	assert.Equal(t, "deploy.erase_devices", rs[0].Step)
	assert.Equal(t, store.OutcomeFailed, rs[0].Outcome)
	assert.Equal(t, "disk on fire", rs[0].Error)
	assert.Equal(t, "bios.y", rs[1].Step)
	assert.Equal(t, store.OutcomeSucceeded, rs[1].Outcome)
	assert.Equal(t, "deploy.erase_devices_metadata", rs[2].Step)
	assert.Equal(t, store.OutcomeSucceeded, rs[2].Outcome)
	for _, r := range rs {
		assert.Equal(t, "clean", r.Kind)
		assert.Equal(t, id, r.NodeUUID)
		assert.False(t, r.StartedAt.IsZero())
		assert.False(t, r.FinishedAt.Before(r.StartedAt), "%s: finished %s before it started %s", r.Step, r.FinishedAt, r.StartedAt)
	}
	assert.False(t, rs[2].FinishedAt.After(rs[1].StartedAt), "runs are in order")

	// A completion repeated (a retried report) stores nothing new.
	err = e.c.CompleteAsyncStep(ctx, id, "deploy.erase_devices", nil)
	require.Error(t, err)
	again, err := e.st.ListStepResults(ctx, store.ResultPage{NodeUUID: id})
	require.NoError(t, err)
	assert.Len(t, again, 3)
}

// TestStepTimeoutLeavesAResult: a step that never reports ends with a
// "timed out" result.
func TestStepTimeoutLeavesAResult(t *testing.T) {
	drv := &scriptDriver{steps: twoSteps(true), outcome: map[string]string{"deploy.erase_devices_metadata": "wait"}}
	e := start(t, drv, Config{CleanWaitTimeout: 1, CheckInterval: 5e6}, nil)
	ctx := context.Background()
	id := e.manageable(t)
	require.NoError(t, e.c.Provision(ctx, id, ProvisionRequest{Target: "provide"}))
	e.wait(t, id, state.CleanFailed)
	// The write that fails the node stores the result (timeouts.go): a
	// failed node is never seen without it.
	rs, err := e.st.ListStepResults(ctx, store.ResultPage{NodeUUID: id})
	require.NoError(t, err)
	require.Len(t, rs, 1)
	assert.Equal(t, "deploy.erase_devices_metadata", rs[0].Step)
	assert.Equal(t, store.OutcomeTimedOut, rs[0].Outcome)
	assert.Contains(t, rs[0].Error, "Timeout reached while cleaning")
}
