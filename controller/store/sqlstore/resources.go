package sqlstore

import (
	"context"
	"database/sql"
	stdjson "encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

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

func (s *Store) createResource(ctx context.Context, db execer, kind string, k resourceKeys, v any) (int64, error) {
	data, err := stdjson.Marshal(v)
	if err != nil {
		return 0, fmt.Errorf("encode %s %s: %w", kind, k.uuid, err)
	}
	var id int64
	err = s.queryRow(ctx, db, `INSERT INTO resources (kind, uuid, node_uuid, name, address, revision, data)
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

// resourceKind defines one kind of the resources table; its store methods
// are this one definition's, not a copy per kind.
type resourceKind[T any] struct {
	kind   string
	byName bool // get finds by uuid, then by name
	keys   func(v *T) resourceKeys
	// fields are v's ID and Revision; a nil revision: the kind is
	// written last-writer-wins.
	fields func(v *T) (id, revision *int64)
}

func (k *resourceKind[T]) set(v *T, id, rev int64) {
	i, r := k.fields(v)
	*i = id
	if r != nil {
		*r = rev
	}
}

func (k *resourceKind[T]) create(ctx context.Context, s *Store, v *T) error {
	return k.createOn(ctx, s, s.w, v)
}

// createOn is create on db (a transaction creating more with it).
func (k *resourceKind[T]) createOn(ctx context.Context, s *Store, db execer, v *T) error {
	id, err := s.createResource(ctx, db, k.kind, k.keys(v), v)
	if err != nil {
		return err
	}
	k.set(v, id, 1)
	return nil
}

// get finds by uuid, or by uuid then name when the kind has names.
func (k *resourceKind[T]) get(ctx context.Context, s *Store, ident string) (*T, error) {
	q := `SELECT id, revision, data FROM resources WHERE kind = $1 AND uuid = $2`
	if k.byName {
		q = `SELECT id, revision, data FROM resources WHERE kind = $1 AND (uuid = $2 OR name = $2) ORDER BY uuid = $2 DESC LIMIT 1`
	}
	v, err := scanResource(k.set)(s.queryRow(ctx, s.r, q, k.kind, ident))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("%s %s: %w", k.kind, ident, store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("get %s %s: %w", k.kind, ident, err)
	}
	return v, nil
}

func (k *resourceKind[T]) list(ctx context.Context, s *Store, f store.ResourceFilter, p store.Page) ([]*T, error) {
	var args params
	where := []string{"kind = " + args.add(k.kind)}
	for _, c := range []struct {
		col string
		v   *string
	}{{"node_uuid", f.NodeUUID}, {"address", f.Address}, {"name", f.Name}} {
		if c.v != nil {
			where = append(where, c.col+" = "+args.add(*c.v))
		}
	}
	if f.NodeProject != nil {
		where = append(where, "node_uuid IN (SELECT uuid FROM nodes WHERE owner = "+args.add(*f.NodeProject)+" OR lessee = "+args.add(*f.NodeProject)+")")
	}
	if f.PortgroupUUID != nil {
		where = append(where, s.d.docText("portgroup_uuid")+" = "+args.add(*f.PortgroupUUID))
	}
	for _, c := range []struct {
		col  string
		vals []string
	}{{"conductor_group", f.ConductorGroups}, {"shard", f.Shards}} {
		if len(c.vals) == 0 {
			continue
		}
		in := make([]string, len(c.vals))
		for i, v := range c.vals {
			in[i] = args.add(strings.ToLower(v))
		}
		// case-blind, as Ironic's MySQL compares them
		where = append(where, "node_uuid IN (SELECT uuid FROM nodes WHERE lower("+c.col+") IN ("+strings.Join(in, ", ")+"))")
	}
	return listPage(ctx, s, "resources", "id, revision, data", where, args, p, scanResource(k.set))
}

// update writes v. One read from the store (Revision > 0) is written only
// at the revision read (else ErrConflict) and then carries the new one;
// one not read (0) is written unconditionally and stays at 0, as a
// revision it never read would make its next write a conflict.
func (k *resourceKind[T]) update(ctx context.Context, s *Store, v *T) error {
	_, rev := k.fields(v)
	var read int64
	if rev != nil {
		read = *rev
	}
	if err := s.updateResource(ctx, k.kind, k.keys(v), v, read); err != nil {
		return err
	}
	if read > 0 {
		*rev = read + 1
	}
	return nil
}

func (k *resourceKind[T]) delete(ctx context.Context, s *Store, uuid string) error {
	return s.deleteResource(ctx, k.kind, uuid)
}

var portKind = &resourceKind[store.Port]{
	kind: "port", byName: true, // port names came with API 1.88
	keys: func(p *store.Port) resourceKeys {
		return resourceKeys{uuid: p.UUID, node: p.NodeUUID, name: p.Name, addr: &p.Address}
	},
	fields: func(p *store.Port) (*int64, *int64) { return &p.ID, &p.Revision },
}

var portgroupKind = &resourceKind[store.Portgroup]{
	kind: "portgroup", byName: true,
	keys: func(p *store.Portgroup) resourceKeys {
		return resourceKeys{uuid: p.UUID, node: p.NodeUUID, name: p.Name, addr: p.Address}
	},
	fields: func(p *store.Portgroup) (*int64, *int64) { return &p.ID, &p.Revision },
}

var allocationKind = &resourceKind[store.Allocation]{
	kind: "allocation", byName: true,
	keys: func(a *store.Allocation) resourceKeys {
		k := resourceKeys{uuid: a.UUID, name: a.Name}
		if a.NodeUUID != nil {
			k.node = *a.NodeUUID
		}
		return k
	},
	fields: func(a *store.Allocation) (*int64, *int64) { return &a.ID, &a.Revision },
}

// A volume connector's (type, connector_id) and a volume target's (node,
// boot index) must be unique: they are the address and the name the
// resources table keeps unique per kind. Volume records are written
// last-writer-wins (no revision): unlike ports, no background work
// rewrites them.
var connectorKind = &resourceKind[store.VolumeConnector]{
	kind: "volume_connector",
	keys: func(c *store.VolumeConnector) resourceKeys {
		addr := c.Type + "/" + c.ConnectorID
		return resourceKeys{uuid: c.UUID, node: c.NodeUUID, addr: &addr}
	},
	fields: func(c *store.VolumeConnector) (*int64, *int64) { return &c.ID, nil },
}

var targetKind = &resourceKind[store.VolumeTarget]{
	kind: "volume_target",
	keys: func(t *store.VolumeTarget) resourceKeys {
		name := t.NodeUUID + "/" + strconv.Itoa(t.BootIndex)
		return resourceKeys{uuid: t.UUID, node: t.NodeUUID, name: &name}
	},
	fields: func(t *store.VolumeTarget) (*int64, *int64) { return &t.ID, nil },
}

// CreatePort inserts a port.
func (s *Store) CreatePort(ctx context.Context, p *store.Port) error {
	return portKind.create(ctx, s, p)
}

// GetPort finds a port by uuid, then by name.
func (s *Store) GetPort(ctx context.Context, uuid string) (*store.Port, error) {
	return portKind.get(ctx, s, uuid)
}

// ListPorts lists ports.
func (s *Store) ListPorts(ctx context.Context, f store.ResourceFilter, p store.Page) ([]*store.Port, error) {
	return portKind.list(ctx, s, f, p)
}

// UpdatePort writes a port (if read from the store: at the revision read).
func (s *Store) UpdatePort(ctx context.Context, p *store.Port) error {
	return portKind.update(ctx, s, p)
}

// DeletePort removes a port.
func (s *Store) DeletePort(ctx context.Context, uuid string) error {
	return portKind.delete(ctx, s, uuid)
}

// CreatePortgroup inserts a portgroup.
func (s *Store) CreatePortgroup(ctx context.Context, p *store.Portgroup) error {
	return portgroupKind.create(ctx, s, p)
}

// GetPortgroup finds a portgroup by uuid or name.
func (s *Store) GetPortgroup(ctx context.Context, ident string) (*store.Portgroup, error) {
	return portgroupKind.get(ctx, s, ident)
}

// ListPortgroups lists portgroups.
func (s *Store) ListPortgroups(ctx context.Context, f store.ResourceFilter, p store.Page) ([]*store.Portgroup, error) {
	return portgroupKind.list(ctx, s, f, p)
}

// UpdatePortgroup writes a portgroup (if read: at the revision read).
func (s *Store) UpdatePortgroup(ctx context.Context, p *store.Portgroup) error {
	return portgroupKind.update(ctx, s, p)
}

// DeletePortgroup removes a portgroup.
func (s *Store) DeletePortgroup(ctx context.Context, uuid string) error {
	return portgroupKind.delete(ctx, s, uuid)
}

// CreateAllocation inserts an allocation.
func (s *Store) CreateAllocation(ctx context.Context, a *store.Allocation) error {
	return allocationKind.create(ctx, s, a)
}

// GetAllocation finds an allocation by uuid or name.
func (s *Store) GetAllocation(ctx context.Context, ident string) (*store.Allocation, error) {
	return allocationKind.get(ctx, s, ident)
}

// ListAllocations lists allocations.
func (s *Store) ListAllocations(ctx context.Context, f store.ResourceFilter, p store.Page) ([]*store.Allocation, error) {
	return allocationKind.list(ctx, s, f, p)
}

// UpdateAllocation writes an allocation (if read: at the revision read).
func (s *Store) UpdateAllocation(ctx context.Context, a *store.Allocation) error {
	return allocationKind.update(ctx, s, a)
}

// DeleteAllocation removes an allocation.
func (s *Store) DeleteAllocation(ctx context.Context, uuid string) error {
	return allocationKind.delete(ctx, s, uuid)
}

// CreateVolumeConnector inserts a volume connector.
func (s *Store) CreateVolumeConnector(ctx context.Context, c *store.VolumeConnector) error {
	return connectorKind.create(ctx, s, c)
}

// GetVolumeConnector finds a volume connector by uuid.
func (s *Store) GetVolumeConnector(ctx context.Context, uuid string) (*store.VolumeConnector, error) {
	return connectorKind.get(ctx, s, uuid)
}

// ListVolumeConnectors lists volume connectors.
func (s *Store) ListVolumeConnectors(ctx context.Context, f store.ResourceFilter, p store.Page) ([]*store.VolumeConnector, error) {
	return connectorKind.list(ctx, s, f, p)
}

// UpdateVolumeConnector writes a volume connector.
func (s *Store) UpdateVolumeConnector(ctx context.Context, c *store.VolumeConnector) error {
	return connectorKind.update(ctx, s, c)
}

// DeleteVolumeConnector removes a volume connector.
func (s *Store) DeleteVolumeConnector(ctx context.Context, uuid string) error {
	return connectorKind.delete(ctx, s, uuid)
}

// CreateVolumeTarget inserts a volume target.
func (s *Store) CreateVolumeTarget(ctx context.Context, t *store.VolumeTarget) error {
	return targetKind.create(ctx, s, t)
}

// GetVolumeTarget finds a volume target by uuid.
func (s *Store) GetVolumeTarget(ctx context.Context, uuid string) (*store.VolumeTarget, error) {
	return targetKind.get(ctx, s, uuid)
}

// ListVolumeTargets lists volume targets.
func (s *Store) ListVolumeTargets(ctx context.Context, f store.ResourceFilter, p store.Page) ([]*store.VolumeTarget, error) {
	return targetKind.list(ctx, s, f, p)
}

// UpdateVolumeTarget writes a volume target.
func (s *Store) UpdateVolumeTarget(ctx context.Context, t *store.VolumeTarget) error {
	return targetKind.update(ctx, s, t)
}

// DeleteVolumeTarget removes a volume target.
func (s *Store) DeleteVolumeTarget(ctx context.Context, uuid string) error {
	return targetKind.delete(ctx, s, uuid)
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
	return s.putInventory(ctx, s.w, nodeUUID, inventory)
}

func (s *Store) putInventory(ctx context.Context, db execer, nodeUUID string, inventory []byte) error {
	if !stdjson.Valid(inventory) {
		return fmt.Errorf("inventory of node %s is not valid JSON", nodeUUID)
	}
	_, err := s.exec(ctx, db, `INSERT INTO resources (kind, uuid, node_uuid, revision, data)
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
