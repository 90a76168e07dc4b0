package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"

	"github.com/anvil-metal/anvil/controller/store"
)

// Boot timelines: one row per stage (node_uuid, boot, at, data), data the
// stage's JSON document; a node's current boot is its highest number.

// AddBootStages implements store.BootTimelines: the whole batch in one
// transaction, so the recorder (controller/timeline), which hands over
// what it gathered since its last write, takes the database's one writer
// once for a rack booting at once.
func (s *Store) AddBootStages(ctx context.Context, batch []store.NodeBootStages) error {
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		for _, b := range batch {
			if err := s.addBootStages(ctx, tx, b.NodeUUID, b.Stages); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil && s.d.missingParent(err) {
		return fmt.Errorf("add boot stages: %w", store.ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("add boot stages: %w", err)
	}
	return nil
}

// addBootStages adds one node's stages in tx.
func (s *Store) addBootStages(ctx context.Context, tx *sql.Tx, nodeUUID string, stages []store.BootStage) error {
	if len(stages) == 0 {
		return nil
	}
	var boot int64
	if err := s.queryRow(ctx, tx, `SELECT COALESCE(MAX(boot), 0) FROM boot_stages WHERE node_uuid = $1`, nodeUUID).Scan(&boot); err != nil {
		return err
	}
	count := -1 // stages of boot, read when first needed
	for i := range stages {
		st := stages[i]
		st.Bound()
		if st.Stage == store.StageBoot || boot == 0 {
			boot, count = boot+1, 0
		}
		if count < 0 {
			if err := s.queryRow(ctx, tx, `SELECT COUNT(*) FROM boot_stages WHERE node_uuid = $1 AND boot = $2`, nodeUUID, boot).Scan(&count); err != nil {
				return err
			}
		}
		if count >= store.MaxStagesPerBoot {
			// The boot's first stage says how it began; the latest say
			// where it stopped: the second oldest makes room.
			if _, err := s.exec(ctx, tx, `DELETE FROM boot_stages WHERE id = (
				SELECT id FROM boot_stages WHERE node_uuid = $1 AND boot = $2 ORDER BY id LIMIT 1 OFFSET 1)`, nodeUUID, boot); err != nil {
				return err
			}
			count--
		}
		data, err := json.Marshal(st)
		if err != nil {
			return err
		}
		if _, err := s.exec(ctx, tx, `INSERT INTO boot_stages (node_uuid, boot, at, data) VALUES ($1, $2, $3, $4)`,
			nodeUUID, boot, s.d.stamp(&st.At), data); err != nil {
			return err
		}
		count++
	}
	_, err := s.exec(ctx, tx, `DELETE FROM boot_stages WHERE node_uuid = $1 AND boot <= $2`, nodeUUID, boot-store.MaxBootsPerNode)
	return err
}

// ListBoots implements store.BootTimelines.
func (s *Store) ListBoots(ctx context.Context, nodeUUID string, limit int) ([]store.Boot, error) {
	if limit <= 0 || limit > store.MaxBootsPerNode {
		limit = store.MaxBootsPerNode
	}
	rows, err := s.query(ctx, s.r, `SELECT boot, data FROM boot_stages WHERE node_uuid = $1 AND boot > (
		SELECT COALESCE(MAX(boot), 0) FROM boot_stages WHERE node_uuid = $1) - $2 ORDER BY boot DESC, id`, nodeUUID, limit)
	if err != nil {
		return nil, fmt.Errorf("list boots of node %s: %w", nodeUUID, err)
	}
	defer rows.Close()
	var out []store.Boot
	for rows.Next() {
		var boot int64
		var data []byte
		if err := rows.Scan(&boot, &data); err != nil {
			return nil, fmt.Errorf("list boots of node %s: %w", nodeUUID, err)
		}
		var st store.BootStage
		if err := json.Unmarshal(data, &st); err != nil {
			return nil, fmt.Errorf("decode boot stage of node %s: %w", nodeUUID, err)
		}
		if len(out) == 0 || out[len(out)-1].Number != boot {
			out = append(out, store.Boot{Number: boot})
		}
		b := &out[len(out)-1]
		if b.BootID == "" {
			b.BootID = st.BootID
		}
		b.Stages = append(b.Stages, st)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list boots of node %s: %w", nodeUUID, err)
	}
	return out, nil
}
