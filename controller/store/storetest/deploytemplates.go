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

func newTemplate(name string, at time.Time) *store.DeployTemplate {
	return &store.DeployTemplate{UUID: uuid.NewString(), Name: name, CreatedAt: at,
		Steps: []store.TemplateStep{{Interface: "bios", Step: "apply_configuration", Priority: 150,
			Args: map[string]any{"settings": []any{map[string]any{"name": "LogicalProc", "value": "Enabled"}}}}},
		Extra: map[string]any{"k": "v"}}
}

func testDeployTemplates(t *testing.T, s store.Store) {
	ctx := context.Background()
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	b := newTemplate("CUSTOM_B", t0)
	a := newTemplate("CUSTOM_A", t0.Add(time.Hour))
	c := newTemplate("CUSTOM_C", t0.Add(-time.Hour))
	for _, x := range []*store.DeployTemplate{b, a, c} {
		require.NoError(t, s.CreateDeployTemplate(ctx, x))
	}
	assert.ErrorIs(t, s.CreateDeployTemplate(ctx, newTemplate("CUSTOM_A", t0)), store.ErrDuplicateName)
	dupUUID := newTemplate("CUSTOM_D", t0)
	dupUUID.UUID = a.UUID
	assert.ErrorIs(t, s.CreateDeployTemplate(ctx, dupUUID), store.ErrDuplicateUUID)

	byName, err := s.GetDeployTemplate(ctx, "CUSTOM_A")
	require.NoError(t, err)
	assert.Equal(t, a.UUID, byName.UUID)
	assert.Equal(t, a.Steps, byName.Steps)
	assert.True(t, a.CreatedAt.Equal(byName.CreatedAt))
	byUUID, err := s.GetDeployTemplate(ctx, a.UUID)
	require.NoError(t, err)
	assert.Equal(t, "CUSTOM_A", byUUID.Name)
	_, err = s.GetDeployTemplate(ctx, "CUSTOM_NOPE")
	assert.ErrorIs(t, err, store.ErrNotFound)

	names := func(l []*store.DeployTemplate) []string {
		var out []string
		for _, x := range l {
			out = append(out, x.Name)
		}
		return out
	}
	all, err := s.ListDeployTemplates(ctx, store.Page{})
	require.NoError(t, err)
	assert.Equal(t, []string{"CUSTOM_B", "CUSTOM_A", "CUSTOM_C"}, names(all), "by id")
	sorted, err := s.ListDeployTemplates(ctx, store.Page{SortKey: "name", Desc: true})
	require.NoError(t, err)
	assert.Equal(t, []string{"CUSTOM_C", "CUSTOM_B", "CUSTOM_A"}, names(sorted))
	byTime, err := s.ListDeployTemplates(ctx, store.Page{SortKey: "created_at", Limit: 2})
	require.NoError(t, err)
	assert.Equal(t, []string{"CUSTOM_C", "CUSTOM_B"}, names(byTime))
	next, err := s.ListDeployTemplates(ctx, store.Page{SortKey: "created_at", Limit: 2, Marker: byTime[1].UUID})
	require.NoError(t, err)
	assert.Equal(t, []string{"CUSTOM_A"}, names(next))
	_, err = s.ListDeployTemplates(ctx, store.Page{Marker: uuid.NewString()})
	assert.ErrorIs(t, err, store.ErrNotFound, "an unknown marker")

	named, err := s.DeployTemplatesNamed(ctx, []string{"CUSTOM_C", "CUSTOM_A", "CUSTOM_X"})
	require.NoError(t, err)
	assert.Equal(t, []string{"CUSTOM_A", "CUSTOM_C"}, names(named))
	none, err := s.DeployTemplatesNamed(ctx, nil)
	require.NoError(t, err)
	assert.Empty(t, none)

	now := t0.Add(2 * time.Hour)
	a.Name, a.UpdatedAt = "CUSTOM_Z", &now
	a.Steps[0].Priority = 0
	require.NoError(t, s.UpdateDeployTemplate(ctx, a))
	got, err := s.GetDeployTemplate(ctx, "CUSTOM_Z")
	require.NoError(t, err)
	assert.Equal(t, 0, got.Steps[0].Priority)
	require.NotNil(t, got.UpdatedAt)
	assert.True(t, now.Equal(*got.UpdatedAt))
	a.Name = "CUSTOM_B"
	assert.ErrorIs(t, s.UpdateDeployTemplate(ctx, a), store.ErrDuplicateName)

	require.NoError(t, s.DeleteDeployTemplate(ctx, a.UUID))
	assert.ErrorIs(t, s.DeleteDeployTemplate(ctx, a.UUID), store.ErrNotFound)
	missing := newTemplate("CUSTOM_Q", t0)
	assert.ErrorIs(t, s.UpdateDeployTemplate(ctx, missing), store.ErrNotFound)
}
