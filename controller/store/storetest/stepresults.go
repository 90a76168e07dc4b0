package storetest

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/controller/store"
)

func uuids[T any](list []*T, id func(*T) string) []string {
	out := make([]string, len(list))
	for i, v := range list {
		out[i] = id(v)
	}
	return out
}

func resultID(r *store.StepResult) string  { return r.UUID }
func recordID(r *store.EraseRecord) string { return r.UUID }

// testStepResults: results are paged newest first per node, a repeated
// report is stored once, an oversized result document is dropped (and
// says so), the node's oldest runs go beyond the per-node bound, and a
// node's results go with it.
func testStepResults(t *testing.T, s store.Store) {
	ctx := context.Background()
	a, b := NewNode("a"), NewNode("b")
	require.NoError(t, s.CreateNode(ctx, a))
	require.NoError(t, s.CreateNode(ctx, b))
	t0 := time.Date(2026, 11, 25, 9, 0, 0, 0, time.UTC)
	var ids []string
	for i := range 4 {
		r := &store.StepResult{UUID: fmt.Sprintf("run-%d", i), NodeUUID: a.UUID, Kind: "clean", Step: "deploy.erase_devices",
			StartedAt: t0.Add(time.Duration(i) * time.Minute), FinishedAt: t0.Add(time.Duration(i)*time.Minute + 30*time.Second),
			Outcome: store.OutcomeSucceeded, Summary: "vda erased", Result: json.RawMessage(`{"devices":[{"bytes":1024}]}`)}
		require.NoError(t, s.PutStepResult(ctx, r))
		ids = append(ids, r.UUID)
	}
	require.NoError(t, s.PutStepResult(ctx, &store.StepResult{UUID: "other", NodeUUID: b.UUID, Kind: "deploy",
		Step: "deploy.write_image", Outcome: store.OutcomeFailed, Error: "boom", FinishedAt: t0}))
	// the agent repeating a final report changes nothing
	require.NoError(t, s.PutStepResult(ctx, &store.StepResult{UUID: "run-1", NodeUUID: a.UUID, Outcome: store.OutcomeFailed}))

	all, err := s.ListStepResults(ctx, store.ResultPage{NodeUUID: a.UUID})
	require.NoError(t, err)
	assert.Equal(t, []string{"run-3", "run-2", "run-1", "run-0"}, uuids(all, resultID))
	assert.Equal(t, store.OutcomeSucceeded, all[2].Outcome)
	assert.JSONEq(t, `{"devices":[{"bytes":1024}]}`, string(all[0].Result))
	assert.True(t, all[0].StartedAt.Equal(t0.Add(3*time.Minute)), all[0].StartedAt)

	page, err := s.ListStepResults(ctx, store.ResultPage{NodeUUID: a.UUID, Limit: 2})
	require.NoError(t, err)
	assert.Equal(t, []string{"run-3", "run-2"}, uuids(page, resultID))
	page, err = s.ListStepResults(ctx, store.ResultPage{NodeUUID: a.UUID, Limit: 2, Marker: "run-2"})
	require.NoError(t, err)
	assert.Equal(t, []string{"run-1", "run-0"}, uuids(page, resultID))
	_, err = s.ListStepResults(ctx, store.ResultPage{NodeUUID: a.UUID, Marker: "nope"})
	assert.ErrorIs(t, err, store.ErrNotFound)

	every, err := s.ListStepResults(ctx, store.ResultPage{Ascending: true})
	require.NoError(t, err)
	assert.Equal(t, append(ids, "other"), uuids(every, resultID))

	big := &store.StepResult{UUID: "big", NodeUUID: b.UUID, Outcome: store.OutcomeSucceeded, FinishedAt: t0,
		Summary: "ok", Result: json.RawMessage(`"` + strings.Repeat("x", store.MaxStepResultBytes) + `"`)}
	require.NoError(t, s.PutStepResult(ctx, big))
	got, err := s.ListStepResults(ctx, store.ResultPage{NodeUUID: b.UUID, Limit: 1})
	require.NoError(t, err)
	require.Len(t, got, 1)
	assert.True(t, got[0].ResultTruncated)
	assert.Empty(t, got[0].Result)
	assert.Equal(t, "ok", got[0].Summary)

	require.NoError(t, s.DeleteNode(ctx, b))
	gone, err := s.ListStepResults(ctx, store.ResultPage{NodeUUID: b.UUID})
	require.NoError(t, err)
	assert.Empty(t, gone)
}

// testStepResultsBound: beyond MaxStepResultsPerNode runs, a node's
// oldest go; other nodes keep theirs.
func testStepResultsBound(t *testing.T, s store.Store) {
	ctx := context.Background()
	put := func(node string, i int) {
		require.NoError(t, s.PutStepResult(ctx, &store.StepResult{UUID: fmt.Sprintf("%s-%d", node, i), NodeUUID: node,
			Outcome: store.OutcomeSucceeded, FinishedAt: time.Now()}))
	}
	put("other", 0)
	for i := range store.MaxStepResultsPerNode + 2 {
		put("busy", i)
	}
	kept, err := s.ListStepResults(ctx, store.ResultPage{NodeUUID: "busy"})
	require.NoError(t, err)
	require.Len(t, kept, store.MaxStepResultsPerNode)
	assert.Equal(t, fmt.Sprintf("busy-%d", store.MaxStepResultsPerNode+1), kept[0].UUID)
	assert.Equal(t, "busy-2", kept[len(kept)-1].UUID)
	other, err := s.ListStepResults(ctx, store.ResultPage{NodeUUID: "other"})
	require.NoError(t, err)
	assert.Len(t, other, 1)
}

// testEraseRecords: records are paged newest first, stored once, and
// outlive their node.
func testEraseRecords(t *testing.T, s store.Store) {
	ctx := context.Background()
	n := NewNode("retiree")
	require.NoError(t, s.CreateNode(ctx, n))
	t0 := time.Date(2026, 11, 25, 9, 0, 0, 0, time.UTC)
	var recs []*store.EraseRecord
	for i := range 3 {
		recs = append(recs, &store.EraseRecord{UUID: uuid.NewString(), NodeUUID: n.UUID, CreatedAt: t0.Add(time.Duration(i) * time.Second),
			Data: json.RawMessage(fmt.Sprintf(`{"record":{"device":"/dev/vd%c"},"signature":"c2ln"}`, 'a'+i))})
	}
	require.NoError(t, s.PutEraseRecords(ctx, recs[:2]))
	require.NoError(t, s.PutEraseRecords(ctx, recs[1:])) // recs[1] again: kept once
	require.NoError(t, s.DeleteNode(ctx, n))
	got, err := s.ListEraseRecords(ctx, store.ResultPage{NodeUUID: n.UUID})
	require.NoError(t, err)
	assert.Equal(t, []string{recs[2].UUID, recs[1].UUID, recs[0].UUID}, uuids(got, recordID))
	assert.JSONEq(t, string(recs[0].Data), string(got[2].Data))
	assert.True(t, got[0].CreatedAt.Equal(recs[2].CreatedAt))
	page, err := s.ListEraseRecords(ctx, store.ResultPage{NodeUUID: n.UUID, Marker: recs[2].UUID, Limit: 1})
	require.NoError(t, err)
	assert.Equal(t, []string{recs[1].UUID}, uuids(page, recordID))
}
