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

// testChassis: chassis CRUD and paging; a node's chassis must exist, and a
// chassis with nodes cannot be deleted (the database refuses, not only
// the API, so no race leaves a node in a deleted chassis).
func testChassis(t *testing.T, s store.Store) {
	ctx := context.Background()
	var made []string
	for i := range 3 {
		c := &store.Chassis{UUID: uuid.NewString(), Description: strp("rack " + string(rune('a'+i))),
			Extra: map[string]any{"i": float64(i)}, CreatedAt: time.Now().UTC().Add(time.Duration(-i) * time.Hour)}
		require.NoError(t, s.CreateChassis(ctx, c))
		assert.NotZero(t, c.ID)
		made = append(made, c.UUID)
	}
	err := s.CreateChassis(ctx, &store.Chassis{UUID: made[0], CreatedAt: time.Now().UTC()})
	assert.ErrorIs(t, err, store.ErrDuplicateUUID)

	c, err := s.GetChassis(ctx, made[1])
	require.NoError(t, err)
	assert.Equal(t, "rack b", *c.Description)
	c.Description = nil
	c.Extra = map[string]any{"x": "y"}
	now := time.Now().UTC()
	c.UpdatedAt = &now
	require.NoError(t, s.UpdateChassis(ctx, c))
	got, err := s.GetChassis(ctx, made[1])
	require.NoError(t, err)
	assert.Nil(t, got.Description)
	assert.Equal(t, map[string]any{"x": "y"}, got.Extra)
	_, err = s.GetChassis(ctx, uuid.NewString())
	assert.ErrorIs(t, err, store.ErrNotFound)
	assert.ErrorIs(t, s.UpdateChassis(ctx, &store.Chassis{UUID: uuid.NewString()}), store.ErrNotFound)

	page, err := s.ListChassis(ctx, store.Page{Limit: 2})
	require.NoError(t, err)
	require.Len(t, page, 2)
	assert.Equal(t, made[:2], []string{page[0].UUID, page[1].UUID})
	rest, err := s.ListChassis(ctx, store.Page{Limit: 2, Marker: page[1].UUID})
	require.NoError(t, err)
	require.Len(t, rest, 1)
	assert.Equal(t, made[2], rest[0].UUID)
	byAge, err := s.ListChassis(ctx, store.Page{SortKey: "created_at"})
	require.NoError(t, err)
	require.Len(t, byAge, 3)
	assert.Equal(t, []string{made[2], made[1], made[0]}, []string{byAge[0].UUID, byAge[1].UUID, byAge[2].UUID})

	// a node's chassis must exist, on create and on update
	n := NewNode("in-chassis")
	n.ChassisUUID = strp(uuid.NewString())
	assert.ErrorIs(t, s.CreateNode(ctx, n), store.ErrNotFound)
	n.ChassisUUID = strp(made[0])
	require.NoError(t, s.CreateNode(ctx, n))
	_, err = store.MutateNode(ctx, s, n.UUID, func(n *store.Node) error { n.ChassisUUID = strp(uuid.NewString()); return nil })
	assert.ErrorIs(t, err, store.ErrNotFound)
	filtered, err := s.ListNodes(ctx, store.NodeFilter{ChassisUUID: strp(made[0])}, store.Page{})
	require.NoError(t, err)
	require.Len(t, filtered, 1)
	assert.Equal(t, n.UUID, filtered[0].UUID)

	// a chassis with nodes stays; without, it goes
	assert.ErrorIs(t, s.DeleteChassis(ctx, made[0]), store.ErrNotEmpty)
	_, err = store.MutateNode(ctx, s, n.UUID, func(n *store.Node) error { n.ChassisUUID = nil; return nil })
	require.NoError(t, err)
	require.NoError(t, s.DeleteChassis(ctx, made[0]))
	assert.ErrorIs(t, s.DeleteChassis(ctx, made[0]), store.ErrNotFound)
}

// testVolumes: volume connectors and targets, their uniqueness rules, and
// that deleting a node deletes them.
func testVolumes(t *testing.T, s store.Store) {
	ctx := context.Background()
	n, m := NewNode("vol-1"), NewNode("vol-2")
	require.NoError(t, s.CreateNode(ctx, n))
	require.NoError(t, s.CreateNode(ctx, m))
	now := time.Now().UTC()
	c := &store.VolumeConnector{UUID: uuid.NewString(), NodeUUID: n.UUID, Type: "iqn", ConnectorID: "iqn.2026-11.org.example:n1", CreatedAt: now}
	require.NoError(t, s.CreateVolumeConnector(ctx, c))
	dup := &store.VolumeConnector{UUID: uuid.NewString(), NodeUUID: m.UUID, Type: "iqn", ConnectorID: c.ConnectorID, CreatedAt: now}
	assert.ErrorIs(t, s.CreateVolumeConnector(ctx, dup), store.ErrDuplicateAddr, "(type, connector_id) is unique")
	dup.Type = "ip"
	require.NoError(t, s.CreateVolumeConnector(ctx, dup), "the same id of another type is another connector")
	orphan := &store.VolumeConnector{UUID: uuid.NewString(), NodeUUID: uuid.NewString(), Type: "mac", ConnectorID: "x", CreatedAt: now}
	assert.ErrorIs(t, s.CreateVolumeConnector(ctx, orphan), store.ErrNotFound)

	t0 := &store.VolumeTarget{UUID: uuid.NewString(), NodeUUID: n.UUID, VolumeType: "iscsi", VolumeID: "v0", BootIndex: 0,
		Properties: map[string]any{"target_lun": float64(0)}, CreatedAt: now}
	require.NoError(t, s.CreateVolumeTarget(ctx, t0))
	t1 := &store.VolumeTarget{UUID: uuid.NewString(), NodeUUID: n.UUID, VolumeType: "iscsi", VolumeID: "v1", BootIndex: 0, CreatedAt: now}
	assert.ErrorIs(t, s.CreateVolumeTarget(ctx, t1), store.ErrDuplicateName, "a boot index is unique per node")
	t1.NodeUUID = m.UUID
	require.NoError(t, s.CreateVolumeTarget(ctx, t1), "the same boot index on another node")
	t1.BootIndex = 1
	require.NoError(t, s.UpdateVolumeTarget(ctx, t1))
	got, err := s.GetVolumeTarget(ctx, t1.UUID)
	require.NoError(t, err)
	assert.Equal(t, 1, got.BootIndex)

	cs, err := s.ListVolumeConnectors(ctx, store.ResourceFilter{NodeUUID: &n.UUID}, store.Page{})
	require.NoError(t, err)
	require.Len(t, cs, 1)
	assert.Equal(t, c.UUID, cs[0].UUID)
	ts, err := s.ListVolumeTargets(ctx, store.ResourceFilter{}, store.Page{SortKey: "uuid", Limit: 1})
	require.NoError(t, err)
	require.Len(t, ts, 1)

	require.NoError(t, s.DeleteVolumeConnector(ctx, dup.UUID))
	assert.ErrorIs(t, s.DeleteVolumeConnector(ctx, dup.UUID), store.ErrNotFound)
	node, err := s.GetNode(ctx, n.UUID)
	require.NoError(t, err)
	require.NoError(t, s.DeleteNode(ctx, node))
	_, err = s.GetVolumeConnector(ctx, c.UUID)
	assert.ErrorIs(t, err, store.ErrNotFound, "the node's connector went with it")
	_, err = s.GetVolumeTarget(ctx, t0.UUID)
	assert.ErrorIs(t, err, store.ErrNotFound, "the node's target went with it")
}
