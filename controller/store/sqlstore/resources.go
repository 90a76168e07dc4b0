package sqlstore

import (
	"context"
	"database/sql"
	stdjson "encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/anvil-metal/anvil/controller/store"
)

// Ports, portgroups, allocations, volume connectors and targets and
// inventories share one table: small
// documents looked up by uuid, name, address or node, which is all the
// table indexes. Their documents are written with encoding/json.

type resourceKeys struct {
	uuid, node string
	name, addr *string
}

func (s *Store) createResource(ctx context.Context, kind string, k resourceKeys, v any) (int64, error) {
	data, err := stdjson.Marshal(v)
	if err != nil {
		return 0, fmt.Errorf("encode %s %s: %w", kind, k.uuid, err)
	}
	var id int64
	err = s.queryRow(ctx, s.w, `INSERT INTO resources (kind, uuid, node_uuid, name, address, revision, data)
		VALUES ($1, $2, $3, $4, $5, 1, $6) RETURNING id`, kind, k.uuid, nullable(k.node), k.name, k.addr, data).Scan(&id)
	if err != nil {
		return 0, s.resourceErr(err, "create", kind, k)
	}
	return id, nil
}

// updateResource writes a resource; with rev > 0 only if its revision is
// still rev (else ErrConflict), so a read-modify-write is a
// compare-and-swap.
func (s *Store) updateResource(ctx context.Context, kind string, k resourceKeys, v any, rev int64) error {
	data, err := stdjson.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode %s %s: %w", kind, k.uuid, err)
	}
	q := `UPDATE resources SET node_uuid = $1, name = $2, address = $3, revision = revision + 1,
		data = $4 WHERE kind = $5 AND uuid = $6`
	args := []any{nullable(k.node), k.name, k.addr, data, kind, k.uuid}
	if rev > 0 {
		q += ` AND revision = $7`
		args = append(args, rev)
	}
	res, err := s.exec(ctx, s.w, q, args...)
	if err != nil {
		return s.resourceErr(err, "update", kind, k)
	}
	if c, _ := res.RowsAffected(); c == 0 {
		if rev > 0 {
			var n int
			if err := s.queryRow(ctx, s.w, `SELECT count(*) FROM resources WHERE kind = $1 AND uuid = $2`, kind, k.uuid).Scan(&n); err != nil {
				return fmt.Errorf("update %s %s: %w", kind, k.uuid, err)
			}
			if n > 0 {
				return fmt.Errorf("update %s %s at revision %d: %w", kind, k.uuid, rev, store.ErrConflict)
			}
		}
		return fmt.Errorf("%s %s: %w", kind, k.uuid, store.ErrNotFound)
	}
	return nil
}

// resourceErr maps a failed write of a resource: a node that does not
// exist (the foreign key) is ErrNotFound, a duplicate its sentinel.
func (s *Store) resourceErr(err error, verb, kind string, k resourceKeys) error {
	if s.d.missingParent(err) {
		return fmt.Errorf("%s %s %s: node %s: %w", verb, kind, k.uuid, k.node, store.ErrNotFound)
	}
	return s.mapErr(err, verb+" "+kind+" "+k.uuid)
}

func (s *Store) deleteResource(ctx context.Context, kind, uuid string) error {
	res, err := s.exec(ctx, s.w, `DELETE FROM resources WHERE kind = $1 AND uuid = $2`, kind, uuid)
	if err != nil {
		return fmt.Errorf("delete %s %s: %w", kind, uuid, err)
	}
	if c, _ := res.RowsAffected(); c == 0 {
		return fmt.Errorf("%s %s: %w", kind, uuid, store.ErrNotFound)
	}
	return nil
}

// setKeys copies a resource row's id and revision into its document.
type setKeys[T any] func(v *T, id, revision int64)

func scanResource[T any](set setKeys[T]) func(scanner) (*T, error) {
	return func(sc scanner) (*T, error) {
		var id, rev int64
		var data []byte
		if err := sc.Scan(&id, &rev, &data); err != nil {
			return nil, err
		}
		v := new(T)
		if err := stdjson.Unmarshal(data, v); err != nil {
			return nil, fmt.Errorf("decode resource %d: %w", id, err)
		}
		set(v, id, rev)
		return v, nil
	}
}

// getResource finds by uuid, or by uuid then name when byName.
func getResource[T any](ctx context.Context, s *Store, kind, ident string, byName bool, setID setKeys[T]) (*T, error) {
	q := `SELECT id, revision, data FROM resources WHERE kind = $1 AND uuid = $2`
	if byName {
		q = `SELECT id, revision, data FROM resources WHERE kind = $1 AND (uuid = $2 OR name = $2) ORDER BY uuid = $2 DESC LIMIT 1`
	}
	v, err := scanResource(setID)(s.queryRow(ctx, s.r, q, kind, ident))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("%s %s: %w", kind, ident, store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("get %s %s: %w", kind, ident, err)
	}
	return v, nil
}

func listResources[T any](ctx context.Context, s *Store, kind string, f store.ResourceFilter, p store.Page, setID setKeys[T]) ([]*T, error) {
	var args params
	where := []string{"kind = " + args.add(kind)}
	for _, c := range []struct {
		col string
		v   *string
	}{{"node_uuid", f.NodeUUID}, {"address", f.Address}, {"name", f.Name}} {
		if c.v != nil {
			where = append(where, c.col+" = "+args.add(*c.v))
		}
	}
	return listPage(ctx, s, "resources", "id, revision, data", where, args, p, scanResource(setID))
}

func setPortID(p *store.Port, id, rev int64)           { p.ID, p.Revision = id, rev }
func setPortgroupID(p *store.Portgroup, id, rev int64) { p.ID, p.Revision = id, rev }
func setAllocationID(a *store.Allocation, id, rev int64) {
	a.ID, a.Revision = id, rev
}

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
	p.ID, err = s.createResource(ctx, "port", portKeys(p), p)
	if err == nil {
		p.Revision = 1
	}
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

// UpdatePort writes a port (if read from the store: at the revision read).
func (s *Store) UpdatePort(ctx context.Context, p *store.Port) error {
	if err := s.updateResource(ctx, "port", portKeys(p), p, p.Revision); err != nil {
		return err
	}
	if p.Revision > 0 {
		p.Revision++
	}
	return nil
}

// DeletePort removes a port.
func (s *Store) DeletePort(ctx context.Context, uuid string) error {
	return s.deleteResource(ctx, "port", uuid)
}

// CreatePortgroup inserts a portgroup.
func (s *Store) CreatePortgroup(ctx context.Context, p *store.Portgroup) (err error) {
	p.ID, err = s.createResource(ctx, "portgroup", portgroupKeys(p), p)
	if err == nil {
		p.Revision = 1
	}
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

// UpdatePortgroup writes a portgroup (if read: at the revision read).
func (s *Store) UpdatePortgroup(ctx context.Context, p *store.Portgroup) error {
	if err := s.updateResource(ctx, "portgroup", portgroupKeys(p), p, p.Revision); err != nil {
		return err
	}
	if p.Revision > 0 {
		p.Revision++
	}
	return nil
}

// DeletePortgroup removes a portgroup.
func (s *Store) DeletePortgroup(ctx context.Context, uuid string) error {
	return s.deleteResource(ctx, "portgroup", uuid)
}

// CreateAllocation inserts an allocation.
func (s *Store) CreateAllocation(ctx context.Context, a *store.Allocation) (err error) {
	a.ID, err = s.createResource(ctx, "allocation", allocationKeys(a), a)
	if err == nil {
		a.Revision = 1
	}
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

// UpdateAllocation writes an allocation (if read: at the revision read).
func (s *Store) UpdateAllocation(ctx context.Context, a *store.Allocation) error {
	if err := s.updateResource(ctx, "allocation", allocationKeys(a), a, a.Revision); err != nil {
		return err
	}
	if a.Revision > 0 {
		a.Revision++
	}
	return nil
}

// DeleteAllocation removes an allocation.
func (s *Store) DeleteAllocation(ctx context.Context, uuid string) error {
	return s.deleteResource(ctx, "allocation", uuid)
}

// A volume connector's (type, connector_id) and a volume target's (node,
// boot index) must be unique: they are the address and the name the
// resources table keeps unique per kind.
func connectorKeys(c *store.VolumeConnector) resourceKeys {
	addr := c.Type + "/" + c.ConnectorID
	return resourceKeys{uuid: c.UUID, node: c.NodeUUID, addr: &addr}
}

func targetKeys(t *store.VolumeTarget) resourceKeys {
	name := t.NodeUUID + "/" + strconv.Itoa(t.BootIndex)
	return resourceKeys{uuid: t.UUID, node: t.NodeUUID, name: &name}
}

// Volume records are written last-writer-wins (revision 0): unlike ports,
// no background work rewrites them.
func setConnectorID(c *store.VolumeConnector, id, _ int64) { c.ID = id }
func setTargetID(t *store.VolumeTarget, id, _ int64)       { t.ID = id }

// CreateVolumeConnector inserts a volume connector.
func (s *Store) CreateVolumeConnector(ctx context.Context, c *store.VolumeConnector) (err error) {
	c.ID, err = s.createResource(ctx, "volume_connector", connectorKeys(c), c)
	return err
}

// GetVolumeConnector finds a volume connector by uuid.
func (s *Store) GetVolumeConnector(ctx context.Context, uuid string) (*store.VolumeConnector, error) {
	return getResource(ctx, s, "volume_connector", uuid, false, setConnectorID)
}

// ListVolumeConnectors lists volume connectors.
func (s *Store) ListVolumeConnectors(ctx context.Context, f store.ResourceFilter, p store.Page) ([]*store.VolumeConnector, error) {
	return listResources(ctx, s, "volume_connector", f, p, setConnectorID)
}

// UpdateVolumeConnector writes a volume connector.
func (s *Store) UpdateVolumeConnector(ctx context.Context, c *store.VolumeConnector) error {
	return s.updateResource(ctx, "volume_connector", connectorKeys(c), c, 0)
}

// DeleteVolumeConnector removes a volume connector.
func (s *Store) DeleteVolumeConnector(ctx context.Context, uuid string) error {
	return s.deleteResource(ctx, "volume_connector", uuid)
}

// CreateVolumeTarget inserts a volume target.
func (s *Store) CreateVolumeTarget(ctx context.Context, t *store.VolumeTarget) (err error) {
	t.ID, err = s.createResource(ctx, "volume_target", targetKeys(t), t)
	return err
}

// GetVolumeTarget finds a volume target by uuid.
func (s *Store) GetVolumeTarget(ctx context.Context, uuid string) (*store.VolumeTarget, error) {
	return getResource(ctx, s, "volume_target", uuid, false, setTargetID)
}

// ListVolumeTargets lists volume targets.
func (s *Store) ListVolumeTargets(ctx context.Context, f store.ResourceFilter, p store.Page) ([]*store.VolumeTarget, error) {
	return listResources(ctx, s, "volume_target", f, p, setTargetID)
}

// UpdateVolumeTarget writes a volume target.
func (s *Store) UpdateVolumeTarget(ctx context.Context, t *store.VolumeTarget) error {
	return s.updateResource(ctx, "volume_target", targetKeys(t), t, 0)
}

// DeleteVolumeTarget removes a volume target.
func (s *Store) DeleteVolumeTarget(ctx context.Context, uuid string) error {
	return s.deleteResource(ctx, "volume_target", uuid)
}

// encodeEvent is the event document.
func encodeEvent(e *store.Event) ([]byte, error) {
	data, err := stdjson.Marshal(e)
	if err != nil {
		return nil, fmt.Errorf("encode event: %w", err)
	}
	return data, nil
}

// AppendEvent adds an entry to a node's history.
func (s *Store) AppendEvent(ctx context.Context, e *store.Event) error {
	return s.insertEvents(ctx, s.w, []*store.Event{e})
}

// AppendEvents adds history entries in one transaction, in order: a bulk
// load (an import) pays one commit per batch instead of one per entry.
func (s *Store) AppendEvents(ctx context.Context, events []*store.Event) error {
	err := s.inTx(ctx, func(tx *sql.Tx) error { return s.insertEvents(ctx, tx, events) })
	if err != nil {
		return fmt.Errorf("append events: %w", err)
	}
	return nil
}

// ListEvents returns a node's history, oldest first; limit > 0 keeps the
// newest limit entries.
func (s *Store) ListEvents(ctx context.Context, nodeUUID string, limit int) ([]*store.Event, error) {
	q := `SELECT data FROM (SELECT id, data FROM events WHERE node_uuid = $1 ORDER BY id DESC`
	if limit > 0 {
		q += " LIMIT " + strconv.Itoa(limit)
	}
	q += `) newest ORDER BY id ASC`
	rows, err := s.query(ctx, s.r, q, nodeUUID)
	if err != nil {
		return nil, fmt.Errorf("list events: %w", err)
	}
	defer rows.Close()
	var out []*store.Event
	for rows.Next() {
		var data []byte
		if err := rows.Scan(&data); err != nil {
			return nil, fmt.Errorf("list events: %w", err)
		}
		e := &store.Event{}
		if err := stdjson.Unmarshal(data, e); err != nil {
			return nil, fmt.Errorf("decode event: %w", err)
		}
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list events: %w", err)
	}
	return out, nil
}

// PutInventory stores (replaces) a node's inventory document. The upsert
// is atomic, so two controllers storing the same node's inventory at once
// cannot both insert.
func (s *Store) PutInventory(ctx context.Context, nodeUUID string, inventory []byte) error {
	if !stdjson.Valid(inventory) {
		return fmt.Errorf("inventory of node %s is not valid JSON", nodeUUID)
	}
	_, err := s.exec(ctx, s.w, `INSERT INTO resources (kind, uuid, node_uuid, revision, data)
		VALUES ('inventory', $1, $2, 1, $3)
		ON CONFLICT (uuid) DO UPDATE SET data = excluded.data, revision = resources.revision + 1`,
		"inventory-"+nodeUUID, nodeUUID, inventory)
	if err != nil {
		return s.resourceErr(err, "store", "inventory", resourceKeys{uuid: "of node " + nodeUUID, node: nodeUUID})
	}
	return nil
}

// GetInventory returns a node's inventory document, byte for byte as stored.
func (s *Store) GetInventory(ctx context.Context, nodeUUID string) ([]byte, error) {
	var data []byte
	err := s.queryRow(ctx, s.r, `SELECT data FROM resources WHERE kind = 'inventory' AND uuid = $1`, "inventory-"+nodeUUID).Scan(&data)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("inventory of node %s: %w", nodeUUID, store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("inventory of node %s: %w", nodeUUID, err)
	}
	return data, nil
}
