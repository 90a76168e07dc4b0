package storetest

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/controller/store"
)

// testStepResultWithNode: a step result given with WithStepResult is
// stored by the node write, and only when that write succeeds: a write
// refused as stale stores nothing, so a result never exists without the
// node state it belongs to (and the reverse).
func testStepResultWithNode(t *testing.T, s store.Store) {
	ctx := context.Background()
	n := NewNode("timed-out")
	require.NoError(t, s.CreateNode(ctx, n))
	stale := *n
	r := &store.StepResult{UUID: uuid.NewString(), NodeUUID: n.UUID, Kind: "clean", Step: "deploy.erase_devices",
		FinishedAt: time.Now().UTC(), Outcome: store.OutcomeTimedOut, Error: "Timeout reached"}

	n.ProvisionState = "clean failed"
	require.NoError(t, s.UpdateNode(store.WithStepResult(ctx, r), n, &store.Event{UUID: uuid.NewString(), NodeUUID: n.UUID,
		CreatedAt: time.Now().UTC(), Event: "clean wait -> clean failed (fail)"}))
	got, err := s.ListStepResults(ctx, store.ResultPage{NodeUUID: n.UUID})
	require.NoError(t, err)
	require.Len(t, got, 1)
	assert.Equal(t, store.OutcomeTimedOut, got[0].Outcome)

	// the stale writer's result goes nowhere
	lost := &store.StepResult{UUID: uuid.NewString(), NodeUUID: n.UUID, Outcome: store.OutcomeFailed, FinishedAt: time.Now().UTC()}
	stale.ProvisionState = "manageable"
	assert.ErrorIs(t, s.UpdateNode(store.WithStepResult(ctx, lost), &stale), store.ErrConflict)
	got, err = s.ListStepResults(ctx, store.ResultPage{NodeUUID: n.UUID})
	require.NoError(t, err)
	assert.Equal(t, []string{r.UUID}, uuids(got, resultID))

	// a retried write carrying the same result stores it once
	require.NoError(t, s.UpdateNode(store.WithStepResult(store.Volatile(ctx), r), n))
	got, err = s.ListStepResults(ctx, store.ResultPage{NodeUUID: n.UUID})
	require.NoError(t, err)
	assert.Len(t, got, 1)
}

// testEnrolNode: a node enrolled with ports, inventory and history
// appears with all of them; one whose port address is taken appears not
// at all, with no port, inventory or event left behind.
func testEnrolNode(t *testing.T, s store.Store) {
	ctx := context.Background()
	inv := json.RawMessage(`{"cpu":{"count":4}}`)
	n := NewNode("")
	e := &store.Enrolment{Node: n, Inventory: inv,
		Ports:  []*store.Port{{UUID: uuid.NewString(), Address: "52:54:00:00:00:01", CreatedAt: time.Now().UTC()}},
		Events: []*store.Event{{UUID: uuid.NewString(), NodeUUID: n.UUID, CreatedAt: time.Now().UTC(), Event: "discovered"}}}
	require.NoError(t, s.EnrolNode(ctx, e))
	assert.NotZero(t, n.ID)
	assert.Equal(t, int64(1), n.Revision)
	got, err := s.GetInventory(ctx, n.UUID)
	require.NoError(t, err)
	assert.JSONEq(t, string(inv), string(got))
	ports, err := s.ListPorts(ctx, store.ResourceFilter{NodeUUID: &n.UUID}, store.Page{})
	require.NoError(t, err)
	require.Len(t, ports, 1)
	assert.Equal(t, n.UUID, ports[0].NodeUUID)
	events, err := s.ListEvents(ctx, n.UUID, 0)
	require.NoError(t, err)
	assert.Len(t, events, 1)

	// the second machine reports a MAC enrolled meanwhile: nothing of it stays
	m := NewNode("")
	e2 := &store.Enrolment{Node: m, Inventory: inv,
		Ports: []*store.Port{{UUID: uuid.NewString(), Address: "52:54:00:00:00:02", CreatedAt: time.Now().UTC()},
			{UUID: uuid.NewString(), Address: "52:54:00:00:00:01", CreatedAt: time.Now().UTC()}},
		Events: []*store.Event{{UUID: uuid.NewString(), NodeUUID: m.UUID, CreatedAt: time.Now().UTC(), Event: "discovered"}}}
	assert.ErrorIs(t, s.EnrolNode(ctx, e2), store.ErrDuplicateAddr)
	_, err = s.GetNode(ctx, m.UUID)
	assert.ErrorIs(t, err, store.ErrNotFound)
	_, err = s.GetInventory(ctx, m.UUID)
	assert.ErrorIs(t, err, store.ErrNotFound)
	addr := "52:54:00:00:00:02"
	ports, err = s.ListPorts(ctx, store.ResourceFilter{Address: &addr}, store.Page{})
	require.NoError(t, err)
	assert.Empty(t, ports)
	events, err = s.ListEvents(ctx, m.UUID, 0)
	require.NoError(t, err)
	assert.Empty(t, events)
}
