// Package sqlite opens the embedded, pure-Go (no cgo) SQLite store: one
// file, created on first start, locked against a second controller, and
// migrated in code. The queries are the sqlstore package's, in its SQLite
// dialect.
package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"syscall"

	_ "modernc.org/sqlite" // registers the "sqlite" database/sql driver

	"github.com/anvil-metal/anvil/controller/store/sqlstore"
)

// Store is a store.Store on SQLite.
type Store = sqlstore.Store

// Open opens (creating if needed) the database at path; ":memory:" gives a
// throwaway database.
func Open(ctx context.Context, path string) (*Store, error) {
	if path == "" {
		return nil, errors.New("sqlite: empty database path")
	}
	pragmas := "_pragma=busy_timeout(10000)&_pragma=foreign_keys(1)"
	if path == ":memory:" {
		// One connection shared by readers and the writer: every
		// connection to :memory: would otherwise be a different database.
		db, err := sql.Open("sqlite", "file::memory:?"+pragmas)
		if err != nil {
			return nil, fmt.Errorf("sqlite: open memory database: %w", err)
		}
		db.SetMaxOpenConns(1)
		s, err := sqlstore.New(ctx, sqlstore.Options{Dialect: sqlstore.SQLite(), Writer: db, Reader: db, GroupCommit: true})
		if err != nil {
			return nil, fmt.Errorf("sqlite: %w", err)
		}
		return s, nil
	}
	lock, err := lockFile(path)
	if err != nil {
		return nil, err
	}
	// synchronous(FULL): a state change reported to a client must survive a
	// power loss of the controller host, not only a crash of the process.
	dsn := "file:" + path + "?" + pragmas + "&_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)"
	w, err := sql.Open("sqlite", dsn)
	if err != nil {
		lock.Close()
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	// A single writer connection: SQLite allows one writer anyway, and
	// queuing in-process avoids "database is locked" storms.
	w.SetMaxOpenConns(1)
	// Readers keep a page cache of 512 KiB each instead of SQLite's 2 MiB:
	// four of them filled theirs during concurrent detailed lists, 12 MB
	// of a 64 MB peak, for no measured gain in list time (the kernel's
	// page cache holds the file anyway; anvil-bench ironic, same run:
	// 64.4 -> 52.6 MB peak, p50 30 -> 27 ms).
	r, err := sql.Open("sqlite", dsn+"&mode=ro&_pragma=cache_size(-512)")
	if err != nil {
		w.Close()
		lock.Close()
		return nil, fmt.Errorf("sqlite: open %s for reading: %w", path, err)
	}
	r.SetMaxOpenConns(4) // readers run beside the writer (WAL)
	s, err := sqlstore.New(ctx, sqlstore.Options{Dialect: sqlstore.SQLite(), Writer: w, Reader: r,
		GroupCommit: true, Durable: true, Close: lock.Close}) // closing the file releases the flock
	if err != nil {
		return nil, fmt.Errorf("sqlite: %w", err)
	}
	return s, nil
}

// lockFile takes an exclusive advisory lock (flock) on the database file
// for as long as the store is open. An SQLite database serves one
// controller: two on one file would both work the same nodes (leases are
// kept by this process's clock), and an export next to a running
// controller would not be a consistent copy. The kernel drops the lock when
// the process dies, so a killed controller never leaves it behind.
func lockFile(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("sqlite: database %s is in use by another anvil-controller (or an export/import): "+
				"an SQLite database serves one controller; stop the other one, or use PostgreSQL for several", path)
		}
		return nil, fmt.Errorf("sqlite: lock %s: %w", path, err)
	}
	return f, nil
}
