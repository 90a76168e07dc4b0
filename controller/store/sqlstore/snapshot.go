package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/anvil-metal/anvil/controller/store"
)

// errReadOnly refuses writes that need a transaction of their own inside
// a snapshot view.
var errReadOnly = errors.New("store: read-only snapshot")

// ReadSnapshot calls fn with a view of the store that reads one consistent
// snapshot of the database, so that a multi-query read (an export) sees no
// write that commits meanwhile: PostgreSQL's REPEATABLE READ, READ ONLY;
// on SQLite a read transaction on a WAL reader. The view is for reading:
// writes through it fail. It is valid only during fn.
func (s *Store) ReadSnapshot(ctx context.Context, fn func(st store.Store) error) error {
	if s.rdb == nil {
		return errReadOnly // already a view
	}
	tx, err := s.rdb.BeginTx(ctx, s.d.snapshotTx())
	if err != nil {
		return fmt.Errorf("begin snapshot: %w", err)
	}
	defer tx.Rollback() // read only: nothing to commit
	view := &Store{d: s.d, w: tx, r: tx, getNode: tx.StmtContext(ctx, s.getNode)}
	defer view.getNode.Close()
	return fn(view)
}

var _ interface {
	ReadSnapshot(ctx context.Context, fn func(st store.Store) error) error
} = (*Store)(nil)

// snapshotTx is how ReadSnapshot begins its transaction.
func (sqliteDialect) snapshotTx() *sql.TxOptions { return nil }

func (pgDialect) snapshotTx() *sql.TxOptions {
	return &sql.TxOptions{Isolation: sql.LevelRepeatableRead, ReadOnly: true}
}
