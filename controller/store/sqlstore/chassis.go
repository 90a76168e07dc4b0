package sqlstore

import (
	"context"

	"github.com/anvil-metal/anvil/controller/store"
)

// Chassis have a table of their own, which nodes.chassis_uuid refers to
// (migration 10); volume connectors and targets are node resources
// (resources.go).
var chassisKind = &tableKind[store.Chassis]{
	table: "chassis", what: "chassis", revised: true,
	uuid:  func(c *store.Chassis) string { return c.UUID },
	setID: func(c *store.Chassis, id int64) { c.ID = id },
	created: func(s *Store, c *store.Chassis) []column {
		return []column{{"created_at", s.d.stamp(&c.CreatedAt)}}
	},
	// the foreign key (a trigger on SQLite) refuses a chassis nodes are
	// in at the moment of the delete
	inUse: store.ErrNotEmpty,
}

// CreateChassis inserts a chassis.
func (s *Store) CreateChassis(ctx context.Context, c *store.Chassis) error {
	return chassisKind.create(ctx, s, c)
}

// GetChassis finds a chassis by uuid.
func (s *Store) GetChassis(ctx context.Context, uuid string) (*store.Chassis, error) {
	return chassisKind.get(ctx, s, uuid)
}

// ListChassis lists chassis.
func (s *Store) ListChassis(ctx context.Context, p store.Page) ([]*store.Chassis, error) {
	return chassisKind.list(ctx, s, nil, nil, p)
}

// UpdateChassis writes a chassis.
func (s *Store) UpdateChassis(ctx context.Context, c *store.Chassis) error {
	return chassisKind.update(ctx, s, c)
}

// DeleteChassis removes a chassis no node is in.
func (s *Store) DeleteChassis(ctx context.Context, uuid string) error {
	return chassisKind.delete(ctx, s, uuid)
}
