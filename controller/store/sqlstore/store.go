// Package sqlstore is store.Store over database/sql: one implementation of
// every query for SQLite (the embedded default, one controller per file)
// and PostgreSQL (several controllers sharing a database). Queries are
// written once; a Dialect supplies what the two spell differently, and the
// schema is one ordered list of migrations with each database's text.
//
// The model is the same on both: indexed columns beside a JSON document per
// row, keyset paging, optimistic node updates by revision, node leases by a
// clock the dialect chooses. Opening a database (files, locks, pools,
// notifications) is the business of the sqlite and postgres packages.
package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/anvil-metal/anvil/controller/store"
)

// Store is a store.Store on a SQL database.
type Store struct {
	d Dialect
	// w runs writes and r reads: the database handles wdb and rdb, or in
	// a snapshot view (ReadSnapshot) its transaction.
	w, r execer
	wdb  *sql.DB // SQLite: a single connection, as SQLite has one writer
	rdb  *sql.DB // may be wdb

	// durable: an SQLite file, whose volatile batches may skip the fsync.
	durable bool
	close   func() error // releases what the opener holds (a file lock)
	getNode *sql.Stmt    // the hottest statement, prepared once per connection
	stmts   *stmtCache   // nil: statements are sent as text (see Dialect.prepares)
	// updates feeds the group committer (SQLite): nil when node updates go
	// straight to the database (PostgreSQL, where controllers update
	// concurrently and a batch would hold row locks for all its members).
	updates chan *updateReq
	stopped chan struct{}
}

var _ store.Store = (*Store)(nil)

// Options say how New uses the database handles it is given.
type Options struct {
	Dialect Dialect
	// Writer runs every write; Reader every read (it may be Writer).
	Writer, Reader *sql.DB
	// GroupCommit queues node updates for one writer goroutine that
	// commits them in batches (one fsync for many heartbeats).
	GroupCommit bool
	// Durable marks an SQLite file (not :memory:): a batch made only of
	// store.Volatile writes is then committed with synchronous NORMAL.
	Durable bool
	// Close, if set, runs after the database handles are closed.
	Close func() error
}

// New migrates the database to the current schema and returns the store.
// On error the handles are closed (and Options.Close run).
func New(ctx context.Context, o Options) (*Store, error) {
	s := &Store{d: o.Dialect, wdb: o.Writer, rdb: o.Reader, durable: o.Durable, close: o.Close}
	if s.rdb == nil {
		s.rdb = s.wdb
	}
	s.w, s.r = s.wdb, s.rdb
	if s.d.prepares() {
		s.stmts = &stmtCache{}
	}
	if err := s.migrate(ctx); err != nil {
		return nil, errors.Join(err, s.closeDBs())
	}
	var err error
	if s.getNode, err = s.rdb.PrepareContext(ctx, s.d.rebind(`SELECT `+nodeFullCols+` FROM nodes n
		LEFT JOIN agent_state a ON a.node_uuid = n.uuid
		WHERE n.uuid = $1 OR n.name = $1 ORDER BY n.uuid = $1 DESC LIMIT 1`)); err != nil {
		return nil, errors.Join(fmt.Errorf("prepare: %w", err), s.closeDBs())
	}
	if o.GroupCommit {
		s.updates = make(chan *updateReq, 256)
		s.stopped = make(chan struct{})
		go s.committer()
	}
	return s, nil
}

// DB is the writer handle, for tests and maintenance tools that need to
// look under the store.
func (s *Store) DB() *sql.DB { return s.wdb }

// Close stops the committer (after the queued updates) and closes the
// database.
func (s *Store) Close() error {
	if s.updates != nil {
		close(s.updates)
		<-s.stopped
		s.updates = nil
	}
	if s.getNode != nil {
		s.getNode.Close()
		s.getNode = nil
	}
	if s.stmts != nil {
		s.stmts.close()
	}
	return s.closeDBs()
}

func (s *Store) closeDBs() error {
	if s.wdb == nil {
		return nil // a snapshot view: its transaction ends with ReadSnapshot
	}
	err := s.wdb.Close()
	if s.rdb != s.wdb {
		err = errors.Join(err, s.rdb.Close())
	}
	if s.close != nil {
		err = errors.Join(err, s.close())
		s.close = nil
	}
	return err
}

// exec, query and queryRow run a $N query on db in the store's dialect.
func (s *Store) exec(ctx context.Context, db execer, q string, args ...any) (sql.Result, error) {
	q = s.d.rebind(q)
	if st, ok := s.prepared(ctx, db, q); ok {
		return st.ExecContext(ctx, args...)
	}
	return db.ExecContext(ctx, q, args...)
}

// query is not prepared: multi-row reads (lists, with their filters,
// sorts and IN lists) come in many shapes, and parsing is little beside
// reading their rows.
func (s *Store) query(ctx context.Context, db execer, q string, args ...any) (*sql.Rows, error) {
	return db.QueryContext(ctx, s.d.rebind(q), args...)
}

func (s *Store) queryRow(ctx context.Context, db execer, q string, args ...any) *sql.Row {
	q = s.d.rebind(q)
	if st, ok := s.prepared(ctx, db, q); ok {
		return st.QueryRowContext(ctx, args...)
	}
	return db.QueryRowContext(ctx, q, args...)
}

// execer is *sql.DB, *sql.Tx or *sql.Conn.
type execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// mapErr turns unique violations into store sentinels and wraps the rest.
// With a sentinel it does not pass the database's message on: it may quote
// the duplicate key, and callers show the error to API clients.
func (s *Store) mapErr(err error, what string) error {
	if err == nil {
		return nil
	}
	if sentinel, _ := s.d.duplicate(err); sentinel != nil {
		return fmt.Errorf("%s: %w", what, sentinel)
	}
	if s.d.missingParent(err) {
		// a row it names is gone (a node's chassis)
		return fmt.Errorf("%s: what it refers to: %w", what, store.ErrNotFound)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// SchemaVersion reports how many migrations are applied.
func (s *Store) SchemaVersion(ctx context.Context) (int, error) {
	var v int
	if err := s.queryRow(ctx, s.r, `SELECT COALESCE(MAX(version), 0) FROM schema_migrations`).Scan(&v); err != nil {
		return 0, fmt.Errorf("read schema version: %w", err)
	}
	return v, nil
}

// scanStrings reads a one-column result.
func scanStrings(rows *sql.Rows, err error) ([]string, error) {
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var v string
		if err := rows.Scan(&v); err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

// nullable stores an empty string (an allocation not yet placed) as NULL.
func nullable(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
