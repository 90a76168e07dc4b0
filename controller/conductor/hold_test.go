package conductor

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/controller/state"
	"github.com/anvil-metal/anvil/controller/store"
	"github.com/anvil-metal/anvil/protocol"
)

func holdStepReq() protocol.Step { return protocol.Step{Interface: "deploy", Step: "hold"} }

// held waits until the node rests in want and checks what a held node
// looks like: the hold step current, no lock, the operation's target kept.
func (e *env) held(t *testing.T, id string, want state.State, target state.State) *store.Node {
	t.Helper()
	n := e.wait(t, id, want)
	cur := n.CleanStep
	if want == state.DeployHold {
		cur = n.DeployStep
	}
	assert.Equal(t, "hold", cur["step"])
	assert.Equal(t, "deploy", cur["interface"])
	assert.Nil(t, n.Reservation, "no lock is held while the node is held")
	require.NotNil(t, n.TargetProvisionState)
	assert.Equal(t, string(target), *n.TargetProvisionState)
	return n
}

// TestManualCleanHoldUnhold: [erase (asynchronous), hold, another step]
// runs the first step, holds in clean hold without timing out, and unhold
// runs the rest and ends the manual clean in manageable.
func TestManualCleanHoldUnhold(t *testing.T) {
	drv := &scriptDriver{steps: twoSteps(true), outcome: map[string]string{"deploy.erase_devices_metadata": "wait"}}
	// a wait-state timeout of 500 ms checked every 5 ms: a node held longer
	// must not fail (the clean wait before the hold is well within it)
	e := start(t, drv, Config{CleanWaitTimeout: 500 * time.Millisecond, CheckInterval: 5 * time.Millisecond}, nil)
	ctx := context.Background()
	id := e.manageable(t)
	steps := []protocol.Step{{Interface: "deploy", Step: "erase_devices_metadata"}, holdStepReq(), {Interface: "deploy", Step: "erase_devices"}}
	require.NoError(t, e.c.Provision(ctx, id, ProvisionRequest{Target: "clean", CleanSteps: steps}))
	require.Eventually(t, func() bool {
		n, err := e.st.GetNode(ctx, id)
		return err == nil && n.ProvisionState == string(state.CleanWait)
	}, 5*time.Second, time.Millisecond)
	require.NoError(t, e.c.CompleteAsyncStep(ctx, id, "deploy.erase_devices_metadata", nil))
	e.held(t, id, state.CleanHold, state.Manageable)

	time.Sleep(700 * time.Millisecond) // past the timeout, over a hundred checks
	n := e.held(t, id, state.CleanHold, state.Manageable)
	assert.Nil(t, n.LastError, "no timeout in clean hold")
	assert.Equal(t, []string{"deploy.erase_devices_metadata"}, drv.executed(), "nothing after the hold step ran")

	// a second unhold or a clean while held is refused, a verb that does
	// not apply to a held node too
	for _, verb := range []string{"provide", "deleted", "manage"} {
		err := e.c.Provision(ctx, id, ProvisionRequest{Target: verb})
		var ce *Error
		require.ErrorAs(t, err, &ce, verb)
		assert.Equal(t, CodeInvalid, ce.Code, verb)
		assert.Contains(t, ce.Msg, `while it is in state "clean hold"`, verb)
	}

	require.NoError(t, e.c.Provision(ctx, id, ProvisionRequest{Target: "unhold"}))
	n = e.wait(t, id, state.Manageable)
	assert.Nil(t, n.TargetProvisionState)
	assert.Empty(t, n.CleanStep)
	assert.Nil(t, n.LastError)
	assert.Equal(t, []string{"deploy.erase_devices_metadata", "deploy.erase_devices"}, drv.executed(), "the step after the hold ran once")

	err := e.c.Provision(ctx, id, ProvisionRequest{Target: "unhold"})
	var ce *Error
	require.ErrorAs(t, err, &ce, "unhold outside a hold state")
	assert.Equal(t, CodeInvalid, ce.Code)
	assert.Equal(t, `The requested action "unhold" can not be performed on node "`+id+`" while it is in state "manageable".`, ce.Msg)

	evs, err := e.st.ListEvents(ctx, id, 0)
	require.NoError(t, err)
	var msgs []string
	for _, ev := range evs {
		msgs = append(msgs, ev.Event)
	}
	assert.Contains(t, msgs, "clean step deploy.hold reached: the node is held until an operator sends unhold (continue) or abort")
	assert.Contains(t, msgs, "cleaning -> clean hold (hold)")
	assert.Contains(t, msgs, "clean hold -> cleaning (unhold requested)")
}

// TestHoldAsLastStep: a hold as the last step, on another interface than
// deploy, ends the flow on unhold.
func TestHoldAsLastStep(t *testing.T) {
	drv := &scriptDriver{steps: twoSteps(true)}
	e := start(t, drv, Config{}, nil)
	ctx := context.Background()
	id := e.manageable(t)
	steps := []protocol.Step{{Interface: "deploy", Step: "erase_devices"}, {Interface: "power", Step: "hold"}}
	require.NoError(t, e.c.Provision(ctx, id, ProvisionRequest{Target: "clean", CleanSteps: steps}))
	n := e.wait(t, id, state.CleanHold)
	assert.Equal(t, "power", n.CleanStep["interface"], "hold is accepted on any step interface")
	require.NoError(t, e.c.Provision(ctx, id, ProvisionRequest{Target: "unhold"}))
	e.wait(t, id, state.Manageable)
	assert.Equal(t, []string{"deploy.erase_devices"}, drv.executed())
}

// TestAbortFromCleanHold: abort fails the held clean at once with Ironic's
// message; no further step runs.
func TestAbortFromCleanHold(t *testing.T) {
	drv := &scriptDriver{steps: twoSteps(true)}
	e := start(t, drv, Config{}, nil)
	ctx := context.Background()
	id := e.manageable(t)
	steps := []protocol.Step{holdStepReq(), {Interface: "deploy", Step: "erase_devices"}}
	require.NoError(t, e.c.Provision(ctx, id, ProvisionRequest{Target: "clean", CleanSteps: steps}))
	e.held(t, id, state.CleanHold, state.Manageable)
	require.NoError(t, e.c.Provision(ctx, id, ProvisionRequest{Target: "abort"}))
	n := e.wait(t, id, state.CleanFailed)
	require.NotNil(t, n.LastError)
	assert.Equal(t, `By request, the clean operation was aborted during or after the completion of step "deploy.hold"`, *n.LastError)
	assert.Empty(t, n.CleanStep)
	assert.False(t, n.Maintenance, "abort does not set maintenance")
	assert.Empty(t, drv.executed())
	// the operator's way out of clean failed
	require.NoError(t, e.c.Provision(ctx, id, ProvisionRequest{Target: "manage"}))
	e.wait(t, id, state.Manageable)
}

func (e *env) available(t *testing.T) string {
	t.Helper()
	id := e.manageable(t)
	_, err := store.MutateNode(context.Background(), e.st, id, func(n *store.Node) error {
		n.ProvisionState = string(state.Available)
		return nil
	})
	require.NoError(t, err)
	return id
}

// TestDeployHold: a hold deploy step (priority 50, after the core deploy
// step at 100) holds in deploy hold; unhold makes the node active, abort
// fails the deploy.
func TestDeployHold(t *testing.T) {
	ctx := context.Background()
	hold := protocol.Step{Interface: "deploy", Step: "hold", Priority: 50}
	t.Run("unhold", func(t *testing.T) {
		e := start(t, &scriptDriver{}, Config{DeployWaitTimeout: 1, CheckInterval: 5 * time.Millisecond}, nil)
		id := e.available(t)
		require.NoError(t, e.c.Provision(ctx, id, ProvisionRequest{Target: "active", DeploySteps: []protocol.Step{hold}}))
		e.held(t, id, state.DeployHold, state.Active)
		time.Sleep(30 * time.Millisecond)
		n := e.held(t, id, state.DeployHold, state.Active)
		assert.Nil(t, n.LastError, "no timeout in deploy hold")
		require.NoError(t, e.c.Provision(ctx, id, ProvisionRequest{Target: "unhold"}))
		n = e.wait(t, id, state.Active)
		assert.Empty(t, n.DeployStep)
		assert.Nil(t, n.TargetProvisionState)
	})
	t.Run("abort", func(t *testing.T) {
		e := start(t, &scriptDriver{}, Config{}, nil)
		id := e.available(t)
		require.NoError(t, e.c.Provision(ctx, id, ProvisionRequest{Target: "active", DeploySteps: []protocol.Step{hold}}))
		e.held(t, id, state.DeployHold, state.Active)
		require.NoError(t, e.c.Provision(ctx, id, ProvisionRequest{Target: "abort"}))
		n := e.wait(t, id, state.DeployFailed)
		require.NotNil(t, n.LastError)
		assert.Equal(t, `Deploy aborted by operator during step "deploy.hold"`, *n.LastError)
		assert.Empty(t, n.DeployStep)
	})
	t.Run("a disabled hold does not hold", func(t *testing.T) {
		e := start(t, &scriptDriver{}, Config{}, nil)
		id := e.available(t)
		off := hold
		off.Priority = 0
		require.NoError(t, e.c.Provision(ctx, id, ProvisionRequest{Target: "active", DeploySteps: []protocol.Step{off}}))
		e.wait(t, id, state.Active)
	})
}
