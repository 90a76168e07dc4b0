package conductor

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/controller/state"
	"github.com/anvil-metal/anvil/controller/store"
	"github.com/anvil-metal/anvil/controller/store/sqlite"
	"github.com/anvil-metal/anvil/controller/store/storetest"
	"github.com/anvil-metal/anvil/protocol"
)

// scriptDriver is fake-hardware whose clean steps are scripted per test:
// each step finishes, waits (asynchronous, like an agent step) or fails.
type scriptDriver struct {
	FakeDriver
	steps   []protocol.Step
	outcome map[string]string // step key -> "done" | "wait" | "fail"
	mu      sync.Mutex
	ran     []string
}

func (d *scriptDriver) Name() string                           { return "script" }
func (d *scriptDriver) CleanSteps(*store.Node) []protocol.Step { return d.steps }
func (d *scriptDriver) ExecuteStep(_ context.Context, _ *store.Node, _ string, s protocol.Step) (StepStatus, error) {
	d.mu.Lock()
	d.ran = append(d.ran, s.Key())
	d.mu.Unlock()
	switch d.outcome[s.Key()] {
	case "wait":
		return StepWait, nil
	case "fail":
		return StepDone, errors.New("disk on fire")
	}
	return StepDone, nil
}

func (d *scriptDriver) executed() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.ran...)
}

func twoSteps(abortable bool) []protocol.Step {
	return []protocol.Step{
		{Interface: "deploy", Step: "erase_devices_metadata", Priority: 99, Abortable: abortable},
		{Interface: "deploy", Step: "erase_devices", Priority: 10, Abortable: true},
	}
}

type env struct {
	c    *Conductor
	st   store.Store
	stop func() // stops the conductor (as a restart does); idempotent
}

func start(t *testing.T, drv Driver, cfg Config, st store.Store) *env {
	t.Helper()
	if st == nil {
		var err error
		st, err = sqlite.Open(context.Background(), ":memory:")
		require.NoError(t, err)
		t.Cleanup(func() { st.Close() })
	}
	cfg.Host, cfg.AutomatedClean = "c1", true
	if cfg.CheckInterval == 0 {
		cfg.CheckInterval = time.Hour
	}
	c := New(st, cfg, drv)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = c.Run(ctx); close(done) }()
	stop := func() { cancel(); <-done }
	t.Cleanup(stop)
	return &env{c: c, st: st, stop: stop}
}

func (e *env) manageable(t *testing.T) string {
	t.Helper()
	n := storetest.NewNode("")
	n.Driver, n.ProvisionState = "script", string(state.Manageable)
	require.NoError(t, e.st.CreateNode(context.Background(), n))
	return n.UUID
}

func (e *env) wait(t *testing.T, id string, want state.State) *store.Node {
	t.Helper()
	var n *store.Node
	require.Eventually(t, func() bool {
		var err error
		n, err = e.st.GetNode(context.Background(), id)
		require.NoError(t, err)
		return n.ProvisionState == string(want) && e.c.Idle()
	}, 5*time.Second, 2*time.Millisecond, "node never reached %s", want)
	return n
}

func TestAutomatedCleanOrderAndOverrides(t *testing.T) {
	drv := &scriptDriver{steps: append(twoSteps(true),
		protocol.Step{Interface: "raid", Step: "delete_configuration", Priority: 0},
		protocol.Step{Interface: "power", Step: "x", Priority: 10},
		protocol.Step{Interface: "bios", Step: "y", Priority: 50})}
	e := start(t, drv, Config{PriorityOverrides: map[string]int{"deploy.erase_devices": 0, "raid.delete_configuration": 20}}, nil)
	id := e.manageable(t)
	require.NoError(t, e.c.Provision(context.Background(), id, ProvisionRequest{Target: "provide"}))
	n := e.wait(t, id, state.Available)
	assert.Nil(t, n.TargetProvisionState)
	assert.Equal(t, []string{"deploy.erase_devices_metadata", "bios.y", "raid.delete_configuration", "power.x"}, drv.executed(),
		"priority order, overrides applied (0 disables), ties broken power first")
}

func TestAsyncStepsAndResume(t *testing.T) {
	drv := &scriptDriver{steps: twoSteps(true), outcome: map[string]string{"deploy.erase_devices_metadata": "wait", "deploy.erase_devices": "wait"}}
	e := start(t, drv, Config{}, nil)
	ctx := context.Background()
	id := e.manageable(t)
	require.NoError(t, e.c.Provision(ctx, id, ProvisionRequest{Target: "provide"}))
	n := e.wait(t, id, state.CleanWait)
	assert.Equal(t, "erase_devices_metadata", n.CleanStep["step"])
	assert.Nil(t, n.Reservation, "the lock is released while waiting")
	assert.Equal(t, "available", *n.TargetProvisionState)

	err := e.c.CompleteAsyncStep(ctx, id, "deploy.erase_devices", nil)
	var ce *Error
	require.ErrorAs(t, err, &ce, "a report for another step is refused")

	require.NoError(t, e.c.CompleteAsyncStep(ctx, id, "deploy.erase_devices_metadata", nil))
	n = e.wait(t, id, state.CleanWait)
	assert.Equal(t, "erase_devices", n.CleanStep["step"])
	require.NoError(t, e.c.CompleteAsyncStep(ctx, id, "deploy.erase_devices", nil))
	n = e.wait(t, id, state.Available)
	assert.Empty(t, n.CleanStep)
	assert.Equal(t, []string{"deploy.erase_devices_metadata", "deploy.erase_devices"}, drv.executed())
}

func TestStepFailureSetsMaintenanceAndKeepsStep(t *testing.T) {
	drv := &scriptDriver{steps: twoSteps(true), outcome: map[string]string{"deploy.erase_devices": "fail"}}
	e := start(t, drv, Config{}, nil)
	id := e.manageable(t)
	require.NoError(t, e.c.Provision(context.Background(), id, ProvisionRequest{Target: "provide"}))
	n := e.wait(t, id, state.CleanFailed)
	require.NotNil(t, n.LastError)
	assert.Contains(t, *n.LastError, "Clean step deploy.erase_devices failed on node "+id+": disk on fire")
	assert.True(t, n.Maintenance)
	assert.Equal(t, "clean failure", *n.Fault)
	assert.Equal(t, "erase_devices", n.CleanStep["step"], "the failed step stays visible")
	assert.Equal(t, "available", *n.TargetProvisionState, "target is kept in clean failed")

	// recovery path: manage (clean failed -> manageable) keeps last_error until the next operation
	require.NoError(t, e.c.Provision(context.Background(), id, ProvisionRequest{Target: "manage"}))
	n = e.wait(t, id, state.Manageable)
	assert.NotNil(t, n.LastError)
}

func TestAbort(t *testing.T) {
	ctx := context.Background()
	t.Run("abortable step fails at once", func(t *testing.T) {
		drv := &scriptDriver{steps: twoSteps(true), outcome: map[string]string{"deploy.erase_devices_metadata": "wait"}}
		e := start(t, drv, Config{}, nil)
		id := e.manageable(t)
		require.NoError(t, e.c.Provision(ctx, id, ProvisionRequest{Target: "provide"}))
		e.wait(t, id, state.CleanWait)
		require.NoError(t, e.c.Provision(ctx, id, ProvisionRequest{Target: "abort"}))
		n := e.wait(t, id, state.CleanFailed)
		assert.Equal(t, `By request, the clean operation was aborted during or after the completion of step "deploy.erase_devices_metadata"`, *n.LastError)
		assert.False(t, n.Maintenance, "abort does not set maintenance")
	})
	t.Run("non-abortable step finishes, then the node fails", func(t *testing.T) {
		drv := &scriptDriver{steps: twoSteps(false), outcome: map[string]string{"deploy.erase_devices_metadata": "wait"}}
		e := start(t, drv, Config{}, nil)
		id := e.manageable(t)
		require.NoError(t, e.c.Provision(ctx, id, ProvisionRequest{Target: "provide"}))
		e.wait(t, id, state.CleanWait)
		require.NoError(t, e.c.Provision(ctx, id, ProvisionRequest{Target: "abort"}))
		n := e.wait(t, id, state.CleanWait)
		assert.Equal(t, true, n.CleanStep["abort_after"])
		require.NoError(t, e.c.CompleteAsyncStep(ctx, id, "deploy.erase_devices_metadata", nil))
		n = e.wait(t, id, state.CleanFailed)
		assert.Contains(t, *n.LastError, "aborted during or after the completion of step")
		assert.Equal(t, []string{"deploy.erase_devices_metadata"}, drv.executed(), "no further step ran")
	})
	t.Run("abort outside a wait state is refused", func(t *testing.T) {
		e := start(t, &scriptDriver{}, Config{}, nil)
		id := e.manageable(t)
		err := e.c.Provision(ctx, id, ProvisionRequest{Target: "abort"})
		var ce *Error
		require.ErrorAs(t, err, &ce)
		assert.Equal(t, CodeInvalid, ce.Code)
	})
}

func TestWaitTimeout(t *testing.T) {
	drv := &scriptDriver{steps: twoSteps(true), outcome: map[string]string{"deploy.erase_devices_metadata": "wait"}}
	var mu sync.Mutex
	now := time.Now()
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	e := start(t, drv, Config{CleanWaitTimeout: 30 * time.Minute, Now: clock}, nil)
	ctx := context.Background()
	id := e.manageable(t)
	require.NoError(t, e.c.Provision(ctx, id, ProvisionRequest{Target: "provide"}))
	e.wait(t, id, state.CleanWait)

	e.c.engine.stops.checkTimeouts(ctx)
	e.wait(t, id, state.CleanWait) // not yet
	mu.Lock()
	now = now.Add(31 * time.Minute)
	mu.Unlock()
	e.c.engine.stops.checkTimeouts(ctx)
	n := e.wait(t, id, state.CleanFailed)
	assert.Contains(t, *n.LastError, "Timeout reached while cleaning the node")
	assert.Contains(t, *n.LastError, "erase_devices_metadata")
	assert.True(t, n.Maintenance, "a step was running")
}

func TestRestartResumesAtPersistedStep(t *testing.T) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, t.TempDir()+"/anvil.db")
	require.NoError(t, err)
	defer st.Close()
	// A controller died while running step 2 of 2: the node is still
	// cleaning, reserved, with the step list and index persisted.
	n := storetest.NewNode("interrupted")
	n.Driver, n.ProvisionState = "script", string(state.Cleaning)
	n.TargetProvisionState, n.Reservation = strp("available"), strp("dead-controller")
	n.Operation.Clean = &store.StepPlan{Steps: twoSteps(true), Index: 1}
	require.NoError(t, st.CreateNode(ctx, n))

	drv := &scriptDriver{steps: twoSteps(true)}
	e := start(t, drv, Config{}, st)
	got := e.wait(t, n.UUID, state.Available)
	assert.Nil(t, got.Reservation)
	assert.Equal(t, []string{"deploy.erase_devices"}, drv.executed(), "resumed at the persisted step, earlier steps not re-run")
	events, err := st.ListEvents(ctx, n.UUID, 0)
	require.NoError(t, err)
	require.NotEmpty(t, events)
	assert.Contains(t, events[0].Event, "resumed the operation")
}

func TestLockedNodeRefusesVerbs(t *testing.T) {
	e := start(t, &scriptDriver{}, Config{}, nil)
	ctx := context.Background()
	n := storetest.NewNode("")
	n.Driver, n.ProvisionState, n.Reservation = "script", string(state.Available), strp("other-host")
	// other-host is alive and holds the node's lease, as a controller
	// running an action does, from before the node exists: without the
	// lease, this controller's takeOver clears the reservation as one a
	// dead controller left (it raced this test).
	ok, _, err := e.st.AcquireLease(ctx, n.UUID, "other-host", time.Hour)
	require.NoError(t, err)
	require.True(t, ok)
	require.NoError(t, e.st.CreateNode(ctx, n))
	err = e.c.Provision(ctx, n.UUID, ProvisionRequest{Target: "active"})
	var ce *Error
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, CodeLocked, ce.Code)
	assert.Contains(t, ce.Msg, "locked by host other-host")
	err = e.c.SetPower(ctx, n.UUID, PowerOn)
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, CodeLocked, ce.Code)
}

func TestDuplicatePriorityInOneInterfaceIsRefused(t *testing.T) {
	drv := &scriptDriver{steps: []protocol.Step{
		{Interface: "deploy", Step: "a", Priority: 10}, {Interface: "deploy", Step: "b", Priority: 10},
		{Interface: "bios", Step: "c", Priority: 10}}}
	e := start(t, drv, Config{}, nil)
	id := e.manageable(t)
	require.NoError(t, e.c.Provision(context.Background(), id, ProvisionRequest{Target: "provide"}))
	n := e.wait(t, id, state.CleanFailed)
	assert.Contains(t, *n.LastError, "interface deploy has two enabled clean steps with priority 10 (deploy.a and deploy.b)")
	assert.Empty(t, drv.executed(), "nothing ran in an undefined order")

	// an override resolves it; equal priorities across interfaces are fine
	drv2 := &scriptDriver{steps: drv.steps}
	e2 := start(t, drv2, Config{PriorityOverrides: map[string]int{"deploy.b": 5}}, nil)
	id2 := e2.manageable(t)
	require.NoError(t, e2.c.Provision(context.Background(), id2, ProvisionRequest{Target: "provide"}))
	e2.wait(t, id2, state.Available)
	assert.Equal(t, []string{"deploy.a", "bios.c", "deploy.b"}, drv2.executed())
}

// TestResumedInbandStepKeepsItsCommand covers a controller that died after
// issuing an in-band command but before moving the node to clean wait: the
// resumed step must not issue a second command (the agent would run the
// step twice).
func TestResumedInbandStepKeepsItsCommand(t *testing.T) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, t.TempDir()+"/anvil.db")
	require.NoError(t, err)
	defer st.Close()
	n := storetest.NewNode("")
	n.Driver, n.ProvisionState = "script", string(state.Cleaning)
	n.Interfaces.Deploy = "direct"
	n.TargetProvisionState, n.Reservation = strp("available"), strp("dead-controller")
	steps := twoSteps(true)
	n.Operation.Clean = &store.StepPlan{Steps: steps}
	n.Operation.Agent.Booted = true
	n.CleanStep = stepToMap(steps[0])
	issueCommand(n, "execute_clean_step", &steps[0], time.Now())
	first := n.Operation.Agent.Command
	require.NoError(t, st.CreateNode(ctx, n))

	e := start(t, &scriptDriver{}, Config{}, st)
	got := e.wait(t, n.UUID, state.CleanWait)
	again := got.Operation.Agent.Command
	require.NotNil(t, again)
	assert.Equal(t, first.ID, again.ID, "the resumed step reuses the command already issued")
	events, err := st.ListEvents(ctx, n.UUID, 0)
	require.NoError(t, err)
	var history []string
	for _, ev := range events {
		history = append(history, ev.Event)
	}
	assert.Contains(t, history, "clean step deploy.erase_devices_metadata resumed (1/2)", "the history does not claim a second start")
	assert.NotContains(t, history, "clean step deploy.erase_devices_metadata started (1/2)")
}

func TestCreateConfigurationTakesTheNodesTargetRAIDConfig(t *testing.T) {
	n := storetest.NewNode("")
	n.TargetRAIDConfig = map[string]any{"logical_disks": []any{map[string]any{"size_gb": "MAX", "raid_level": "1"}}}
	got := withNodeArgs(n, []protocol.Step{{Interface: "raid", Step: "create_configuration"}, {Interface: "deploy", Step: "erase_devices_metadata"},
		{Interface: "raid", Step: "create_configuration", Args: map[string]any{"target_raid_config": "given"}}})
	assert.Equal(t, n.TargetRAIDConfig, got[0].Args["target_raid_config"], "taken from the node, as Ironic does")
	assert.Nil(t, got[1].Args)
	assert.Equal(t, "given", got[2].Args["target_raid_config"], "an explicit argument wins")
	create := protocol.Step{Interface: "raid", Step: "create_configuration", ArgsInfo: map[string]protocol.ArgInfo{"target_raid_config": {Required: true}}}
	assert.NoError(t, create.CheckArgs(got[0].Args))
}
