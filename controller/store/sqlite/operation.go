package sqlite

import (
	"context"
	"database/sql"
	"fmt"

	json "github.com/goccy/go-json"

	"github.com/anvil-metal/anvil/controller/store"
)

// operationMigration is the migration that adds nodes.operation.
const operationMigration = 4

// moveOperations moves the working state that earlier releases kept in
// each node's driver_internal_info into the operation column, in the
// migration's transaction, a page of nodes at a time. Revisions stay: the
// nodes do not change, only where their state is kept.
func moveOperations(ctx context.Context, tx *sql.Tx) error {
	const page = 500
	type row struct {
		id   int64
		data []byte
	}
	for last := int64(0); ; {
		rows, err := tx.QueryContext(ctx, `SELECT id, data FROM nodes WHERE id > ? ORDER BY id LIMIT ?`, last, page)
		if err != nil {
			return fmt.Errorf("read nodes: %w", err)
		}
		var batch []row
		for rows.Next() {
			var r row
			if err := rows.Scan(&r.id, &r.data); err != nil {
				rows.Close()
				return fmt.Errorf("read nodes: %w", err)
			}
			batch = append(batch, r)
		}
		if err := rows.Close(); err != nil {
			return fmt.Errorf("read nodes: %w", err)
		}
		for _, r := range batch {
			var n store.Node
			if err := json.Unmarshal(r.data, &n); err != nil {
				return fmt.Errorf("decode node %d: %w", r.id, err)
			}
			if !n.AdoptLegacyOperation() {
				continue
			}
			data, err := json.Marshal(&n)
			if err != nil {
				return fmt.Errorf("encode node %s: %w", n.UUID, err)
			}
			op, err := store.EncodeOperation(&n.Operation)
			if err != nil {
				return fmt.Errorf("encode operation of node %s: %w", n.UUID, err)
			}
			if _, err := tx.ExecContext(ctx, `UPDATE nodes SET data = ?, operation = ? WHERE id = ?`, data, op, r.id); err != nil {
				return fmt.Errorf("move operation of node %s: %w", n.UUID, err)
			}
		}
		if len(batch) < page {
			return nil
		}
		last = batch[len(batch)-1].id
	}
}
