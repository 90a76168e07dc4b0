package postgres

import (
	"context"
	"fmt"

	json "github.com/goccy/go-json"
	"github.com/jackc/pgx/v5"

	"github.com/anvil-metal/anvil/controller/store"
)

// operationMigration is the migration that adds nodes.operation.
const operationMigration = 4

// moveOperations moves the working state that earlier releases kept in
// each node's driver_internal_info into the operation column, in the
// migration's transaction (which holds the migration lock), a page of
// nodes at a time. Revisions stay: the nodes do not change, only where
// their state is kept.
func moveOperations(ctx context.Context, tx pgx.Tx) error {
	const page = 500
	type row struct {
		id   int64
		data []byte
	}
	for last := int64(0); ; {
		rows, err := tx.Query(ctx, `SELECT id, data FROM nodes WHERE id > $1 ORDER BY id LIMIT $2`, last, page)
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
		rows.Close()
		if err := rows.Err(); err != nil {
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
			data, err := encodeNode(&n)
			if err != nil {
				return err
			}
			op, err := encodeOperation(&n)
			if err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, `UPDATE nodes SET data = $1, operation = $2 WHERE id = $3`, data, op, r.id); err != nil {
				return fmt.Errorf("move operation of node %s: %w", n.UUID, err)
			}
		}
		if len(batch) < page {
			return nil
		}
		last = batch[len(batch)-1].id
	}
}
