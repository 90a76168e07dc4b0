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

func newRunbook(name string, at time.Time) *store.Runbook {
	return &store.Runbook{UUID: uuid.NewString(), Name: name, CreatedAt: at,
		Steps: []store.RunbookStep{
			{Interface: "bios", Step: "apply_configuration", Order: 2,
				Args: map[string]any{"settings": []any{map[string]any{"name": "LogicalProc", "value": "Enabled"}}}},
			{Interface: "deploy", Step: "erase_devices_metadata", Order: 1, Args: map[string]any{}}},
		Extra: map[string]any{"k": "v"}}
}

func testRunbooks(t *testing.T, s store.Store) {
	ctx := context.Background()
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	b := newRunbook("CUSTOM_B", t0)
	b.Owner = strp("proj-b")
	a := newRunbook("CUSTOM_A", t0.Add(time.Hour))
	a.Public, a.DisableRamdisk = true, true
	c := newRunbook("CUSTOM_C", t0.Add(-time.Hour))
	for _, x := range []*store.Runbook{b, a, c} {
		require.NoError(t, s.CreateRunbook(ctx, x))
	}
	assert.ErrorIs(t, s.CreateRunbook(ctx, newRunbook("CUSTOM_A", t0)), store.ErrDuplicateName)
	dupUUID := newRunbook("CUSTOM_D", t0)
	dupUUID.UUID = a.UUID
	assert.ErrorIs(t, s.CreateRunbook(ctx, dupUUID), store.ErrDuplicateUUID)

	byName, err := s.GetRunbook(ctx, "CUSTOM_A")
	require.NoError(t, err)
	assert.Equal(t, a.UUID, byName.UUID)
	assert.Equal(t, a.Steps, byName.Steps, "steps keep their order as written")
	assert.True(t, byName.Public)
	assert.True(t, byName.DisableRamdisk)
	assert.Nil(t, byName.Owner)
	assert.True(t, a.CreatedAt.Equal(byName.CreatedAt))
	byUUID, err := s.GetRunbook(ctx, b.UUID)
	require.NoError(t, err)
	assert.Equal(t, "CUSTOM_B", byUUID.Name)
	require.NotNil(t, byUUID.Owner)
	assert.Equal(t, "proj-b", *byUUID.Owner)
	_, err = s.GetRunbook(ctx, "CUSTOM_NOPE")
	assert.ErrorIs(t, err, store.ErrNotFound)

	names := func(l []*store.Runbook) []string {
		var out []string
		for _, x := range l {
			out = append(out, x.Name)
		}
		return out
	}
	list := func(f store.RunbookFilter, p store.Page) []string {
		t.Helper()
		l, err := s.ListRunbooks(ctx, f, p)
		require.NoError(t, err)
		return names(l)
	}
	none := store.RunbookFilter{}
	assert.Equal(t, []string{"CUSTOM_B", "CUSTOM_A", "CUSTOM_C"}, list(none, store.Page{}), "by id")
	assert.Equal(t, []string{"CUSTOM_C", "CUSTOM_B", "CUSTOM_A"}, list(none, store.Page{SortKey: "name", Desc: true}))
	byTime, err := s.ListRunbooks(ctx, none, store.Page{SortKey: "created_at", Limit: 2})
	require.NoError(t, err)
	assert.Equal(t, []string{"CUSTOM_C", "CUSTOM_B"}, names(byTime))
	assert.Equal(t, []string{"CUSTOM_A"}, list(none, store.Page{SortKey: "created_at", Limit: 2, Marker: byTime[1].UUID}))
	// owner sorts NULL first, public false before true
	assert.Equal(t, []string{"CUSTOM_A", "CUSTOM_C", "CUSTOM_B"}, list(none, store.Page{SortKey: "owner"}))
	assert.Equal(t, []string{"CUSTOM_B", "CUSTOM_C", "CUSTOM_A"}, list(none, store.Page{SortKey: "public"}))
	assert.Equal(t, []string{"CUSTOM_A", "CUSTOM_C", "CUSTOM_B"}, list(none, store.Page{SortKey: "disable_ramdisk", Desc: true}), "ties by id, descending too")
	_, err = s.ListRunbooks(ctx, none, store.Page{Marker: uuid.NewString()})
	assert.ErrorIs(t, err, store.ErrNotFound, "an unknown marker")

	assert.Equal(t, []string{"CUSTOM_B", "CUSTOM_A"}, list(store.RunbookFilter{Project: strp("proj-b")}, store.Page{}), "own and public")
	assert.Equal(t, []string{"CUSTOM_A"}, list(store.RunbookFilter{Project: strp("")}, store.Page{}), "public only")

	now := t0.Add(2 * time.Hour)
	a.Name, a.UpdatedAt, a.Public, a.Owner = "CUSTOM_Z", &now, false, strp("proj-z")
	a.Steps = a.Steps[:1]
	a.Steps[0].Order = 0
	require.NoError(t, s.UpdateRunbook(ctx, a))
	got, err := s.GetRunbook(ctx, "CUSTOM_Z")
	require.NoError(t, err)
	require.Len(t, got.Steps, 1)
	assert.Equal(t, 0, got.Steps[0].Order)
	assert.False(t, got.Public)
	require.NotNil(t, got.UpdatedAt)
	assert.True(t, now.Equal(*got.UpdatedAt))
	assert.Equal(t, []string{"CUSTOM_B"}, list(store.RunbookFilter{Project: strp("proj-b")}, store.Page{}), "the column follows the update")
	a.Name = "CUSTOM_B"
	assert.ErrorIs(t, s.UpdateRunbook(ctx, a), store.ErrDuplicateName)

	require.NoError(t, s.DeleteRunbook(ctx, a.UUID))
	assert.ErrorIs(t, s.DeleteRunbook(ctx, a.UUID), store.ErrNotFound)
	assert.ErrorIs(t, s.UpdateRunbook(ctx, newRunbook("CUSTOM_Q", t0)), store.ErrNotFound)
}
