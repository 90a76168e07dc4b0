// Package postgres is the PostgreSQL implementation of store.Store, for
// fleets where several controllers share one database. It keeps the SQLite
// store's model (indexed columns beside a JSON document per row, the same
// tables, the same keyset paging) and relies on the database, not on the
// process, for everything concurrent: optimistic node updates are a single
// conditional UPDATE, migrations take an advisory lock, and nothing is
// cached between calls.
package postgres

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	json "github.com/goccy/go-json"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/anvil-metal/anvil/controller/store"
)

// Store is a store.Store on PostgreSQL.
//
// It uses pgx's native pool rather than database/sql: pgx prepares each
// statement once per connection and caches it (the queries are fixed
// strings, or a few shapes per list filter), values travel in the binary
// format, arrays bind directly (updateNodeSQL), and errors arrive as
// *pgconn.PgError with the SQLSTATE and constraint name mapErr needs.
// database/sql would add a second pool and conversions for nothing: the
// store is the only user of the connection.
type Store struct {
	pool *pgxpool.Pool
}

var _ store.Store = (*Store)(nil)

// migrationLockKey is the pg_advisory_xact_lock key that serialises schema
// migrations of controllers starting at the same time against one database
// ("anvil" in ASCII). Advisory locks are scoped to the database.
const migrationLockKey int64 = 0x616e76696c

// Open connects to the database at url (postgres://user:pass@host/db?...,
// or any connection string pgx accepts, including pgxpool's pool_max_conns
// and pgx's default_query_exec_mode, e.g. "exec" behind PgBouncer in
// transaction mode) and migrates the schema.
func Open(ctx context.Context, url string) (*Store, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		// Not wrapped: the parse error may quote the URL, password included
		// (pgx redacts it only on a best-effort basis).
		return nil, errors.New("postgres: invalid database URL; expected postgres://USER:PASSWORD@HOST:PORT/DATABASE?OPTIONS")
	}
	// The isolation level is deliberately left to the database: forcing one
	// with a startup parameter would break PgBouncer, which refuses
	// parameters it does not know. The revision check needs no more than
	// READ COMMITTED, and under a stricter default a lost race surfaces as a
	// serialization failure, which updateNode reports as ErrConflict too.
	if _, ok := cfg.ConnConfig.RuntimeParams["application_name"]; !ok {
		// Lets a DBA tell the controllers' sessions apart in pg_stat_activity.
		cfg.ConnConfig.RuntimeParams["application_name"] = "anvil-controller"
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("postgres: connect: %w", err)
	}
	s := &Store{pool: pool}
	if err := s.migrate(ctx); err != nil {
		pool.Close()
		return nil, err
	}
	return s, nil
}

// Close closes the pool, waiting for connections in use to be returned.
func (s *Store) Close() error {
	s.pool.Close()
	return nil
}

// SchemaVersion reports how many migrations are applied.
func (s *Store) SchemaVersion(ctx context.Context) (int, error) {
	var v int
	err := s.pool.QueryRow(ctx, `SELECT COALESCE(MAX(version), 0) FROM schema_migrations`).Scan(&v)
	if err != nil {
		return 0, fmt.Errorf("postgres: read schema version: %w", err)
	}
	return v, nil
}

// migrate applies the missing migrations one transaction at a time. Each
// transaction first takes the migration lock, so controllers started
// together against an empty database queue up instead of racing to create
// the same tables, and each re-reads the version under the lock.
func (s *Store) migrate(ctx context.Context) error {
	for {
		done, err := s.migrateOne(ctx)
		if err != nil || done {
			return err
		}
	}
}

func (s *Store) migrateOne(ctx context.Context) (done bool, err error) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return false, fmt.Errorf("postgres: migrate: %w", err)
	}
	defer func() {
		if err != nil || done {
			_ = tx.Rollback(ctx) // no-op after Commit
		}
	}()
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, migrationLockKey); err != nil {
		return false, fmt.Errorf("postgres: take migration lock: %w", err)
	}
	if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version integer PRIMARY KEY, applied_at timestamptz NOT NULL)`); err != nil {
		return false, fmt.Errorf("postgres: create schema_migrations: %w", err)
	}
	var have int
	if err := tx.QueryRow(ctx, `SELECT COALESCE(MAX(version), 0) FROM schema_migrations`).Scan(&have); err != nil {
		return false, fmt.Errorf("postgres: read schema version: %w", err)
	}
	if have > len(migrations) {
		return false, fmt.Errorf("postgres: database schema version %d is newer than this controller knows (%d); upgrade the controller", have, len(migrations))
	}
	if have == len(migrations) {
		return true, nil
	}
	v := have + 1
	if _, err := tx.Exec(ctx, migrations[v-1]); err != nil {
		return false, fmt.Errorf("postgres: migration %d: %w", v, err)
	}
	if v == operationMigration {
		if err := moveOperations(ctx, tx); err != nil {
			return false, fmt.Errorf("postgres: migration %d: %w", v, err)
		}
	}
	if _, err := tx.Exec(ctx, `INSERT INTO schema_migrations (version, applied_at) VALUES ($1, $2)`, v, time.Now().UTC()); err != nil {
		return false, fmt.Errorf("postgres: record migration %d: %w", v, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return false, fmt.Errorf("postgres: commit migration %d: %w", v, err)
	}
	return false, nil
}

// SQLSTATEs the store interprets.
const (
	uniqueViolation      = "23505"
	serializationFailure = "40001" // a concurrent update under REPEATABLE READ or SERIALIZABLE
	deadlockDetected     = "40P01"
)

// duplicateOf names the sentinel for a violated unique constraint or index
// (see migrations); nil for constraints that have none.
func duplicateOf(constraint string) error {
	switch constraint {
	case "nodes_uuid_key", "resources_uuid_key", "events_uuid_key":
		return store.ErrDuplicateUUID
	case "nodes_name_key", "resources_name":
		return store.ErrDuplicateName
	case "resources_address":
		return store.ErrDuplicateAddr
	}
	return nil
}

// mapErr turns unique violations into store sentinels and wraps the rest.
// Like the SQLite store it does not pass the server's message on with a
// sentinel: it quotes the duplicate key, and callers show the error to API
// clients.
func mapErr(err error, what string) error {
	if err == nil {
		return nil
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == uniqueViolation {
		if sentinel := duplicateOf(pgErr.ConstraintName); sentinel != nil {
			return fmt.Errorf("%s: %w", what, sentinel)
		}
	}
	return fmt.Errorf("%s: %w", what, err)
}

// params collects positional query arguments while a query is assembled.
type params []any

// add appends v and returns its placeholder.
func (p *params) add(v any) string {
	*p = append(*p, v)
	return "$" + strconv.Itoa(len(*p))
}

// ---- nodes ----

const nodeCols = `uuid, name, revision, driver, provision_state, power_state, maintenance, retired,
	instance_uuid, resource_class, fault, owner, lessee, conductor_group, chassis_uuid, description, shard,
	reservation, created_at, updated_at, provision_updated_at, data, operation`

// encodeNode is the node document, with the SQLite store's codec so both
// backends hold the same JSON.
func encodeNode(n *store.Node) ([]byte, error) {
	data, err := json.Marshal(n)
	if err != nil {
		return nil, fmt.Errorf("encode node %s: %w", n.UUID, err)
	}
	return data, nil
}

// encodeOperation is the node's operation column (NULL when idle).
func encodeOperation(n *store.Node) ([]byte, error) {
	op, err := store.EncodeOperation(&n.Operation)
	if err != nil {
		return nil, fmt.Errorf("encode operation of node %s: %w", n.UUID, err)
	}
	return op, nil
}

// CreateNode inserts n and sets its ID and Revision.
func (s *Store) CreateNode(ctx context.Context, n *store.Node) error {
	n.Normalize()
	n.Revision = 1
	data, err := encodeNode(n)
	if err != nil {
		return err
	}
	op, err := encodeOperation(n)
	if err != nil {
		return err
	}
	err = s.pool.QueryRow(ctx, `INSERT INTO nodes (`+nodeCols+`)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21, $22, $23)
		RETURNING id`,
		n.UUID, n.Name, n.Revision, n.Driver, n.ProvisionState, n.PowerState, n.Maintenance, n.Retired,
		n.InstanceUUID, n.ResourceClass, n.Fault, n.Owner, n.Lessee, n.ConductorGroup, n.ChassisUUID,
		n.Description, n.Shard, n.Reservation, n.CreatedAt, n.UpdatedAt, n.ProvisionUpdatedAt, data, op).Scan(&n.ID)
	return mapErr(err, "create node "+n.UUID)
}

func scanNode(row pgx.Row) (*store.Node, error) {
	var (
		id, rev  int64
		data, op []byte
	)
	if err := row.Scan(&id, &rev, &data, &op); err != nil {
		return nil, err
	}
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
	n, err := scanNode(s.pool.QueryRow(ctx, `SELECT id, revision, data, operation FROM nodes
		WHERE uuid = $1 OR name = $1 ORDER BY uuid = $1 DESC LIMIT 1`, ident))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("node %s: %w", ident, store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("get node %s: %w", ident, err)
	}
	return n, nil
}

// updateNodeSQL is an optimistic node update and its history events as one
// statement, hence one transaction and one round trip: the UPDATE matches
// only the revision the caller read (at READ COMMITTED a concurrent writer's
// row is re-checked after its commit, so exactly one of two racing writers
// matches), and the INSERT takes its rows from the UPDATE's result, so a
// refused update writes none of its events. WITH ORDINALITY keeps the
// events' ids in the caller's order, which is the order ListEvents returns.
const updateNodeSQL = updateNodeHead + `
		RETURNING id` + updateNodeTail

// updateNodeFencedSQL is updateNodeSQL for a writer holding the node's
// lease ($28): it matches only while that lease is live.
const updateNodeFencedSQL = updateNodeHead + `
		AND EXISTS (SELECT 1 FROM node_leases WHERE node_uuid = $1 AND holder = $28 AND expires_at > now())
		RETURNING id` + updateNodeTail

const updateNodeHead = `WITH u AS (
		UPDATE nodes SET name = $2, revision = $3, driver = $4, provision_state = $5, power_state = $6,
			maintenance = $7, retired = $8, instance_uuid = $9, resource_class = $10, fault = $11, owner = $12,
			lessee = $13, conductor_group = $14, chassis_uuid = $15, description = $16, shard = $17,
			reservation = $18, updated_at = $19, provision_updated_at = $20, data = $21,
			operation = $22
		WHERE uuid = $1 AND revision = $23`

const updateNodeTail = `
	), ev AS (
		INSERT INTO events (uuid, node_uuid, created_at, data)
		SELECT e.uuid, e.node_uuid, e.created_at, e.data
		FROM u, unnest($24::text[], $25::text[], $26::timestamptz[], $27::bytea[])
			WITH ORDINALITY AS e (uuid, node_uuid, created_at, data, ord)
		ORDER BY e.ord
	)
	SELECT count(*) FROM u`

// UpdateNode writes n if nobody changed it since it was read, with its
// history events in the same transaction.
func (s *Store) UpdateNode(ctx context.Context, n *store.Node, events ...*store.Event) error {
	n.Normalize()
	now := time.Now().UTC()
	n.UpdatedAt = &now
	old := n.Revision
	n.Revision = old + 1
	err := s.updateNode(ctx, n, old, events)
	if err != nil {
		n.Revision = old
	}
	return err
}

func (s *Store) updateNode(ctx context.Context, n *store.Node, old int64, events []*store.Event) error {
	data, err := encodeNode(n)
	if err != nil {
		return err
	}
	op, err := encodeOperation(n)
	if err != nil {
		return err
	}
	evUUIDs := make([]string, len(events))
	evNodes := make([]string, len(events))
	evTimes := make([]time.Time, len(events))
	evData := make([][]byte, len(events))
	for i, e := range events {
		if evData[i], err = encodeEvent(e); err != nil {
			return err
		}
		evUUIDs[i], evNodes[i], evTimes[i] = e.UUID, e.NodeUUID, e.CreatedAt
	}
	var updated int
	q, args := updateNodeSQL, []any{
		n.UUID, n.Name, n.Revision, n.Driver, n.ProvisionState, n.PowerState, n.Maintenance, n.Retired,
		n.InstanceUUID, n.ResourceClass, n.Fault, n.Owner, n.Lessee, n.ConductorGroup, n.ChassisUUID,
		n.Description, n.Shard, n.Reservation, n.UpdatedAt, n.ProvisionUpdatedAt, data, op, old,
		evUUIDs, evNodes, evTimes, evData}
	holder := store.LeaseHolder(ctx)
	if holder != "" {
		q, args = updateNodeFencedSQL, append(args, holder)
	}
	err = s.pool.QueryRow(ctx, q, args...).Scan(&updated)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && (pgErr.Code == serializationFailure || pgErr.Code == deadlockDetected) {
		// Another writer won; the statement, events included, was rolled back.
		return fmt.Errorf("update node %s at revision %d: %w", n.UUID, old, store.ErrConflict)
	}
	if err != nil {
		return mapErr(err, "update node "+n.UUID)
	}
	if updated == 1 {
		return nil
	}
	// Nothing matched: the node is gone or another writer got there first.
	// This read is outside the update's snapshot, which is harmless: either
	// answer was true at some moment after the update was refused.
	var exists bool
	if err := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM nodes WHERE uuid = $1)`, n.UUID).Scan(&exists); err != nil {
		return fmt.Errorf("update node %s: %w", n.UUID, err)
	}
	if !exists {
		return fmt.Errorf("node %s: %w", n.UUID, store.ErrNotFound)
	}
	if holder != "" {
		var held bool
		if err := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM node_leases
			WHERE node_uuid = $1 AND holder = $2 AND expires_at > now())`, n.UUID, holder).Scan(&held); err != nil {
			return fmt.Errorf("update node %s: %w", n.UUID, err)
		}
		if !held {
			return fmt.Errorf("update node %s as %s: %w", n.UUID, holder, store.ErrLeaseLost)
		}
	}
	return fmt.Errorf("update node %s at revision %d: %w", n.UUID, old, store.ErrConflict)
}

// DeleteNode removes the node with its ports, portgroups, inventory,
// history and step results, in one statement (so one transaction), if nobody changed it since
// n was read. At READ COMMITTED a writer that got there first makes the
// revision condition fail when the DELETE re-checks the row it waited for.
func (s *Store) DeleteNode(ctx context.Context, n *store.Node) error {
	uuid := n.UUID
	var deleted int
	err := s.pool.QueryRow(ctx, `WITH d AS (
			DELETE FROM nodes WHERE uuid = $1 AND revision = $2 RETURNING uuid
		), r AS (
			DELETE FROM resources WHERE node_uuid IN (SELECT uuid FROM d) AND kind IN ('port', 'portgroup', 'inventory')
		), e AS (
			DELETE FROM events WHERE node_uuid IN (SELECT uuid FROM d)
		), l AS (
			DELETE FROM node_leases WHERE node_uuid IN (SELECT uuid FROM d)
		), sr AS (
			DELETE FROM step_results WHERE node_uuid IN (SELECT uuid FROM d)
		)
		SELECT count(*) FROM d`, uuid, n.Revision).Scan(&deleted)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && (pgErr.Code == serializationFailure || pgErr.Code == deadlockDetected) {
		return fmt.Errorf("delete node %s at revision %d: %w", uuid, n.Revision, store.ErrConflict)
	}
	if err != nil {
		return fmt.Errorf("delete node %s: %w", uuid, err)
	}
	if deleted == 1 {
		return nil
	}
	var exists bool
	if err := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM nodes WHERE uuid = $1)`, uuid).Scan(&exists); err != nil {
		return fmt.Errorf("delete node %s: %w", uuid, err)
	}
	if !exists {
		return fmt.Errorf("node %s: %w", uuid, store.ErrNotFound)
	}
	return fmt.Errorf("delete node %s at revision %d: %w", uuid, n.Revision, store.ErrConflict)
}

// sortExpr maps API sort keys to SQL expressions. COALESCE keeps keyset
// comparisons well defined for NULLs, which sort first as in the SQLite
// store (the empty string and '-infinity' are below every other value).
func sortExpr(key string) (string, bool) {
	switch key {
	case "id", "uuid", "created_at", "provision_state", "driver", "maintenance", "conductor_group", "retired":
		return key, true // NOT NULL columns
	case "name", "power_state", "resource_class", "instance_uuid", "owner":
		return "COALESCE(" + key + ", '')", true
	case "updated_at", "provision_updated_at":
		return "COALESCE(" + key + ", '-infinity')", true
	}
	return "", false
}

// ListNodes returns nodes matching f, one keyset page at a time.
func (s *Store) ListNodes(ctx context.Context, f store.NodeFilter, p store.Page) ([]*store.Node, error) {
	var args params
	where := nodeWhere(f, &args)
	return listPage(ctx, s, "nodes", "id, revision, data, operation", where, args, p, scanNode)
}

// nodeWhere turns a filter into SQL conditions on indexed columns.
func nodeWhere(f store.NodeFilter, args *params) []string {
	var where []string
	eq := func(col string, v *string) {
		if v != nil {
			where = append(where, col+" = "+args.add(*v))
		}
	}
	flag := func(col string, v *bool) {
		if v != nil {
			where = append(where, col+" = "+args.add(*v))
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
	eq("provision_state", f.ProvisionState)
	flag("maintenance", f.Maintenance)
	flag("retired", f.Retired)
	eq("driver", f.Driver)
	eq("resource_class", f.ResourceClass)
	eq("fault", f.Fault)
	eq("owner", f.Owner)
	eq("lessee", f.Lessee)
	eq("conductor_group", f.ConductorGroup)
	eq("chassis_uuid", f.ChassisUUID)
	eq("instance_uuid", f.InstanceUUID)
	eq("shard", f.Shard)
	isNull("instance_uuid", f.Associated)
	isNull("reservation", f.Reserved)
	if f.DescriptionContains != nil {
		// strpos, not LIKE: the text is a plain substring, % and _ included.
		where = append(where, "strpos(COALESCE(description, ''), "+args.add(*f.DescriptionContains)+") > 0")
	}
	if f.NameContains != nil {
		where = append(where, "strpos(lower(COALESCE(name, '')), lower("+args.add(*f.NameContains)+")) > 0")
	}
	if f.TextContains != nil {
		p := args.add(*f.TextContains)
		where = append(where, "(strpos(lower(COALESCE(name, '')), lower("+p+")) > 0 OR strpos(lower(COALESCE(description, '')), lower("+p+")) > 0 OR strpos(uuid, lower("+p+")) > 0)")
	}
	return where
}

// listPage runs a keyset-paginated query on table: rows sorted by the sort
// expression, ties broken by id, starting after the marker row. The marker
// is looked up in the same statement (a row comparison against a subquery,
// which a (expr, id) index can serve); only when the page comes back empty
// does a second query tell a missing marker from the end of the list.
func listPage[T any](ctx context.Context, s *Store, table, cols string, where []string, args params, p store.Page,
	scan func(pgx.Row) (T, error)) ([]T, error) {
	key := p.SortKey
	if key == "" {
		key = "id"
	}
	expr, ok := sortExpr(key)
	if !ok || (table != "nodes" && key != "id") {
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
	q := `SELECT ` + cols + ` FROM ` + table
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	if key == "id" {
		q += " ORDER BY id " + dir
	} else {
		q += fmt.Sprintf(" ORDER BY %s %s, id %s", expr, dir, dir)
	}
	if p.Limit > 0 {
		q += " LIMIT " + args.add(p.Limit)
	}
	rows, err := s.pool.Query(ctx, q, args...)
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
		var exists bool
		if err := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM `+table+` WHERE uuid = $1)`, p.Marker).Scan(&exists); err != nil {
			return nil, fmt.Errorf("read marker: %w", err)
		}
		if !exists {
			return nil, fmt.Errorf("marker %s: %w", p.Marker, store.ErrNotFound)
		}
	}
	return out, nil
}

// ListNodeSummaries lists nodes reading only indexed columns.
func (s *Store) ListNodeSummaries(ctx context.Context, f store.NodeFilter, p store.Page) ([]*store.NodeSummary, error) {
	var args params
	where := nodeWhere(f, &args)
	return listPage(ctx, s, "nodes", "id, uuid, name, instance_uuid, maintenance, power_state, provision_state, reservation",
		where, args, p, func(row pgx.Row) (*store.NodeSummary, error) {
			var n store.NodeSummary
			err := row.Scan(&n.ID, &n.UUID, &n.Name, &n.InstanceUUID, &n.Maintenance, &n.PowerState, &n.ProvisionState, &n.Reservation)
			return &n, err
		})
}

// CountNodesByState counts nodes per provision state (for metrics).
func (s *Store) CountNodesByState(ctx context.Context) (map[string]int, error) {
	rows, err := s.pool.Query(ctx, `SELECT provision_state, count(*) FROM nodes GROUP BY provision_state`)
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
