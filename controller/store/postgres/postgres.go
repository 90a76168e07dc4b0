// Package postgres opens the PostgreSQL store, for fleets where several
// controllers share one database: the sqlstore package's queries in its
// PostgreSQL dialect, plus notifications between controllers. Everything
// concurrent relies on the database, not on the process: optimistic node
// updates are a single conditional UPDATE, migrations take an advisory
// lock, and nothing is cached between calls.
package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/anvil-metal/anvil/controller/store"
	"github.com/anvil-metal/anvil/controller/store/sqlstore"
)

// Store is a store.Store on PostgreSQL that also carries notifications
// between controllers (store.Notifier).
type Store struct {
	*sqlstore.Store
	conn *pgx.ConnConfig // for ListenNodes' own connection
}

var (
	_ store.Store    = (*Store)(nil)
	_ store.Notifier = (*Store)(nil)
)

// Open connects to the database at url (postgres://user:pass@host/db?...,
// or any connection string pgx accepts, including pgxpool's pool_max_conns,
// pool_max_conn_lifetime and pool_max_conn_idle_time, and pgx's
// default_query_exec_mode, e.g. "exec" behind PgBouncer in transaction
// mode) and migrates the schema.
//
// Queries go through database/sql with pgx's driver: pgx still prepares
// each statement once per connection and caches it (the queries are fixed
// strings, or a few shapes per list filter), and errors still arrive as
// *pgconn.PgError with the SQLSTATE and constraint name the dialect needs.
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
	// serialization failure, which the store reports as ErrConflict too.
	if _, ok := cfg.ConnConfig.RuntimeParams["application_name"]; !ok {
		// Lets a DBA tell the controllers' sessions apart in pg_stat_activity.
		cfg.ConnConfig.RuntimeParams["application_name"] = "anvil-controller"
	}
	db := stdlib.OpenDB(*cfg.ConnConfig)
	db.SetMaxOpenConns(int(cfg.MaxConns))
	db.SetMaxIdleConns(int(cfg.MaxConns))
	db.SetConnMaxLifetime(cfg.MaxConnLifetime)
	db.SetConnMaxIdleTime(cfg.MaxConnIdleTime)
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("postgres: connect: %w", err)
	}
	s, err := sqlstore.New(ctx, sqlstore.Options{Dialect: sqlstore.Postgres(), Writer: db})
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	return &Store{Store: s, conn: cfg.ConnConfig}, nil
}

// notifyChannel carries "holder\nnode" payloads between controllers.
const notifyChannel = "anvil_nodes"

// NotifyNode asks holder to process the node (PostgreSQL NOTIFY: delivered
// to every listening controller at commit; only holder acts on it).
func (s *Store) NotifyNode(ctx context.Context, nodeUUID, holder string) error {
	if _, err := s.DB().ExecContext(ctx, `SELECT pg_notify($1, $2)`, notifyChannel, holder+"\n"+nodeUUID); err != nil {
		return fmt.Errorf("notify %s about node %s: %w", holder, nodeUUID, err)
	}
	return nil
}

// ListenNodes calls fn for notifications addressed to holder. It listens on
// a connection of its own, outside the pool, because LISTEN belongs to a
// session and the wait would otherwise pin a pooled connection.
func (s *Store) ListenNodes(ctx context.Context, holder string, fn func(nodeUUID string)) error {
	conn, err := pgx.ConnectConfig(ctx, s.conn.Copy())
	if err != nil {
		return fmt.Errorf("listen for node notifications: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, `LISTEN `+notifyChannel); err != nil {
		return fmt.Errorf("listen for node notifications: %w", err)
	}
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("wait for node notifications: %w", err)
		}
		to, node, ok := strings.Cut(n.Payload, "\n")
		if ok && to == holder {
			fn(node)
		}
	}
}
