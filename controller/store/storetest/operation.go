package storetest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/controller/store"
	"github.com/anvil-metal/anvil/protocol"
)

// testOperation: the operation record is stored with the node, read back
// whole, and written only with the node (same revision check).
func testOperation(t *testing.T, s store.Store) {
	ctx := context.Background()
	n := NewNode("op")
	require.NoError(t, s.CreateNode(ctx, n))
	got, err := s.GetNode(ctx, n.UUID)
	require.NoError(t, err)
	assert.Equal(t, store.Operation{}, got.Operation, "a new node is idle")
	assert.Empty(t, got.InternalInfo())

	at := time.Date(2026, 3, 4, 5, 6, 7, 89, time.UTC)
	steps := []protocol.Step{{Interface: "deploy", Step: "erase_devices_metadata", Priority: 99, Abortable: true},
		{Interface: "deploy", Step: "erase_devices", Priority: 10, Args: map[string]any{"iterations": float64(2)}}}
	version := "agent 1.0"
	op := store.Operation{
		Clean: &store.StepPlan{Steps: steps, Index: 1}, ManualClean: true, UserCleanSteps: steps,
		CleaningRequestedBy: "manual cleaning requested by noauth (no user known)",
		Agent: store.AgentSession{Token: "secret", BootID: "boot-1", Version: &version, LastHeartbeat: at,
			BootTimings: []protocol.BootPhase{{Phase: "kernel", Seconds: 1.5}},
			Steps:       &store.StepCache{Fingerprint: "fp", Clean: steps, RefreshedAt: at},
			Command: &store.AgentCommand{Command: protocol.Command{ID: "cmd-1", Name: protocol.CmdExecuteCleanStep, Step: &steps[1]},
				IssuedAt: at},
			CommandStatus: &protocol.CommandStatus{ID: "cmd-1", Name: protocol.CmdExecuteCleanStep, State: protocol.CommandRunning, StartedAt: at},
			Booted:        true},
	}
	got.Operation = op
	require.NoError(t, s.UpdateNode(ctx, got))
	read, err := s.GetNode(ctx, n.UUID)
	require.NoError(t, err)
	assert.Equal(t, op, read.Operation)
	assert.Empty(t, read.DriverInternalInfo, "the operation is not in the node's document")
	list, err := s.ListNodes(ctx, store.NodeFilter{}, store.Page{})
	require.NoError(t, err)
	require.Len(t, list, 1)
	listed := op
	listed.Agent.Steps, listed.Agent.CommandStatus = nil, nil
	assert.Equal(t, listed, list[0].Operation, "lists read the operation, but not the agent's step cache and command status")
	assert.True(t, list[0].Partial)

	// Writing a listed node leaves the agent state it did not read.
	list[0].Extra = map[string]any{"listed": true}
	require.NoError(t, s.UpdateNode(ctx, list[0]))
	read, err = s.GetNode(ctx, n.UUID)
	require.NoError(t, err)
	assert.Equal(t, op, read.Operation)
	got = read

	loader, ok := s.(interface {
		LoadAgentState(ctx context.Context, nodes []*store.Node) error
	})
	require.True(t, ok, "%T loads agent state", s)
	require.NoError(t, loader.LoadAgentState(ctx, list))
	assert.Equal(t, op, list[0].Operation, "LoadAgentState makes a listed node whole")
	assert.False(t, list[0].Partial)

	// A writer holding an old revision changes neither the node nor its
	// operation.
	stale := *got
	stale.Revision = got.Revision - 1
	stale.Operation = store.Operation{}
	err = s.UpdateNode(ctx, &stale)
	require.True(t, errors.Is(err, store.ErrConflict), "got %v", err)
	read, err = s.GetNode(ctx, n.UUID)
	require.NoError(t, err)
	assert.Equal(t, op, read.Operation)

	// Dropping the command status (a new command) drops it from the table.
	read.Operation.Agent.CommandStatus = nil
	require.NoError(t, s.UpdateNode(ctx, read))
	read, err = s.GetNode(ctx, n.UUID)
	require.NoError(t, err)
	assert.Nil(t, read.Operation.Agent.CommandStatus)
	assert.NotNil(t, read.Operation.Agent.Steps)

	// Back to idle: nothing is left.
	read.Operation = store.Operation{}
	require.NoError(t, s.UpdateNode(ctx, read))
	read, err = s.GetNode(ctx, n.UUID)
	require.NoError(t, err)
	assert.Equal(t, store.Operation{}, read.Operation)
}

// testAgentStatePages: LoadAgentState fills in the agent state of exactly
// the listed nodes that have one, for a page of consecutive nodes (read as
// an id range) and for a sparse one (read by id), where a node between
// the page's nodes has agent state too and must not be touched.
func testAgentStatePages(t *testing.T, s store.Store) {
	ctx := context.Background()
	loader, ok := s.(interface {
		LoadAgentState(ctx context.Context, nodes []*store.Node) error
	})
	require.True(t, ok, "%T loads agent state", s)
	withState := map[string]bool{}
	for i := range 12 {
		n := NewNode(fmt.Sprintf("as-%02d", i))
		if i%4 == 0 || i == 11 {
			n.ProvisionState = "active"
		}
		if i%3 == 1 { // 1, 4, 7, 10
			n.Operation.Agent.Steps = &store.StepCache{Fingerprint: *n.Name}
			n.Operation.Agent.CommandStatus = &protocol.CommandStatus{ID: *n.Name, State: protocol.CommandRunning}
			withState[*n.Name] = true
		}
		require.NoError(t, s.CreateNode(ctx, n))
	}
	active := "active"
	for name, f := range map[string]store.NodeFilter{"consecutive": {}, "sparse": {ProvisionState: &active}} {
		t.Run(name, func(t *testing.T) {
			list, err := s.ListNodes(ctx, f, store.Page{})
			require.NoError(t, err)
			require.NoError(t, loader.LoadAgentState(ctx, list))
			for _, n := range list {
				assert.False(t, n.Partial, *n.Name)
				if withState[*n.Name] {
					require.NotNil(t, n.Operation.Agent.Steps, *n.Name)
					assert.Equal(t, *n.Name, n.Operation.Agent.Steps.Fingerprint)
					assert.Equal(t, *n.Name, n.Operation.Agent.CommandStatus.ID)
				} else {
					assert.Nil(t, n.Operation.Agent.Steps, *n.Name)
					assert.Nil(t, n.Operation.Agent.CommandStatus, *n.Name)
				}
			}
		})
	}
}
