package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/anvil-metal/anvil/controller/store"
)

// Ports, portgroups and allocations share one table: they are small documents
// looked up by uuid, name, address or node, which is all the table indexes.
// revision is kept for future optimistic updates.

type resourceKeys struct {
	uuid, node string
	name, addr *string
}

func createResource(ctx context.Context, s *Store, kind string, k resourceKeys, v any) (int64, error) {
	data, err := json.Marshal(v)
	if err != nil {
		return 0, fmt.Errorf("encode %s %s: %w", kind, k.uuid, err)
	}
	res, err := s.w.ExecContext(ctx, `INSERT INTO resources (kind, uuid, node_uuid, name, address, revision, data)
		VALUES (?, ?, ?, ?, ?, 1, ?)`, kind, k.uuid, nullable(k.node), k.name, k.addr, data)
	if err != nil {
		return 0, mapErr(err, "create "+kind+" "+k.uuid)
	}
	return res.LastInsertId()
}

func updateResource(ctx context.Context, s *Store, kind string, k resourceKeys, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode %s %s: %w", kind, k.uuid, err)
	}
	res, err := s.w.ExecContext(ctx, `UPDATE resources SET node_uuid = ?, name = ?, address = ?, revision = revision + 1,
		data = ? WHERE kind = ? AND uuid = ?`, nullable(k.node), k.name, k.addr, data, kind, k.uuid)
	if err != nil {
		return mapErr(err, "update "+kind+" "+k.uuid)
	}
	if c, _ := res.RowsAffected(); c == 0 {
		return fmt.Errorf("%s %s: %w", kind, k.uuid, store.ErrNotFound)
	}
	return nil
}

func deleteResource(ctx context.Context, s *Store, kind, uuid string) error {
	res, err := s.w.ExecContext(ctx, `DELETE FROM resources WHERE kind = ? AND uuid = ?`, kind, uuid)
	if err != nil {
		return fmt.Errorf("delete %s %s: %w", kind, uuid, err)
	}
	if c, _ := res.RowsAffected(); c == 0 {
		return fmt.Errorf("%s %s: %w", kind, uuid, store.ErrNotFound)
	}
	return nil
}

func nullable(s string) any {
	if s == "" {
		return nil
	}
	return s
}

func scanResource[T any](setID func(*T, int64)) func(interface{ Scan(...any) error }) (*T, error) {
	return func(sc interface{ Scan(...any) error }) (*T, error) {
		var id int64
		var data []byte
		if err := sc.Scan(&id, &data); err != nil {
			return nil, err
		}
		v := new(T)
		if err := json.Unmarshal(data, v); err != nil {
			return nil, fmt.Errorf("decode resource %d: %w", id, err)
		}
		setID(v, id)
		return v, nil
	}
}

// getResource finds by uuid, or by name when byName.
func getResource[T any](ctx context.Context, s *Store, kind, ident string, byName bool, setID func(*T, int64)) (*T, error) {
	q := `SELECT id, data FROM resources WHERE kind = ?1 AND uuid = ?2`
	if byName {
		q = `SELECT id, data FROM resources WHERE kind = ?1 AND (uuid = ?2 OR name = ?2) ORDER BY uuid = ?2 DESC LIMIT 1`
	}
	v, err := scanResource(setID)(s.r.QueryRowContext(ctx, q, kind, ident))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("%s %s: %w", kind, ident, store.ErrNotFound)
	}
	return v, err
}

func listResources[T any](ctx context.Context, s *Store, kind string, f store.ResourceFilter, p store.Page, setID func(*T, int64)) ([]*T, error) {
	where := []string{"kind = ?"}
	args := []any{kind}
	if f.NodeUUID != nil {
		where, args = append(where, "node_uuid = ?"), append(args, *f.NodeUUID)
	}
	if f.Address != nil {
		where, args = append(where, "address = ?"), append(args, *f.Address)
	}
	if f.Name != nil {
		where, args = append(where, "name = ?"), append(args, *f.Name)
	}
	return listPage(ctx, s, "resources", "id, data", where, args, p, scanResource(setID))
}

func setPortID(p *store.Port, id int64)             { p.ID = id }
func setPortgroupID(p *store.Portgroup, id int64)   { p.ID = id }
func setAllocationID(a *store.Allocation, id int64) { a.ID = id }

func portKeys(p *store.Port) resourceKeys {
	return resourceKeys{uuid: p.UUID, node: p.NodeUUID, name: p.Name, addr: &p.Address}
}

func portgroupKeys(p *store.Portgroup) resourceKeys {
	return resourceKeys{uuid: p.UUID, node: p.NodeUUID, name: p.Name, addr: p.Address}
}

func allocationKeys(a *store.Allocation) resourceKeys {
	k := resourceKeys{uuid: a.UUID, name: a.Name}
	if a.NodeUUID != nil {
		k.node = *a.NodeUUID
	}
	return k
}

// CreatePort inserts a port.
func (s *Store) CreatePort(ctx context.Context, p *store.Port) (err error) {
	p.ID, err = createResource(ctx, s, "port", portKeys(p), p)
	return err
}

// GetPort finds a port by uuid.
func (s *Store) GetPort(ctx context.Context, uuid string) (*store.Port, error) {
	return getResource(ctx, s, "port", uuid, false, setPortID)
}

// ListPorts lists ports.
func (s *Store) ListPorts(ctx context.Context, f store.ResourceFilter, p store.Page) ([]*store.Port, error) {
	return listResources(ctx, s, "port", f, p, setPortID)
}

// UpdatePort writes a port.
func (s *Store) UpdatePort(ctx context.Context, p *store.Port) error {
	return updateResource(ctx, s, "port", portKeys(p), p)
}

// DeletePort removes a port.
func (s *Store) DeletePort(ctx context.Context, uuid string) error {
	return deleteResource(ctx, s, "port", uuid)
}

// CreatePortgroup inserts a portgroup.
func (s *Store) CreatePortgroup(ctx context.Context, p *store.Portgroup) (err error) {
	p.ID, err = createResource(ctx, s, "portgroup", portgroupKeys(p), p)
	return err
}

// GetPortgroup finds a portgroup by uuid or name.
func (s *Store) GetPortgroup(ctx context.Context, ident string) (*store.Portgroup, error) {
	return getResource(ctx, s, "portgroup", ident, true, setPortgroupID)
}

// ListPortgroups lists portgroups.
func (s *Store) ListPortgroups(ctx context.Context, f store.ResourceFilter, p store.Page) ([]*store.Portgroup, error) {
	return listResources(ctx, s, "portgroup", f, p, setPortgroupID)
}

// UpdatePortgroup writes a portgroup.
func (s *Store) UpdatePortgroup(ctx context.Context, p *store.Portgroup) error {
	return updateResource(ctx, s, "portgroup", portgroupKeys(p), p)
}

// DeletePortgroup removes a portgroup.
func (s *Store) DeletePortgroup(ctx context.Context, uuid string) error {
	return deleteResource(ctx, s, "portgroup", uuid)
}

// CreateAllocation inserts an allocation.
func (s *Store) CreateAllocation(ctx context.Context, a *store.Allocation) (err error) {
	a.ID, err = createResource(ctx, s, "allocation", allocationKeys(a), a)
	return err
}

// GetAllocation finds an allocation by uuid or name.
func (s *Store) GetAllocation(ctx context.Context, ident string) (*store.Allocation, error) {
	return getResource(ctx, s, "allocation", ident, true, setAllocationID)
}

// ListAllocations lists allocations.
func (s *Store) ListAllocations(ctx context.Context, f store.ResourceFilter, p store.Page) ([]*store.Allocation, error) {
	return listResources(ctx, s, "allocation", f, p, setAllocationID)
}

// UpdateAllocation writes an allocation.
func (s *Store) UpdateAllocation(ctx context.Context, a *store.Allocation) error {
	return updateResource(ctx, s, "allocation", allocationKeys(a), a)
}

// DeleteAllocation removes an allocation.
func (s *Store) DeleteAllocation(ctx context.Context, uuid string) error {
	return deleteResource(ctx, s, "allocation", uuid)
}

// AppendEvent adds an entry to a node's history.
func (s *Store) AppendEvent(ctx context.Context, e *store.Event) error {
	return appendEvent(ctx, s.w, e)
}

// AppendEvents adds history entries in one transaction, in order: a bulk
// load (an import) pays one commit per batch instead of one per entry.
func (s *Store) AppendEvents(ctx context.Context, events []*store.Event) error {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("append events: %w", err)
	}
	defer tx.Rollback()
	for _, e := range events {
		if err := appendEvent(ctx, tx, e); err != nil {
			return err
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("append events: %w", err)
	}
	return nil
}

type execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

func appendEvent(ctx context.Context, db execer, e *store.Event) error {
	data, err := json.Marshal(e)
	if err != nil {
		return fmt.Errorf("encode event: %w", err)
	}
	_, err = db.ExecContext(ctx, `INSERT INTO events (uuid, node_uuid, created_at, data) VALUES (?, ?, ?, ?)`,
		e.UUID, e.NodeUUID, fmtTime(&e.CreatedAt), data)
	return mapErr(err, "append event")
}

// ListEvents returns a node's history, oldest first; limit > 0 keeps the
// newest limit entries.
func (s *Store) ListEvents(ctx context.Context, nodeUUID string, limit int) ([]*store.Event, error) {
	q := `SELECT data FROM (SELECT id, data FROM events WHERE node_uuid = ? ORDER BY id DESC`
	if limit > 0 {
		q += fmt.Sprintf(" LIMIT %d", limit)
	}
	q += `) ORDER BY id ASC`
	rows, err := s.r.QueryContext(ctx, q, nodeUUID)
	if err != nil {
		return nil, fmt.Errorf("list events: %w", err)
	}
	defer rows.Close()
	var out []*store.Event
	for rows.Next() {
		var data []byte
		if err := rows.Scan(&data); err != nil {
			return nil, err
		}
		e := &store.Event{}
		if err := json.Unmarshal(data, e); err != nil {
			return nil, fmt.Errorf("decode event: %w", err)
		}
		out = append(out, e)
	}
	return out, rows.Err()
}

// PutInventory stores (replaces) a node's inventory document.
func (s *Store) PutInventory(ctx context.Context, nodeUUID string, inventory []byte) error {
	if !json.Valid(inventory) {
		return fmt.Errorf("inventory of node %s is not valid JSON", nodeUUID)
	}
	_, err := s.w.ExecContext(ctx, `INSERT INTO resources (kind, uuid, node_uuid, revision, data)
		VALUES ('inventory', ?1, ?2, 1, ?3)
		ON CONFLICT(uuid) DO UPDATE SET data = excluded.data, revision = revision + 1`, "inventory-"+nodeUUID, nodeUUID, inventory)
	if err != nil {
		return fmt.Errorf("store inventory of node %s: %w", nodeUUID, err)
	}
	return nil
}

// GetInventory returns a node's inventory document.
func (s *Store) GetInventory(ctx context.Context, nodeUUID string) ([]byte, error) {
	var data []byte
	err := s.r.QueryRowContext(ctx, `SELECT data FROM resources WHERE kind = 'inventory' AND uuid = ?`, "inventory-"+nodeUUID).Scan(&data)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("inventory of node %s: %w", nodeUUID, store.ErrNotFound)
	}
	return data, err
}
