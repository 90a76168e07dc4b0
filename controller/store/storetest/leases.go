package storetest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/controller/store"
)

const longTTL = time.Minute

func createNode(t *testing.T, s store.Store, name string) *store.Node {
	t.Helper()
	n := NewNode(name)
	require.NoError(t, s.CreateNode(context.Background(), n))
	return n
}

func testLeases(t *testing.T, s store.Store) {
	ctx := context.Background()
	n := createNode(t, s, "leased")

	ok, other, err := s.AcquireLease(ctx, n.UUID, "a", longTTL)
	require.NoError(t, err)
	assert.True(t, ok)
	assert.Empty(t, other, "the lease was free")

	ok, other, err = s.AcquireLease(ctx, n.UUID, "a", longTTL)
	require.NoError(t, err)
	assert.True(t, ok, "the holder re-acquires its own lease")
	assert.Empty(t, other)

	ok, other, err = s.AcquireLease(ctx, n.UUID, "b", longTTL)
	require.NoError(t, err)
	assert.False(t, ok, "a live lease is not taken by another holder")
	assert.Equal(t, "a", other, "the refusal names the holder")

	held, err := s.RenewLeases(ctx, "a", longTTL)
	require.NoError(t, err)
	assert.Equal(t, []string{n.UUID}, held)
	held, err = s.RenewLeases(ctx, "b", longTTL)
	require.NoError(t, err)
	assert.Empty(t, held)

	require.NoError(t, s.ReleaseLease(ctx, n.UUID, "b"), "releasing a lease one does not hold is a no-op")
	ok, _, err = s.AcquireLease(ctx, n.UUID, "b", longTTL)
	require.NoError(t, err)
	assert.False(t, ok)

	require.NoError(t, s.ReleaseLease(ctx, n.UUID, "a"))
	ok, _, err = s.AcquireLease(ctx, n.UUID, "b", longTTL)
	require.NoError(t, err)
	assert.True(t, ok, "a released lease is free")

	m := createNode(t, s, "leased-2")
	ok, _, err = s.AcquireLease(ctx, m.UUID, "b", longTTL)
	require.NoError(t, err)
	require.True(t, ok)
	require.NoError(t, s.ReleaseLeases(ctx, "b"))
	held, err = s.RenewLeases(ctx, "b", longTTL)
	require.NoError(t, err)
	assert.Empty(t, held, "ReleaseLeases ends all of the holder's leases")

	ok, _, err = s.AcquireLease(ctx, m.UUID, "c", longTTL)
	require.NoError(t, err)
	require.True(t, ok)
	require.NoError(t, s.ClearLeases(ctx))
	ok, _, err = s.AcquireLease(ctx, m.UUID, "d", longTTL)
	require.NoError(t, err)
	assert.True(t, ok, "ClearLeases ends everyone's leases")

	require.NoError(t, s.DeleteNode(ctx, m))
	held, err = s.RenewLeases(ctx, "d", longTTL)
	require.NoError(t, err)
	assert.Empty(t, held, "deleting a node ends its lease")
}

// testLeaseExpiry waits out a short lease: an expired lease is neither
// renewed nor kept from another holder.
func testLeaseExpiry(t *testing.T, s store.Store) {
	ctx := context.Background()
	n := createNode(t, s, "expiring")
	const ttl = 50 * time.Millisecond
	ok, _, err := s.AcquireLease(ctx, n.UUID, "a", ttl)
	require.NoError(t, err)
	require.True(t, ok)
	time.Sleep(2 * ttl)

	held, err := s.RenewLeases(ctx, "a", longTTL)
	require.NoError(t, err)
	assert.Empty(t, held, "an expired lease is lost, not renewed")
	ok, other, err := s.AcquireLease(ctx, n.UUID, "b", longTTL)
	require.NoError(t, err)
	assert.True(t, ok, "an expired lease is taken over")
	assert.Equal(t, "a", other, "naming the holder whose lease expired")
	ok, other, err = s.AcquireLease(ctx, n.UUID, "a", longTTL)
	require.NoError(t, err)
	assert.False(t, ok)
	assert.Equal(t, "b", other)
}

// testLeaseFence: a write under a lease lands only while the lease is the
// writer's; a plain write (an API request) is not fenced.
func testLeaseFence(t *testing.T, s store.Store) {
	ctx := context.Background()
	n := createNode(t, s, "fenced")
	asA := store.WithLease(ctx, "a")

	n.ProvisionState = "manageable"
	err := s.UpdateNode(asA, n)
	require.ErrorIs(t, err, store.ErrLeaseLost, "no lease, no fenced write")
	got, err := s.GetNode(ctx, n.UUID)
	require.NoError(t, err)
	assert.Equal(t, "enroll", got.ProvisionState)

	ok, _, err := s.AcquireLease(ctx, n.UUID, "a", longTTL)
	require.NoError(t, err)
	require.True(t, ok)
	require.NoError(t, s.UpdateNode(asA, n, &store.Event{UUID: NewNode("").UUID, NodeUUID: n.UUID,
		CreatedAt: time.Now().UTC(), Severity: "INFO", EventType: "provisioning", Event: "under lease"}))

	// Another controller takes the node over (here: the lease is released
	// and re-acquired, as after an expiry).
	require.NoError(t, s.ReleaseLease(ctx, n.UUID, "a"))
	ok, _, err = s.AcquireLease(ctx, n.UUID, "b", longTTL)
	require.NoError(t, err)
	require.True(t, ok)

	n.ProvisionState = "cleaning"
	err = s.UpdateNode(asA, n, &store.Event{UUID: NewNode("").UUID, NodeUUID: n.UUID,
		CreatedAt: time.Now().UTC(), Severity: "INFO", EventType: "provisioning", Event: "after losing the lease"})
	require.ErrorIs(t, err, store.ErrLeaseLost)
	got, err = s.GetNode(ctx, n.UUID)
	require.NoError(t, err)
	assert.Equal(t, "manageable", got.ProvisionState, "the fenced write did not land")
	events, err := s.ListEvents(ctx, n.UUID, 0)
	require.NoError(t, err)
	require.Len(t, events, 1, "nor did its event")
	assert.Equal(t, "under lease", events[0].Event)

	// A stale revision under a live lease is still a plain conflict.
	n.Revision = got.Revision - 1
	err = s.UpdateNode(store.WithLease(ctx, "b"), n)
	require.ErrorIs(t, err, store.ErrConflict)
	require.NoError(t, s.UpdateNode(ctx, got), "unfenced writes ignore leases")
}

// testLeaseRace: many holders race for one free node; exactly one wins.
func testLeaseRace(t *testing.T, s store.Store) {
	ctx := context.Background()
	for round := 0; round < 5; round++ {
		n := createNode(t, s, "")
		const racers = 8
		var wg sync.WaitGroup
		var mu sync.Mutex
		winners := 0
		for i := 0; i < racers; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ok, _, err := s.AcquireLease(ctx, n.UUID, string(rune('a'+i)), longTTL)
				assert.NoError(t, err)
				if ok {
					mu.Lock()
					winners++
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		assert.Equal(t, 1, winners, "round %d", round)
	}
}

func testUnleasedWork(t *testing.T, s store.Store) {
	ctx := context.Background()
	idle := createNode(t, s, "idle")
	busy := createNode(t, s, "busy")
	busy.Reservation = strp("ctl-1")
	busy.ProvisionState = "cleaning"
	require.NoError(t, s.UpdateNode(ctx, busy))
	waiting := createNode(t, s, "waiting")
	waiting.ProvisionState = "clean wait"
	require.NoError(t, s.UpdateNode(ctx, waiting))
	waits := []string{"clean wait", "wait call-back"}

	got, err := s.UnleasedWork(ctx, waits, 100)
	require.NoError(t, err)
	assert.ElementsMatch(t, []string{busy.UUID, waiting.UUID}, got)
	assert.NotContains(t, got, idle.UUID)

	ok, _, err := s.AcquireLease(ctx, busy.UUID, "ctl-1", longTTL)
	require.NoError(t, err)
	require.True(t, ok)
	got, err = s.UnleasedWork(ctx, waits, 100)
	require.NoError(t, err)
	assert.Equal(t, []string{waiting.UUID}, got, "a live lease means someone works on it")

	ok, _, err = s.AcquireLease(ctx, waiting.UUID, "ctl-2", 20*time.Millisecond)
	require.NoError(t, err)
	require.True(t, ok)
	time.Sleep(60 * time.Millisecond)
	got, err = s.UnleasedWork(ctx, waits, 100)
	require.NoError(t, err)
	assert.Equal(t, []string{waiting.UUID}, got, "an expired lease counts as none")

	got, err = s.UnleasedWork(ctx, waits, 0)
	require.NoError(t, err)
	assert.Empty(t, got, "limit bounds the answer")
}

func testControllers(t *testing.T, s store.Store) {
	ctx := context.Background()
	live, err := s.LiveControllers(ctx)
	require.NoError(t, err)
	assert.Empty(t, live)
	require.NoError(t, s.RecordController(ctx, store.Controller{Holder: "b/2"}, longTTL))
	require.NoError(t, s.RecordController(ctx, store.Controller{Holder: "a/1"}, longTTL))
	require.NoError(t, s.RecordController(ctx, store.Controller{Holder: "c/3"}, 20*time.Millisecond))
	require.NoError(t, s.RecordController(ctx, store.Controller{Holder: "a/1"}, longTTL), "re-recording renews")
	time.Sleep(60 * time.Millisecond)
	live, err = s.LiveControllers(ctx)
	require.NoError(t, err)
	assert.Equal(t, []string{"a/1", "b/2"}, live, "sorted, expired ones left out")
	require.NoError(t, s.UnregisterController(ctx, "a/1"))
	live, err = s.LiveControllers(ctx)
	require.NoError(t, err)
	assert.Equal(t, []string{"b/2"}, live)
}
