package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/anvil-metal/anvil/controller/store"
)

// Dialect is what differs between the databases the store runs on. Every
// query is written once, with $N placeholders; the dialect supplies the
// few fragments the two spell differently (the lease clock, substring
// search, how NULL timestamps sort, how a duplicate key is reported) and
// the schema's types. Its methods are unexported: SQLite and Postgres are
// the only dialects.
type Dialect interface {
	// rebind turns the $N placeholders of q into the database's own.
	rebind(q string) string
	// stamp is a timestamp column's value (SQLite: fixed-width text, so
	// that text order is time order).
	stamp(t *time.Time) any
	// now is the lease clock's current time; later is now plus d. SQLite
	// measures with this process's clock (one controller per file),
	// PostgreSQL with the server's, so controllers' clocks need not agree.
	now(p *params) string
	later(p *params, d time.Duration) string
	// instant is a DHCP lease expiry (by the controller's clock) and
	// scanInstant reads one back.
	instant(t time.Time) any
	scanInstant(v any) (time.Time, error)
	// minTime is a literal below every timestamp, so NULLs sort first.
	minTime() string
	// contains is SQL for "needle is a substring of hay" (no wildcards).
	contains(hay, needle string) string
	// docText is SQL for the string member key of a row's JSON document
	// (the data column), NULL when absent: for the rare filter on a
	// field no column holds. key is a constant, never a client's.
	docText(key string) string
	// duplicate reports whether err is a unique violation, and the store
	// sentinel for it (nil when the constraint has none).
	duplicate(err error) (sentinel error, unique bool)
	// conflict reports a lost race the database detected (serialization
	// failure, deadlock): the caller's write did not happen.
	conflict(err error) bool
	// missingParent reports a foreign key violation: the row refers to a
	// node that does not exist.
	missingParent(err error) bool
	// lockMigrations serialises controllers migrating one database.
	lockMigrations(ctx context.Context, tx *sql.Tx) error
	// pick chooses the dialect's text of a schema change.
	pick(m migration) string
	// narrowUpdates: try an UPDATE that rewrites no index first (SQLite;
	// PostgreSQL gets the same from HOT updates).
	narrowUpdates() bool
	// pageIDsFirst: select a sorted page's ids before reading its rows
	// (SQLite sorts documents otherwise; PostgreSQL walks an index).
	pageIDsFirst() bool
	// prepares: keep each statement prepared for reuse (SQLite, where
	// parsing a small statement costs about as much as running it;
	// PostgreSQL's driver keeps its own statement cache).
	prepares() bool
	// oneStatement, if the database can modify data in a WITH clause,
	// makes one statement of a node UPDATE (it adds RETURNING uuid), the
	// write of its agent state (when write: agent, or its deletion when
	// nil) and the insertion of its events, the last two only if the
	// UPDATE matched; the statement returns one row: how many nodes it
	// updated. One round trip, no transaction to open. events are (uuid,
	// node_uuid, created_at, data) rows. ok is false on SQLite.
	oneStatement(update string, p *params, agent []byte, write bool, events [][4]any) (q string, ok bool)
	// snapshotTx begins ReadSnapshot's transaction.
	snapshotTx() *sql.TxOptions
}

// params collects positional query arguments while a query is assembled.
type params []any

// add appends v and returns its placeholder.
func (p *params) add(v any) string {
	*p = append(*p, v)
	return "$" + strconv.Itoa(len(*p))
}

// SQLite is the dialect of SQLite (modernc.org/sqlite).
func SQLite() Dialect { return sqliteDialect{} }

// Postgres is the dialect of PostgreSQL (pgx through database/sql).
func Postgres() Dialect { return pgDialect{} }

// ---- SQLite ----

type sqliteDialect struct{}

// timeFormat is fixed-width so that text comparison orders timestamps.
const timeFormat = "2006-01-02T15:04:05.000000Z"

// rebind turns $N into ?N, SQLite's numbered parameter: the queries hold
// no other '$'.
func (sqliteDialect) rebind(q string) string {
	if !strings.Contains(q, "$") {
		return q
	}
	b := []byte(q)
	for i := 0; i+1 < len(b); i++ {
		if b[i] == '$' && b[i+1] >= '0' && b[i+1] <= '9' {
			b[i] = '?'
		}
	}
	return string(b)
}

func (sqliteDialect) stamp(t *time.Time) any {
	if t == nil {
		return nil
	}
	return t.UTC().Format(timeFormat)
}

func (sqliteDialect) now(p *params) string { return p.add(time.Now().UnixNano()) }

func (sqliteDialect) later(p *params, d time.Duration) string {
	return p.add(time.Now().Add(d).UnixNano())
}

func (sqliteDialect) instant(t time.Time) any { return t.UnixNano() }

func (sqliteDialect) scanInstant(v any) (time.Time, error) {
	ns, ok := v.(int64)
	if !ok {
		return time.Time{}, errors.New("expiry is not an integer")
	}
	return time.Unix(0, ns), nil
}

func (sqliteDialect) minTime() string { return "''" }

func (sqliteDialect) docText(key string) string {
	return "json_extract(CAST(data AS TEXT), '$." + key + "')"
}

func (sqliteDialect) contains(hay, needle string) string {
	return "instr(" + hay + ", " + needle + ") > 0"
}

func (sqliteDialect) duplicate(err error) (error, bool) {
	msg := err.Error()
	if !strings.Contains(msg, "UNIQUE constraint failed") {
		return nil, false
	}
	_, cols, _ := strings.Cut(msg, "UNIQUE constraint failed:")
	switch {
	case strings.Contains(cols, ".name"):
		return store.ErrDuplicateName, true
	case strings.Contains(cols, ".uuid"):
		return store.ErrDuplicateUUID, true
	case strings.Contains(cols, ".address"):
		return store.ErrDuplicateAddr, true
	}
	return nil, true
}

func (sqliteDialect) conflict(error) bool { return false }

func (sqliteDialect) missingParent(err error) bool {
	return strings.Contains(err.Error(), "FOREIGN KEY constraint failed")
}

// lockMigrations: the file lock keeps every other controller out already.
func (sqliteDialect) lockMigrations(context.Context, *sql.Tx) error { return nil }

func (sqliteDialect) oneStatement(string, *params, []byte, bool, [][4]any) (string, bool) {
	return "", false
}

func (sqliteDialect) pick(m migration) string { return m.sqlite }
func (sqliteDialect) narrowUpdates() bool     { return true }
func (sqliteDialect) pageIDsFirst() bool      { return true }
func (sqliteDialect) prepares() bool          { return true }

// ---- PostgreSQL ----

type pgDialect struct{}

// SQLSTATEs the store interprets.
const (
	uniqueViolation      = "23505"
	serializationFailure = "40001" // a concurrent update under REPEATABLE READ or SERIALIZABLE
	deadlockDetected     = "40P01"
	foreignKeyViolation  = "23503"
)

// migrationLockKey is the pg_advisory_xact_lock key that serialises schema
// migrations of controllers starting at the same time against one database
// ("anvil" in ASCII). Advisory locks are scoped to the database.
const migrationLockKey int64 = 0x616e76696c

func (pgDialect) rebind(q string) string { return q }

func (pgDialect) stamp(t *time.Time) any {
	if t == nil {
		return nil
	}
	return *t
}

func (pgDialect) now(*params) string { return "now()" }

func (pgDialect) later(p *params, d time.Duration) string {
	return "now() + " + p.add(d.Microseconds()) + "::bigint * interval '1 microsecond'"
}

func (pgDialect) instant(t time.Time) any { return t }

func (pgDialect) scanInstant(v any) (time.Time, error) {
	t, ok := v.(time.Time)
	if !ok {
		return time.Time{}, errors.New("expiry is not a timestamp")
	}
	return t, nil
}

func (pgDialect) minTime() string { return "'-infinity'" }

// contains uses strpos, not LIKE: the text is a plain substring, % and _
// included.
func (pgDialect) docText(key string) string {
	return "(convert_from(data, 'UTF8')::jsonb ->> '" + key + "')"
}

func (pgDialect) contains(hay, needle string) string {
	return "strpos(" + hay + ", " + needle + ") > 0"
}

// duplicate names the sentinel for a violated unique constraint or index
// (see migrations, which name every one).
func (pgDialect) duplicate(err error) (error, bool) {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != uniqueViolation {
		return nil, false
	}
	switch pgErr.ConstraintName {
	case "nodes_uuid_key", "resources_uuid_key", "events_uuid_key", "chassis_uuid_key", "deploy_templates_uuid_key",
		"inspection_rules_uuid_key", "runbooks_uuid_key":
		return store.ErrDuplicateUUID, true
	case "nodes_name_key", "resources_name", "deploy_templates_name_key", "runbooks_name_key":
		return store.ErrDuplicateName, true
	case "resources_address":
		return store.ErrDuplicateAddr, true
	}
	return nil, true
}

func (pgDialect) conflict(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Code == serializationFailure || pgErr.Code == deadlockDetected)
}

func (pgDialect) missingParent(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == foreignKeyViolation
}

// lockMigrations takes the migration lock for the transaction, so
// controllers started together against an empty database queue up instead
// of racing to create the same tables.
func (pgDialect) lockMigrations(ctx context.Context, tx *sql.Tx) error {
	_, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock($1)`, migrationLockKey)
	return err
}

// oneStatement: the writes take their rows from the UPDATE's result, so a
// refused update writes nothing else; the ord column keeps the events' ids
// in the caller's order, which is the order ListEvents returns.
func (pgDialect) oneStatement(update string, p *params, agent []byte, write bool, events [][4]any) (string, bool) {
	var b strings.Builder
	b.WriteString("WITH u AS (" + update + " RETURNING uuid)")
	switch {
	case write && agent != nil:
		b.WriteString(", a AS (INSERT INTO agent_state (node_uuid, data) SELECT uuid, " + p.add(agent) + "::bytea FROM u\n\t\t" +
			"ON CONFLICT (node_uuid) DO UPDATE SET data = excluded.data)")
	case write:
		b.WriteString(", a AS (DELETE FROM agent_state WHERE node_uuid IN (SELECT uuid FROM u))")
	}
	if len(events) > 0 {
		b.WriteString(", e AS (INSERT INTO events (uuid, node_uuid, created_at, data)\n\t\t" +
			"SELECT v.uuid, v.node_uuid, v.created_at, v.data FROM u, (VALUES ")
		for i, e := range events {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString("(" + p.add(e[0]) + "::text, " + p.add(e[1]) + "::text, " + p.add(e[2]) + "::timestamptz, " +
				p.add(e[3]) + "::bytea, " + strconv.Itoa(i) + ")")
		}
		b.WriteString(") AS v (uuid, node_uuid, created_at, data, ord) ORDER BY v.ord)")
	}
	b.WriteString(" SELECT count(*) FROM u")
	return b.String(), true
}

func (pgDialect) pick(m migration) string { return m.postgres }
func (pgDialect) narrowUpdates() bool     { return false }
func (pgDialect) pageIDsFirst() bool      { return false }
func (pgDialect) prepares() bool          { return false }
