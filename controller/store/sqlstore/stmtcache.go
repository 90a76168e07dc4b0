package sqlstore

import (
	"context"
	"database/sql"
	"sync"
)

// stmtCache keeps the statements the store runs prepared, per database
// handle, where the dialect asks for it (SQLite: a node create parsed its
// INSERT of 24 columns at each call, 13% of the request's CPU).
//
// Statements are keyed by their text, which the store builds from
// constants and a bounded set of shapes (placeholders carry the values),
// so the cache is bounded by the code, not by clients; maxStmts guards
// against a shape that grows with input (a multi-row INSERT of n events),
// which is run unprepared past it.
//
// A statement first met inside a transaction cannot be prepared then: the
// writer has one connection, which the transaction holds, and preparing on
// the handle waits for a free one. It is noted and prepared after the
// transaction ends (fill), so the next transaction finds it.
type stmtCache struct {
	mu      sync.Mutex
	m       map[stmtKey]*sql.Stmt
	pending map[string]bool // writer statements met inside a transaction
}

type stmtKey struct {
	db *sql.DB
	q  string
}

const maxStmts = 512

func (c *stmtCache) lookup(db *sql.DB, q string) *sql.Stmt {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m[stmtKey{db, q}]
}

// prepare returns q prepared on db, preparing it on first use; nil when it
// cannot be prepared (the caller then runs q as text, which reports the
// error). The lock is not held while preparing, which may wait for a
// connection.
func (c *stmtCache) prepare(ctx context.Context, db *sql.DB, q string) *sql.Stmt {
	k := stmtKey{db, q}
	c.mu.Lock()
	st, ok := c.m[k]
	full := len(c.m) >= maxStmts
	c.mu.Unlock()
	if ok || full {
		return st
	}
	// The statement outlives this request: ctx only bounds the preparing.
	st, err := db.PrepareContext(context.WithoutCancel(ctx), q)
	if err != nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if had, ok := c.m[k]; ok { // another caller prepared it meanwhile
		st.Close()
		return had
	}
	if c.m == nil {
		c.m = map[stmtKey]*sql.Stmt{}
	}
	c.m[k] = st
	return st
}

func (c *stmtCache) want(q string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.pending) < maxStmts {
		if c.pending == nil {
			c.pending = map[string]bool{}
		}
		c.pending[q] = true
	}
}

// fill prepares on db the statements transactions met unprepared; call it
// with no transaction open on this goroutine.
func (c *stmtCache) fill(ctx context.Context, db *sql.DB) {
	c.mu.Lock()
	pending := c.pending
	c.pending = nil
	c.mu.Unlock()
	for q := range pending {
		c.prepare(ctx, db, q)
	}
}

func (c *stmtCache) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, st := range c.m {
		st.Close()
	}
	c.m = nil
}

// prepared returns q prepared for db when the store caches statements:
// db is the writer or the reader handle, or a transaction on the writer
// (every transaction the store itself opens is; a snapshot view, whose
// transaction is on the reader, has no cache). ok is false when q is to
// be run as text.
func (s *Store) prepared(ctx context.Context, db execer, q string) (*sql.Stmt, bool) {
	if s.stmts == nil {
		return nil, false
	}
	switch d := db.(type) {
	case *sql.DB:
		st := s.stmts.prepare(ctx, d, q)
		return st, st != nil
	case *sql.Tx:
		st := s.stmts.lookup(s.wdb, q)
		if st == nil {
			s.stmts.want(q)
			return nil, false
		}
		// Prepared on the writer's one connection, which the transaction
		// holds: StmtContext reuses it there.
		return d.StmtContext(ctx, st), true
	}
	return nil, false
}

// afterTx prepares what the transaction that just ended ran unprepared.
func (s *Store) afterTx(ctx context.Context) {
	if s.stmts != nil && s.wdb != nil {
		s.stmts.fill(ctx, s.wdb)
	}
}
