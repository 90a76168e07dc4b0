package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/controller/store"
)

func testControllerRecords(t *testing.T, s store.Store) {
	ctx := context.Background()
	a := store.Controller{Holder: "ctl-a/1", Hostname: "ctl-a", Drivers: []string{"fake-hardware", "ipmi"}}
	require.NoError(t, s.RecordController(ctx, a, time.Hour))
	require.NoError(t, s.RecordController(ctx, store.Controller{Holder: "ctl-b/2", Hostname: "ctl-b"}, 20*time.Millisecond))
	require.NoError(t, s.RecordController(ctx, store.Controller{Holder: "ctl-c/3"}, time.Hour))
	first, err := s.ListControllers(ctx)
	require.NoError(t, err)
	require.Len(t, first, 3)
	time.Sleep(50 * time.Millisecond)
	require.NoError(t, s.RecordController(ctx, a, time.Hour), "re-recording renews")

	got, err := s.ListControllers(ctx)
	require.NoError(t, err)
	require.Len(t, got, 3)
	assert.Equal(t, "ctl-a", got[0].Hostname)
	assert.Equal(t, []string{"fake-hardware", "ipmi"}, got[0].Drivers)
	assert.True(t, got[0].Alive)
	assert.True(t, got[0].CreatedAt.Equal(first[0].CreatedAt), "the first registration is kept")
	require.NotNil(t, got[0].UpdatedAt)
	assert.True(t, got[0].UpdatedAt.After(*first[0].UpdatedAt), "the last registration moves")
	assert.False(t, got[1].Alive, "an expired registration is listed, not alive")
	assert.Equal(t, "ctl-c", got[2].Hostname, "a registration without a host name is named by its holder's host")
	assert.True(t, got[2].Alive)
	live, err := s.LiveControllers(ctx)
	require.NoError(t, err)
	assert.Equal(t, []string{"ctl-a/1", "ctl-c/3"}, live)
	require.NoError(t, s.UnregisterController(ctx, "ctl-a/1"))
	got, err = s.ListControllers(ctx)
	require.NoError(t, err)
	assert.Len(t, got, 2)

	// A registration without what the controller runs still has its
	// times.
	require.NoError(t, s.RecordController(ctx, store.Controller{Holder: "ctl-d/4"}, time.Hour))
	got, err = s.ListControllers(ctx)
	require.NoError(t, err)
	require.Len(t, got, 3)
	assert.Equal(t, "ctl-d", got[2].Hostname)
	assert.False(t, got[2].CreatedAt.IsZero(), "registered at a time, as a recorded controller")
	assert.NotNil(t, got[2].UpdatedAt)
}
