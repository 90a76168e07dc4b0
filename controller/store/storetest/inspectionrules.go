package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/controller/store"
)

func newRule(priority int, phase string, at time.Time) *store.InspectionRule {
	return &store.InspectionRule{UUID: uuid.NewString(), Phase: phase, Priority: priority, CreatedAt: at,
		Description: strp("rule"),
		Conditions:  []map[string]any{{"op": "eq", "args": map[string]any{"values": []any{"{node.driver}", "ipmi"}}}},
		Actions:     []map[string]any{{"op": "add-trait", "args": map[string]any{"name": "CUSTOM_X"}}}}
}

func testInspectionRules(t *testing.T, s store.Store) {
	ctx := context.Background()
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	a, b, c := newRule(10, "main", t0), newRule(50, "main", t0.Add(time.Hour)), newRule(5, "other", t0.Add(-time.Hour))
	for _, x := range []*store.InspectionRule{a, b, c} {
		require.NoError(t, s.CreateInspectionRule(ctx, x))
	}
	dup := newRule(1, "main", t0)
	dup.UUID = a.UUID
	assert.ErrorIs(t, s.CreateInspectionRule(ctx, dup), store.ErrDuplicateUUID)

	got, err := s.GetInspectionRule(ctx, a.UUID)
	require.NoError(t, err)
	assert.Equal(t, a.Conditions, got.Conditions)
	assert.Equal(t, a.Actions, got.Actions)
	assert.Equal(t, "rule", *got.Description)
	assert.True(t, a.CreatedAt.Equal(got.CreatedAt))
	_, err = s.GetInspectionRule(ctx, uuid.NewString())
	assert.ErrorIs(t, err, store.ErrNotFound)

	ids := func(l []*store.InspectionRule) []string {
		var out []string
		for _, x := range l {
			out = append(out, x.UUID)
		}
		return out
	}
	all, err := s.ListInspectionRules(ctx, "", store.Page{})
	require.NoError(t, err)
	assert.Equal(t, []string{a.UUID, b.UUID, c.UUID}, ids(all), "by id")
	main, err := s.ListInspectionRules(ctx, "main", store.Page{SortKey: "priority", Desc: true})
	require.NoError(t, err)
	assert.Equal(t, []string{b.UUID, a.UUID}, ids(main))
	page, err := s.ListInspectionRules(ctx, "", store.Page{SortKey: "created_at", Limit: 2})
	require.NoError(t, err)
	assert.Equal(t, []string{c.UUID, a.UUID}, ids(page))
	next, err := s.ListInspectionRules(ctx, "", store.Page{SortKey: "created_at", Limit: 2, Marker: a.UUID})
	require.NoError(t, err)
	assert.Equal(t, []string{b.UUID}, ids(next))
	_, err = s.ListInspectionRules(ctx, "", store.Page{Marker: uuid.NewString()})
	assert.ErrorIs(t, err, store.ErrNotFound)

	now := t0.Add(2 * time.Hour)
	a.Priority, a.Sensitive, a.UpdatedAt = 99, true, &now
	require.NoError(t, s.UpdateInspectionRule(ctx, a))
	byPrio, err := s.ListInspectionRules(ctx, "main", store.Page{SortKey: "priority", Desc: true, Limit: 1})
	require.NoError(t, err)
	require.Len(t, byPrio, 1)
	assert.Equal(t, a.UUID, byPrio[0].UUID)
	assert.True(t, byPrio[0].Sensitive)
	assert.True(t, now.Equal(*byPrio[0].UpdatedAt))

	require.NoError(t, s.DeleteInspectionRule(ctx, a.UUID))
	assert.ErrorIs(t, s.DeleteInspectionRule(ctx, a.UUID), store.ErrNotFound)
	assert.ErrorIs(t, s.UpdateInspectionRule(ctx, a), store.ErrNotFound)
}
