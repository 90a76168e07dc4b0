package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/anvil-metal/anvil/controller/store"
)

// Step results and erase records: both tables are (id, uuid, node_uuid,
// time, data) with data the JSON document; pages walk id, newest first.

// PutStepResult implements store.StepResults: the insert and the pruning
// to store.MaxStepResultsPerNode run in one transaction; concurrent
// writers for one node (PostgreSQL) can only prune more than needed by
// the rows they add themselves.
func (s *Store) PutStepResult(ctx context.Context, r *store.StepResult) error {
	row, err := encodeStepResult(r)
	if err != nil {
		return err
	}
	err = s.inTx(ctx, func(tx *sql.Tx) error { return s.insertStepResults(ctx, tx, []stepResultRow{row}) })
	if err != nil {
		return fmt.Errorf("put step result: %w", err)
	}
	return nil
}

// stepResultRow is a step result ready for insertResult.
type stepResultRow struct {
	r    *store.StepResult
	data []byte
}

func encodeStepResult(r *store.StepResult) (stepResultRow, error) {
	r.Bound()
	data, err := json.Marshal(r)
	if err != nil {
		return stepResultRow{}, fmt.Errorf("encode step result: %w", err)
	}
	return stepResultRow{r: r, data: data}, nil
}

// insertStepResults stores results on db (a transaction) and prunes each
// one's node to store.MaxStepResultsPerNode.
func (s *Store) insertStepResults(ctx context.Context, db execer, rows []stepResultRow) error {
	for _, row := range rows {
		r := row.r
		if err := s.insertResult(ctx, db, "step_results", "finished_at", r.UUID, r.NodeUUID, &r.FinishedAt, row.data); err != nil {
			return err
		}
		_, err := s.exec(ctx, db, `DELETE FROM step_results WHERE node_uuid = $1 AND id <= (
			SELECT id FROM step_results WHERE node_uuid = $1 ORDER BY id DESC LIMIT 1 OFFSET $2)`,
			r.NodeUUID, store.MaxStepResultsPerNode)
		if err != nil {
			return err
		}
	}
	return nil
}

// ListStepResults implements store.StepResults.
func (s *Store) ListStepResults(ctx context.Context, p store.ResultPage) ([]*store.StepResult, error) {
	return listResults[store.StepResult](ctx, s, "step_results", p)
}

// PutEraseRecords implements store.StepResults.
func (s *Store) PutEraseRecords(ctx context.Context, recs []*store.EraseRecord) error {
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		for _, r := range recs {
			data, err := json.Marshal(r)
			if err != nil {
				return fmt.Errorf("encode erase record: %w", err)
			}
			if err := s.insertResult(ctx, tx, "erase_records", "created_at", r.UUID, r.NodeUUID, &r.CreatedAt, data); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("put erase records: %w", err)
	}
	return nil
}

// ListEraseRecords implements store.StepResults.
func (s *Store) ListEraseRecords(ctx context.Context, p store.ResultPage) ([]*store.EraseRecord, error) {
	return listResults[store.EraseRecord](ctx, s, "erase_records", p)
}

// insertResult adds a row to table, one of the two results tables, with
// its time in column at; a uuid already there (a report the agent
// repeated) is left as it is.
func (s *Store) insertResult(ctx context.Context, tx execer, table, at, uuid, nodeUUID string, t *time.Time, data []byte) error {
	_, err := s.exec(ctx, tx, `INSERT INTO `+table+` (uuid, node_uuid, `+at+`, data) VALUES ($1, $2, $3, $4)
		ON CONFLICT (uuid) DO NOTHING`, uuid, nodeUUID, s.d.stamp(t), data)
	return err
}

func listResults[T any](ctx context.Context, s *Store, table string, p store.ResultPage) ([]*T, error) {
	var where []string
	var args params
	if p.NodeUUID != "" {
		where = append(where, "node_uuid = "+args.add(p.NodeUUID))
	}
	order, cmp := "DESC", "<"
	if p.Ascending {
		order, cmp = "ASC", ">"
	}
	if p.Marker != "" {
		var id int64
		err := s.queryRow(ctx, s.r, `SELECT id FROM `+table+` WHERE uuid = $1`, p.Marker).Scan(&id)
		if errors.Is(err, sql.ErrNoRows) {
			return nil, fmt.Errorf("marker %s: %w", p.Marker, store.ErrNotFound)
		}
		if err != nil {
			return nil, fmt.Errorf("list %s: %w", table, err)
		}
		where = append(where, "id "+cmp+" "+args.add(id))
	}
	q := `SELECT data FROM ` + table
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	q += " ORDER BY id " + order
	if p.Limit > 0 {
		q += " LIMIT " + strconv.Itoa(p.Limit)
	}
	rows, err := s.query(ctx, s.r, q, args...)
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
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list %s: %w", table, err)
	}
	return out, nil
}
