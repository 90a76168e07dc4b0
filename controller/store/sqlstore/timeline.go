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
	var rows []stageRow // the stages of boot, read when first needed
	read := false
	for i := range stages {
		st := stages[i]
		st.Bound()
		if st.Stage == store.StageBoot || boot == 0 {
			boot, rows, read = boot+1, nil, true
		}
		if !read {
			var err error
			if rows, err = s.bootRows(ctx, tx, nodeUUID, boot); err != nil {
				return err
			}
			read = true
		}
		victim, keep := makeRoom(rows, st.Unauthenticated())
		if !keep {
			continue
		}
		if victim >= 0 {
			if _, err := s.exec(ctx, tx, `DELETE FROM boot_stages WHERE id = $1`, rows[victim].id); err != nil {
				return err
			}
			rows = append(rows[:victim], rows[victim+1:]...)
		}
		data, err := json.Marshal(st)
		if err != nil {
			return err
		}
		var id int64
		if err := s.queryRow(ctx, tx, `INSERT INTO boot_stages (node_uuid, boot, at, data) VALUES ($1, $2, $3, $4) RETURNING id`,
			nodeUUID, boot, s.d.stamp(&st.At), data).Scan(&id); err != nil {
			return err
		}
		rows = append(rows, stageRow{id: id, unauthenticated: st.Unauthenticated()})
	}
	_, err := s.exec(ctx, tx, `DELETE FROM boot_stages WHERE node_uuid = $1 AND boot <= $2`, nodeUUID, boot-store.MaxBootsPerNode)
	return err
}

// stageRow is a stored stage of a boot, as eviction sees it.
type stageRow struct {
	id              int64
	unauthenticated bool
}

// bootRows reads the stages of a node's boot, oldest first.
func (s *Store) bootRows(ctx context.Context, tx *sql.Tx, nodeUUID string, boot int64) ([]stageRow, error) {
	rs, err := s.query(ctx, tx, `SELECT id, data FROM boot_stages WHERE node_uuid = $1 AND boot = $2 ORDER BY id`, nodeUUID, boot)
	if err != nil {
		return nil, err
	}
	defer rs.Close()
	var out []stageRow
	for rs.Next() {
		var r stageRow
		var data []byte
		if err := rs.Scan(&r.id, &data); err != nil {
			return nil, err
		}
		var st store.BootStage
		if err := json.Unmarshal(data, &st); err != nil {
			return nil, err
		}
		r.unauthenticated = st.Unauthenticated()
		out = append(out, r)
	}
	return out, rs.Err()
}

// makeRoom says which stored stage (an index of rows, -1: none) a new
// stage evicts, and whether the new stage is kept at all. The boot's first
// stage says how it began and is never evicted. An unauthenticated stage
// (store.BootStage.Unauthenticated: a stranger can repeat it at will)
// evicts only its own kind, beyond MaxUnauthenticatedPerBoot or in a full
// boot, and is dropped when a full boot holds none: a flood never pushes
// out the boot's chain (power, boot device, DHCP, downloads, steps,
// timeouts). Another stage in a full boot evicts the oldest
// unauthenticated one first, else the oldest but the first.
func makeRoom(rows []stageRow, unauthenticated bool) (victim int, keep bool) {
	oldestUnauth, nUnauth := -1, 0
	for i := 1; i < len(rows); i++ {
		if rows[i].unauthenticated {
			if oldestUnauth < 0 {
				oldestUnauth = i
			}
			nUnauth++
		}
	}
	full := len(rows) >= store.MaxStagesPerBoot
	if unauthenticated {
		if !full && nUnauth < store.MaxUnauthenticatedPerBoot {
			return -1, true
		}
		return oldestUnauth, oldestUnauth >= 0
	}
	switch {
	case !full:
		return -1, true
	case oldestUnauth >= 0:
		return oldestUnauth, true
	case len(rows) > 1:
		return 1, true
	}
	return -1, true
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
