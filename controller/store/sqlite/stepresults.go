package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/anvil-metal/anvil/controller/store"
)

// Step results and erase records: both tables are (id, uuid, node_uuid,
// time, data) with data the JSON document; pages walk id, newest first.

// PutStepResult implements store.StepResults.
func (s *Store) PutStepResult(ctx context.Context, r *store.StepResult) error {
	r.Bound()
	data, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("encode step result: %w", err)
	}
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("put step result: %w", err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `INSERT INTO step_results (uuid, node_uuid, finished_at, data) VALUES (?, ?, ?, ?)
		ON CONFLICT (uuid) DO NOTHING`, r.UUID, r.NodeUUID, fmtTime(&r.FinishedAt), data); err != nil {
		return fmt.Errorf("put step result: %w", err)
	}
	if _, err := tx.ExecContext(ctx, `DELETE FROM step_results WHERE node_uuid = ?1 AND id <= (
		SELECT id FROM step_results WHERE node_uuid = ?1 ORDER BY id DESC LIMIT 1 OFFSET ?2)`,
		r.NodeUUID, store.MaxStepResultsPerNode); err != nil {
		return fmt.Errorf("prune step results: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("put step result: %w", err)
	}
	return nil
}

// ListStepResults implements store.StepResults.
func (s *Store) ListStepResults(ctx context.Context, p store.ResultPage) ([]*store.StepResult, error) {
	return listResults[store.StepResult](ctx, s.r, "step_results", p)
}

// PutEraseRecords implements store.StepResults.
func (s *Store) PutEraseRecords(ctx context.Context, recs []*store.EraseRecord) error {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("put erase records: %w", err)
	}
	defer tx.Rollback()
	for _, r := range recs {
		data, err := json.Marshal(r)
		if err != nil {
			return fmt.Errorf("encode erase record: %w", err)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO erase_records (uuid, node_uuid, created_at, data) VALUES (?, ?, ?, ?)
			ON CONFLICT (uuid) DO NOTHING`, r.UUID, r.NodeUUID, fmtTime(&r.CreatedAt), data); err != nil {
			return fmt.Errorf("put erase record: %w", err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("put erase records: %w", err)
	}
	return nil
}

// ListEraseRecords implements store.StepResults.
func (s *Store) ListEraseRecords(ctx context.Context, p store.ResultPage) ([]*store.EraseRecord, error) {
	return listResults[store.EraseRecord](ctx, s.r, "erase_records", p)
}

func listResults[T any](ctx context.Context, db *sql.DB, table string, p store.ResultPage) ([]*T, error) {
	var where []string
	var args []any
	if p.NodeUUID != "" {
		where, args = append(where, "node_uuid = ?"), append(args, p.NodeUUID)
	}
	order, cmp := "DESC", "<"
	if p.Ascending {
		order, cmp = "ASC", ">"
	}
	if p.Marker != "" {
		var id int64
		err := db.QueryRowContext(ctx, `SELECT id FROM `+table+` WHERE uuid = ?`, p.Marker).Scan(&id)
		if errors.Is(err, sql.ErrNoRows) {
			return nil, fmt.Errorf("marker %s: %w", p.Marker, store.ErrNotFound)
		}
		if err != nil {
			return nil, fmt.Errorf("list %s: %w", table, err)
		}
		where, args = append(where, "id "+cmp+" ?"), append(args, id)
	}
	q := `SELECT data FROM ` + table
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	q += " ORDER BY id " + order
	if p.Limit > 0 {
		q += fmt.Sprintf(" LIMIT %d", p.Limit)
	}
	rows, err := db.QueryContext(ctx, q, args...)
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
