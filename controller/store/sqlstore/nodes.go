package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	json "github.com/goccy/go-json"

	"github.com/anvil-metal/anvil/controller/store"
)

const nodeCols = `uuid, name, revision, driver, provision_state, power_state, maintenance, retired,
	instance_uuid, resource_class, fault, owner, lessee, conductor_group, chassis_uuid, description, shard,
	reservation, created_at, updated_at, provision_updated_at, data, operation, parent_node`

// encodeNode is the node's document, its operation column (NULL when
// idle) and its agent_state row (nil when there is none: see agentState).
// The document codec is goccy/go-json, for decode speed; FuzzNodeCodec
// holds it to encoding/json's results.
func encodeNode(n *store.Node) (data, op, agent []byte, err error) {
	if data, err = json.Marshal(n); err != nil {
		return nil, nil, nil, fmt.Errorf("encode node %s: %w", n.UUID, err)
	}
	rest := n.Operation
	a := agentState{Steps: rest.Agent.Steps, CommandStatus: rest.Agent.CommandStatus}
	rest.Agent.Steps, rest.Agent.CommandStatus = nil, nil
	if op, err = store.EncodeOperation(&rest); err != nil {
		return nil, nil, nil, fmt.Errorf("encode operation of node %s: %w", n.UUID, err)
	}
	if a.Steps != nil || a.CommandStatus != nil {
		if agent, err = json.Marshal(&a); err != nil {
			return nil, nil, nil, fmt.Errorf("encode agent state of node %s: %w", n.UUID, err)
		}
	}
	return data, op, agent, nil
}

// CreateNode inserts n and sets its ID and Revision.
func (s *Store) CreateNode(ctx context.Context, n *store.Node) error {
	return s.EnrolNode(ctx, &store.Enrolment{Node: n})
}

// EnrolNode implements store.Enrolments: the node row, its agent state,
// ports, inventory and events in one transaction (a bare node without
// agent state is one statement).
func (s *Store) EnrolNode(ctx context.Context, e *store.Enrolment) error {
	n := e.Node
	n.Normalize()
	n.Revision = 1
	data, op, agent, err := encodeNode(n)
	if err != nil {
		return err
	}
	insert := func(db execer) error {
		return s.queryRow(ctx, db, `INSERT INTO nodes (`+nodeCols+`)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21, $22, $23, $24)
		RETURNING id`,
			n.UUID, n.Name, n.Revision, n.Driver, n.ProvisionState, n.PowerState, n.Maintenance, n.Retired,
			n.InstanceUUID, n.ResourceClass, n.Fault, n.Owner, n.Lessee, n.ConductorGroup, n.ChassisUUID,
			n.Description, n.Shard, n.Reservation, s.d.stamp(&n.CreatedAt), s.d.stamp(n.UpdatedAt),
			s.d.stamp(n.ProvisionUpdatedAt), data, op, n.ParentNode).Scan(&n.ID)
	}
	if agent == nil && len(e.Ports) == 0 && e.Inventory == nil && len(e.Events) == 0 && s.updates == nil {
		err = insert(s.w) // one statement, no transaction to open (PostgreSQL)
	} else {
		// SQLite: in the group commit, so that creates from many clients
		// share one fsync.
		err = s.grouped(ctx, "create node "+n.UUID, func(ctx context.Context, tx execer) error {
			if err := insert(tx); err != nil {
				return s.mapErr(err, "node row")
			}
			if agent != nil {
				if _, err := s.exec(ctx, tx, `INSERT INTO agent_state (node_uuid, data) VALUES ($1, $2)`, n.UUID, agent); err != nil {
					return fmt.Errorf("agent state: %w", err)
				}
			}
			for _, p := range e.Ports {
				p.NodeUUID = n.UUID
				if err := portKind.createOn(ctx, s, tx, p); err != nil {
					return err
				}
			}
			if e.Inventory != nil {
				if err := s.putInventory(ctx, tx, n.UUID, e.Inventory); err != nil {
					return err
				}
			}
			return s.insertEvents(ctx, tx, e.Events)
		})
		if err != nil {
			for _, p := range e.Ports {
				p.ID, p.Revision = 0, 0 // none of them was created
			}
			n.ID = 0
			return fmt.Errorf("create node %s: %w", n.UUID, err)
		}
	}
	if err != nil {
		return s.mapErr(err, "create node "+n.UUID)
	}
	n.AgentStateRead = agent
	return nil
}

type scanner interface{ Scan(...any) error }

// nodeFullCols and nodeListCols read a node with and without its agent
// state (nodes n LEFT JOIN agent_state a).
const (
	nodeFullCols = "n.id, n.revision, n.data, n.operation, a.data"
	nodeListCols = "id, revision, data, operation"
)

// scanNode reads nodeFullCols; scanListedNode nodeListCols, marking the
// node Partial.
func scanNode(sc scanner) (*store.Node, error) {
	var (
		id, rev         int64
		data, op, agent []byte
	)
	if err := sc.Scan(&id, &rev, &data, &op, &agent); err != nil {
		return nil, err
	}
	n, err := decodeNode(id, rev, data, op)
	if err != nil {
		return nil, err
	}
	if err := decodeAgentState(agent, n); err != nil {
		return nil, err
	}
	n.AgentStateRead = agent
	return n, nil
}

// scanListedNode reads the documents as sql.RawBytes, the driver's own
// buffers: they are decoded (copied) before the next row, and a list reads
// a thousand of them.
func scanListedNode(sc scanner) (*store.Node, error) {
	var (
		id, rev  int64
		data, op sql.RawBytes
	)
	if err := sc.Scan(&id, &rev, &data, &op); err != nil {
		return nil, err
	}
	n, err := decodeNode(id, rev, data, op)
	if err != nil {
		return nil, err
	}
	n.Partial = true
	return n, nil
}

func decodeNode(id, rev int64, data, op []byte) (*store.Node, error) {
	n := &store.Node{}
	if err := json.Unmarshal(data, n); err != nil {
		return nil, fmt.Errorf("decode node %d: %w", id, err)
	}
	if err := store.DecodeOperation(op, &n.Operation); err != nil {
		return nil, fmt.Errorf("decode operation of node %d: %w", id, err)
	}
	n.ID, n.Revision = id, rev
	n.Normalize()
	return n, nil
}

// GetNode finds a node by UUID, then by name.
func (s *Store) GetNode(ctx context.Context, ident string) (*store.Node, error) {
	n, err := scanNode(s.getNode.QueryRowContext(ctx, ident))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("node %s: %w", ident, store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("get node %s: %w", ident, err)
	}
	return n, nil
}

// DeleteNode removes the node with its ports, portgroups, allocations,
// inventory, agent state, lease, history and step results (not its erase
// records) if nobody changed it since n was read (the
// foreign key would delete its resources too; deleting them here keeps
// the statement list the whole story). On PostgreSQL at READ
// COMMITTED, a writer that got there first makes the revision condition
// fail when the DELETE re-checks the row it waited for.
func (s *Store) DeleteNode(ctx context.Context, n *store.Node) error {
	uuid := n.UUID
	err := s.grouped(ctx, "delete node "+uuid, func(ctx context.Context, tx execer) error {
		res, err := s.exec(ctx, tx, `DELETE FROM nodes WHERE uuid = $1 AND revision = $2`, uuid, n.Revision)
		if err != nil {
			return err
		}
		if c, _ := res.RowsAffected(); c == 0 {
			return s.whyNotUpdated(ctx, tx, uuid, "", "delete node "+uuid+" at revision "+strconv.FormatInt(n.Revision, 10))
		}
		// Ports, port groups, allocations (resources), agent state, BIOS
		// settings, firmware components and the boot timeline go by
		// their foreign keys (ON DELETE CASCADE); these tables have none:
		// erase records outlive the node, and these do not.
		for _, q := range []string{
			`DELETE FROM node_leases WHERE node_uuid = $1`,
			`DELETE FROM events WHERE node_uuid = $1`,
			`DELETE FROM step_results WHERE node_uuid = $1`,
		} {
			if _, err := s.exec(ctx, tx, q, uuid); err != nil {
				return err
			}
		}
		return nil
	})
	if s.d.conflict(err) {
		return fmt.Errorf("delete node %s at revision %d: %w", uuid, n.Revision, store.ErrConflict)
	}
	if err != nil && !errors.Is(err, store.ErrNotFound) && !errors.Is(err, store.ErrConflict) {
		return fmt.Errorf("delete node %s: %w", uuid, err)
	}
	return err
}

// inTx runs fn in a transaction on the writer, committing if it returns nil.
func (s *Store) inTx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	if s.wdb == nil {
		return errReadOnly
	}
	tx, err := s.wdb.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer s.afterTx(ctx) // runs after the rollback below: the connection is free
	defer tx.Rollback()
	if err := fn(tx); err != nil {
		return err
	}
	return tx.Commit()
}

// whyNotUpdated tells, after a conditional write to a node matched
// nothing, whether the node is gone (ErrNotFound), holder's lease on it
// lapsed (ErrLeaseLost) or another writer got there first (ErrConflict).
// On PostgreSQL the read is outside the write's snapshot, which is
// harmless: either answer was true at some moment after the write was
// refused.
func (s *Store) whyNotUpdated(ctx context.Context, db execer, uuid, holder, what string) error {
	var exists int
	if err := s.queryRow(ctx, db, `SELECT COUNT(*) FROM nodes WHERE uuid = $1`, uuid).Scan(&exists); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if exists == 0 {
		return fmt.Errorf("node %s: %w", uuid, store.ErrNotFound)
	}
	if holder != "" {
		var p params
		q := `SELECT COUNT(*) FROM node_leases WHERE node_uuid = ` + p.add(uuid) + ` AND holder = ` + p.add(holder) +
			` AND expires_at > ` + s.d.now(&p)
		var held int
		if err := s.queryRow(ctx, db, q, p...).Scan(&held); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		if held == 0 {
			return fmt.Errorf("%s as %s: %w", what, holder, store.ErrLeaseLost)
		}
	}
	return fmt.Errorf("%s: %w", what, store.ErrConflict)
}

// sortExpr maps API sort keys to SQL expressions; COALESCE keeps keyset
// comparisons well defined for NULLs, which sort first on both databases
// (the empty string and the dialect's minimum time are below every value).
func (s *Store) sortExpr(key string) (string, bool) {
	switch key {
	case "id", "uuid", "created_at", "provision_state", "driver", "maintenance", "conductor_group", "retired",
		"priority", "phase", // inspection rules'
		"public", "disable_ramdisk": // runbooks'
		return key, true // NOT NULL columns
	case "name", "power_state", "resource_class", "instance_uuid", "owner":
		return "COALESCE(" + key + ", '')", true
	case "updated_at", "provision_updated_at":
		return "COALESCE(" + key + ", " + s.d.minTime() + ")", true
	}
	return "", false
}

// sortable says whether table's lists sort by key: nodes by every sort
// key, the others by the columns they have.
func sortable(table, key string) bool {
	switch {
	case table == "nodes" || key == "id" || key == "uuid":
		return true
	case table == "chassis":
		return key == "created_at"
	case table == "deploy_templates":
		return slices.Contains(store.DeployTemplateSortKeys(), key)
	case table == "inspection_rules":
		return slices.Contains(store.InspectionRuleSortKeys(), key)
	case table == "runbooks":
		return slices.Contains(store.RunbookSortKeys(), key)
	}
	return false
}

// ListNodes returns nodes matching f, one keyset page at a time.
func (s *Store) ListNodes(ctx context.Context, f store.NodeFilter, p store.Page) ([]*store.Node, error) {
	var args params
	where := s.nodeWhere(f, &args)
	return listPage(ctx, s, "nodes", nodeListCols, where, args, p, scanListedNode)
}

// ListNodeSummaries lists nodes reading only indexed columns.
func (s *Store) ListNodeSummaries(ctx context.Context, f store.NodeFilter, p store.Page) ([]*store.NodeSummary, error) {
	var args params
	where := s.nodeWhere(f, &args)
	return listPage(ctx, s, "nodes", "id, uuid, name, instance_uuid, maintenance, power_state, provision_state, reservation",
		where, args, p, func(sc scanner) (*store.NodeSummary, error) {
			var n store.NodeSummary
			err := sc.Scan(&n.ID, &n.UUID, optString{&n.Name}, optString{&n.InstanceUUID}, &n.Maintenance,
				optString{&n.PowerState}, &n.ProvisionState, optString{&n.Reservation})
			return &n, err
		})
}

// optString scans a nullable text column into a *string. database/sql
// scans into a **string by reflection (reflect.New and Value.Set per
// value: about a tenth of the client's CPU in a 1000-node summary list on
// PostgreSQL); a struct of one pointer fits in an interface without an
// allocation.
type optString struct{ p **string }

func (o optString) Scan(src any) error {
	switch v := src.(type) {
	case nil:
		*o.p = nil
	case string:
		*o.p = &v
	case []byte:
		s := string(v)
		*o.p = &s
	default:
		return fmt.Errorf("scan %T into a nullable string", src)
	}
	return nil
}

// nodeWhere turns a filter into SQL conditions on indexed columns.
func (s *Store) nodeWhere(f store.NodeFilter, args *params) []string {
	var where []string
	eq := func(col string, v any, set bool) {
		if set {
			where = append(where, col+" = "+args.add(v))
		}
	}
	str := func(col string, v *string) {
		if v != nil {
			eq(col, *v, true)
		}
	}
	flag := func(col string, v *bool) {
		if v != nil {
			eq(col, *v, true)
		}
	}
	isNull := func(col string, v *bool) {
		if v != nil {
			if *v {
				where = append(where, col+" IS NOT NULL")
			} else {
				where = append(where, col+" IS NULL")
			}
		}
	}
	str("provision_state", f.ProvisionState)
	flag("maintenance", f.Maintenance)
	flag("retired", f.Retired)
	str("driver", f.Driver)
	str("resource_class", f.ResourceClass)
	str("fault", f.Fault)
	str("owner", f.Owner)
	str("lessee", f.Lessee)
	str("conductor_group", f.ConductorGroup)
	str("chassis_uuid", f.ChassisUUID)
	str("instance_uuid", f.InstanceUUID)
	str("shard", f.Shard)
	str("parent_node", f.ParentNode)
	isNull("parent_node", f.IsChild)
	isNull("instance_uuid", f.Associated)
	isNull("reservation", f.Reserved)
	if c := f.Conductor; c != nil {
		cond := "reservation = " + args.add(c.Host)
		if c.Free {
			cond = "(" + cond + " OR reservation IS NULL)"
		}
		where = append(where, cond)
	}
	if f.Project != nil {
		where = append(where, "(owner = "+args.add(*f.Project)+" OR lessee = "+args.add(*f.Project)+")")
	}
	if f.DescriptionContains != nil {
		where = append(where, s.d.contains("COALESCE(description, '')", args.add(*f.DescriptionContains)))
	}
	if f.InstanceName != nil {
		where = append(where, s.d.docText("instance_name")+" = "+args.add(*f.InstanceName))
	}
	if f.NameContains != nil {
		where = append(where, s.d.contains("lower(COALESCE(name, ''))", "lower("+args.add(*f.NameContains)+")"))
	}
	if f.TextContains != nil {
		needle := "lower(" + args.add(*f.TextContains) + ")"
		where = append(where, "("+s.d.contains("lower(COALESCE(name, ''))", needle)+" OR "+
			s.d.contains("lower(COALESCE(description, ''))", needle)+" OR "+s.d.contains("uuid", needle)+")")
	}
	return where
}

// listPage runs a keyset-paginated query on table: rows sorted by the sort
// expression, ties broken by id, starting after the marker row. The marker
// is looked up in the same statement (a row comparison against a subquery,
// which an (expr, id) index can serve); only when the page comes back
// empty does a second query tell a missing marker from the end of the list.

func listPage[T any](ctx context.Context, s *Store, table, cols string, where []string, args params, p store.Page,
	scan func(scanner) (T, error)) ([]T, error) {
	key := p.SortKey
	if key == "" {
		key = "id"
	}
	expr, ok := s.sortExpr(key)
	if !ok || !sortable(table, key) {
		return nil, fmt.Errorf("cannot sort by %q", key)
	}
	cmp, dir := ">", "ASC"
	if p.Desc {
		cmp, dir = "<", "DESC"
	}
	if p.Marker != "" {
		m := args.add(p.Marker)
		if key == "id" {
			where = append(where, fmt.Sprintf("id %s (SELECT id FROM %s WHERE uuid = %s)", cmp, table, m))
		} else {
			where = append(where, fmt.Sprintf("(%s, id) %s (SELECT %s, id FROM %s WHERE uuid = %s)", expr, cmp, expr, table, m))
		}
	}
	cond := ""
	if len(where) > 0 {
		cond = " WHERE " + strings.Join(where, " AND ")
	}
	order := " ORDER BY id " + dir
	if key != "id" {
		order = fmt.Sprintf(" ORDER BY %s %s, id %s", expr, dir, dir)
	}
	q := `SELECT ` + cols + ` FROM ` + table + cond + order
	switch {
	case p.Limit > 0 && key != "id" && s.d.pageIDsFirst():
		// Pick the page's ids first, then read only their rows: SQLite
		// otherwise sorts every matching row with its document (10,000
		// nodes by name: 90 ms instead of a few).
		q = fmt.Sprintf(`SELECT %s FROM %s WHERE id IN (SELECT id FROM %s%s%s LIMIT %d)%s`, cols, table, table, cond, order, p.Limit, order)
	case p.Limit > 0:
		q += " LIMIT " + strconv.Itoa(p.Limit)
	}
	rows, err := s.query(ctx, s.r, q, args...)
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", table, err)
	}
	defer rows.Close()
	var out []T
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, fmt.Errorf("list %s: %w", table, err)
		}
		out = append(out, v)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list %s: %w", table, err)
	}
	if len(out) == 0 && p.Marker != "" {
		var exists int
		if err := s.queryRow(ctx, s.r, `SELECT COUNT(*) FROM `+table+` WHERE uuid = $1`, p.Marker).Scan(&exists); err != nil {
			return nil, fmt.Errorf("read marker: %w", err)
		}
		if exists == 0 {
			return nil, fmt.Errorf("marker %s: %w", p.Marker, store.ErrNotFound)
		}
	}
	return out, nil
}

// CountNodesByState counts nodes per provision state (for metrics).
func (s *Store) CountNodesByState(ctx context.Context) (map[string]int, error) {
	rows, err := s.query(ctx, s.r, `SELECT provision_state, COUNT(*) FROM nodes GROUP BY provision_state`)
	if err != nil {
		return nil, fmt.Errorf("count nodes: %w", err)
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var st string
		var c int
		if err := rows.Scan(&st, &c); err != nil {
			return nil, fmt.Errorf("count nodes: %w", err)
		}
		out[st] = c
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("count nodes: %w", err)
	}
	return out, nil
}
