package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/anvil-metal/anvil/controller/store"
)

// Step results and erase records: both tables are (id, uuid, node_uuid,
// time, data) with data the JSON document; pages walk id, newest first.

// PutStepResult implements store.StepResults. The insert and the pruning
// run in one statement; concurrent writers for one node can only prune
// more than needed by the rows they add themselves.
func (s *Store) PutStepResult(ctx context.Context, r *store.StepResult) error {
	r.Bound()
	data, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("encode step result: %w", err)
	}
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("put step result: %w", err)
	}
	defer func() { _ = tx.Rollback(ctx) }() // a no-op after Commit
	if _, err := tx.Exec(ctx, `INSERT INTO step_results (uuid, node_uuid, finished_at, data) VALUES ($1, $2, $3, $4)
		ON CONFLICT (uuid) DO NOTHING`, r.UUID, r.NodeUUID, r.FinishedAt, data); err != nil {
		return fmt.Errorf("put step result: %w", err)
	}
	if _, err := tx.Exec(ctx, `DELETE FROM step_results WHERE node_uuid = $1 AND id <= (
		SELECT id FROM step_results WHERE node_uuid = $1 ORDER BY id DESC LIMIT 1 OFFSET $2)`,
		r.NodeUUID, store.MaxStepResultsPerNode); err != nil {
		return fmt.Errorf("prune step results: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("put step result: %w", err)
	}
	return nil
}

// ListStepResults implements store.StepResults.
func (s *Store) ListStepResults(ctx context.Context, p store.ResultPage) ([]*store.StepResult, error) {
	return listResults[store.StepResult](ctx, s, "step_results", p)
}

// PutEraseRecords implements store.StepResults.
func (s *Store) PutEraseRecords(ctx context.Context, recs []*store.EraseRecord) error {
	batch := &pgx.Batch{}
	for _, r := range recs {
		data, err := json.Marshal(r)
		if err != nil {
			return fmt.Errorf("encode erase record: %w", err)
		}
		batch.Queue(`INSERT INTO erase_records (uuid, node_uuid, created_at, data) VALUES ($1, $2, $3, $4)
			ON CONFLICT (uuid) DO NOTHING`, r.UUID, r.NodeUUID, r.CreatedAt, data)
	}
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("put erase records: %w", err)
	}
	defer func() { _ = tx.Rollback(ctx) }() // a no-op after Commit
	if err := tx.SendBatch(ctx, batch).Close(); err != nil {
		return fmt.Errorf("put erase records: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("put erase records: %w", err)
	}
	return nil
}

// ListEraseRecords implements store.StepResults.
func (s *Store) ListEraseRecords(ctx context.Context, p store.ResultPage) ([]*store.EraseRecord, error) {
	return listResults[store.EraseRecord](ctx, s, "erase_records", p)
}

func listResults[T any](ctx context.Context, s *Store, table string, p store.ResultPage) ([]*T, error) {
	var where []string
	var args []any
	if p.NodeUUID != "" {
		args = append(args, p.NodeUUID)
		where = append(where, fmt.Sprintf("node_uuid = $%d", len(args)))
	}
	order, cmp := "DESC", "<"
	if p.Ascending {
		order, cmp = "ASC", ">"
	}
	if p.Marker != "" {
		var id int64
		err := s.pool.QueryRow(ctx, `SELECT id FROM `+table+` WHERE uuid = $1`, p.Marker).Scan(&id)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil, fmt.Errorf("marker %s: %w", p.Marker, store.ErrNotFound)
		}
		if err != nil {
			return nil, fmt.Errorf("list %s: %w", table, err)
		}
		args = append(args, id)
		where = append(where, fmt.Sprintf("id %s $%d", cmp, len(args)))
	}
	q := `SELECT data FROM ` + table
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	q += " ORDER BY id " + order
	if p.Limit > 0 {
		q += fmt.Sprintf(" LIMIT %d", p.Limit)
	}
	rows, err := s.pool.Query(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", table, err)
	}
	defer rows.Close()
	var out []*T
	for rows.Next() {
		var data []byte
		if err := rows.Scan(&data); err != nil {
			return nil, fmt.Errorf("list %s: %w", table, err)
		}
		v := new(T)
		if err := json.Unmarshal(data, v); err != nil {
			return nil, fmt.Errorf("decode %s row: %w", table, err)
		}
		out = append(out, v)
	}
	return out, rows.Err()
}
