package sqlstore

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	json "github.com/goccy/go-json"

	"github.com/anvil-metal/anvil/controller/store"
)

// migrate applies the missing migrations one transaction at a time. Each
// transaction first takes the dialect's migration lock and re-reads the
// version under it, so controllers starting together migrate once.
func (s *Store) migrate(ctx context.Context) error {
	for {
		done, err := s.migrateOne(ctx)
		if err != nil || done {
			return err
		}
	}
}

func (s *Store) migrateOne(ctx context.Context) (done bool, err error) {
	tx, err := s.wdb.BeginTx(ctx, nil)
	if err != nil {
		return false, fmt.Errorf("migrate: %w", err)
	}
	defer tx.Rollback() // no-op after Commit
	if err := s.d.lockMigrations(ctx, tx); err != nil {
		return false, fmt.Errorf("take migration lock: %w", err)
	}
	if _, err := tx.ExecContext(ctx, s.d.pick(schemaMigrations)); err != nil {
		return false, fmt.Errorf("create schema_migrations: %w", err)
	}
	var have int
	if err := s.queryRow(ctx, tx, `SELECT COALESCE(MAX(version), 0) FROM schema_migrations`).Scan(&have); err != nil {
		return false, fmt.Errorf("read schema version: %w", err)
	}
	if have > len(migrations) {
		return false, fmt.Errorf("database schema version %d is newer than this controller knows (%d); upgrade the controller", have, len(migrations))
	}
	if have == len(migrations) {
		return true, nil
	}
	v := have + 1
	if stmt := s.d.pick(migrations[v-1]); stmt != "" { // "": a migration of data only
		if _, err := tx.ExecContext(ctx, stmt); err != nil {
			return false, fmt.Errorf("migration %d: %w", v, err)
		}
	}
	move := map[int]func(context.Context, *sql.Tx) error{
		operationMigration:   s.moveOperations,
		agentStateMigration:  s.moveAgentState,
		DiskRecordsMigration: s.moveDiskRecords,
	}[v]
	if move != nil {
		if err := move(ctx, tx); err != nil {
			return false, fmt.Errorf("migration %d: %w", v, err)
		}
	}
	now := time.Now().UTC()
	if _, err := s.exec(ctx, tx, `INSERT INTO schema_migrations (version, applied_at) VALUES ($1, $2)`, v, s.d.stamp(&now)); err != nil {
		return false, fmt.Errorf("record migration %d: %w", v, err)
	}
	if err := tx.Commit(); err != nil {
		return false, fmt.Errorf("commit migration %d: %w", v, err)
	}
	return false, nil
}

// moveOperations moves the working state that earlier releases kept in
// each node's driver_internal_info into the operation column, in the
// migration's transaction. Revisions stay: the nodes do not change, only
// where their state is kept. The whole operation goes to the column, as
// the schema of this migration has it (agentStateMigration moves part of
// it on).
func (s *Store) moveOperations(ctx context.Context, tx *sql.Tx) error {
	return s.eachNodeRow(ctx, tx, "", func(id int64, data, _ []byte) error {
		var n store.Node
		if err := json.Unmarshal(data, &n); err != nil {
			return fmt.Errorf("decode node %d: %w", id, err)
		}
		if !n.AdoptLegacyOperation() {
			return nil
		}
		data, err := json.Marshal(&n)
		if err != nil {
			return fmt.Errorf("encode node %s: %w", n.UUID, err)
		}
		op, err := store.EncodeOperation(&n.Operation)
		if err != nil {
			return fmt.Errorf("encode operation of node %s: %w", n.UUID, err)
		}
		if _, err := s.exec(ctx, tx, `UPDATE nodes SET data = $1, operation = $2 WHERE id = $3`, data, op, id); err != nil {
			return fmt.Errorf("move operation of node %s: %w", n.UUID, err)
		}
		return nil
	})
}

// DiskRecordsMigration is the migration that moves the disk guard's
// records into the operation column (moveDiskRecords).
const DiskRecordsMigration = 12

// moveDiskRecords moves the disk guard's records that earlier releases
// kept in each node's driver_internal_info into its operation record, in
// the migration's transaction. Revisions stay, as in moveOperations: the
// API shows the records where it did.
func (s *Store) moveDiskRecords(ctx context.Context, tx *sql.Tx) error {
	return s.eachNodeRow(ctx, tx, "", func(id int64, data, op []byte) error {
		var n store.Node
		if err := json.Unmarshal(data, &n); err != nil {
			return fmt.Errorf("decode node %d: %w", id, err)
		}
		// The column holds the operation without the agent state
		// (agent_state), which this write leaves where it is.
		if err := store.DecodeOperation(op, &n.Operation); err != nil {
			return fmt.Errorf("decode operation of node %s: %w", n.UUID, err)
		}
		if !n.AdoptDiskRecords() {
			return nil
		}
		data, err := json.Marshal(&n)
		if err != nil {
			return fmt.Errorf("encode node %s: %w", n.UUID, err)
		}
		if op, err = store.EncodeOperation(&n.Operation); err != nil {
			return fmt.Errorf("encode operation of node %s: %w", n.UUID, err)
		}
		if _, err := s.exec(ctx, tx, `UPDATE nodes SET data = $1, operation = $2 WHERE id = $3`, data, op, id); err != nil {
			return fmt.Errorf("move disk records of node %s: %w", n.UUID, err)
		}
		return nil
	})
}

// eachNodeRow calls fn with the id, document and operation column of every
// node matching cond ("" for all), a page at a time, in tx. fn may write.
func (s *Store) eachNodeRow(ctx context.Context, tx *sql.Tx, cond string, fn func(id int64, data, op []byte) error) error {
	const page = 500
	type row struct {
		id       int64
		data, op []byte
	}
	if cond != "" {
		cond = " AND " + cond
	}
	for last := int64(0); ; {
		rows, err := s.query(ctx, tx, `SELECT id, data, operation FROM nodes WHERE id > $1`+cond+` ORDER BY id LIMIT $2`, last, page)
		if err != nil {
			return fmt.Errorf("read nodes: %w", err)
		}
		var batch []row
		for rows.Next() {
			var r row
			if err := rows.Scan(&r.id, &r.data, &r.op); err != nil {
				rows.Close()
				return fmt.Errorf("read nodes: %w", err)
			}
			batch = append(batch, r)
		}
		if err := rows.Close(); err != nil {
			return fmt.Errorf("read nodes: %w", err)
		}
		if err := rows.Err(); err != nil {
			return fmt.Errorf("read nodes: %w", err)
		}
		for _, r := range batch {
			if err := fn(r.id, r.data, r.op); err != nil {
				return err
			}
		}
		if len(batch) < page {
			return nil
		}
		last = batch[len(batch)-1].id
	}
}

// LatestSchemaVersion is the schema version this code migrates databases to.
func LatestSchemaVersion() int { return len(migrations) }

// Migration is the schema change numbered version (from 1) in d's words,
// for tests and tools that build a database of an earlier schema.
func Migration(d Dialect, version int) string { return d.pick(migrations[version-1]) }
