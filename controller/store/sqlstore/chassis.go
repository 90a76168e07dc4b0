package sqlstore

import (
	"context"
	"database/sql"
	stdjson "encoding/json"
	"errors"
	"fmt"

	"github.com/anvil-metal/anvil/controller/store"
)

// Chassis have a table of their own, which nodes.chassis_uuid refers to
// (migration 10); volume connectors and targets are node resources
// (resources.go).

// CreateChassis inserts a chassis.
func (s *Store) CreateChassis(ctx context.Context, c *store.Chassis) error {
	data, err := stdjson.Marshal(c)
	if err != nil {
		return fmt.Errorf("encode chassis %s: %w", c.UUID, err)
	}
	err = s.queryRow(ctx, s.w, `INSERT INTO chassis (uuid, revision, created_at, data) VALUES ($1, 1, $2, $3) RETURNING id`,
		c.UUID, s.d.stamp(&c.CreatedAt), data).Scan(&c.ID)
	return s.mapErr(err, "create chassis "+c.UUID)
}

// GetChassis finds a chassis by uuid.
func (s *Store) GetChassis(ctx context.Context, uuid string) (*store.Chassis, error) {
	c, err := scanResource(setChassisID)(s.queryRow(ctx, s.r, `SELECT id, revision, data FROM chassis WHERE uuid = $1`, uuid))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("chassis %s: %w", uuid, store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("get chassis %s: %w", uuid, err)
	}
	return c, nil
}

// ListChassis lists chassis.
func (s *Store) ListChassis(ctx context.Context, p store.Page) ([]*store.Chassis, error) {
	return listPage(ctx, s, "chassis", "id, revision, data", nil, nil, p, scanResource(setChassisID))
}

// UpdateChassis writes a chassis.
func (s *Store) UpdateChassis(ctx context.Context, c *store.Chassis) error {
	data, err := stdjson.Marshal(c)
	if err != nil {
		return fmt.Errorf("encode chassis %s: %w", c.UUID, err)
	}
	res, err := s.exec(ctx, s.w, `UPDATE chassis SET revision = revision + 1, data = $1 WHERE uuid = $2`, data, c.UUID)
	if err != nil {
		return s.mapErr(err, "update chassis "+c.UUID)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("chassis %s: %w", c.UUID, store.ErrNotFound)
	}
	return nil
}

// DeleteChassis removes a chassis no node is in: the foreign key (a
// trigger on SQLite) refuses the others at the moment of the delete.
func (s *Store) DeleteChassis(ctx context.Context, uuid string) error {
	res, err := s.exec(ctx, s.w, `DELETE FROM chassis WHERE uuid = $1`, uuid)
	if err != nil {
		if s.d.missingParent(err) {
			return fmt.Errorf("delete chassis %s: %w", uuid, store.ErrNotEmpty)
		}
		return fmt.Errorf("delete chassis %s: %w", uuid, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("chassis %s: %w", uuid, store.ErrNotFound)
	}
	return nil
}

func setChassisID(c *store.Chassis, id, _ int64) { c.ID = id }
