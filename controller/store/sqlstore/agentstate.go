package sqlstore

import (
	"context"
	"database/sql"
	"fmt"
	"math"
	"strconv"

	json "github.com/goccy/go-json"

	"github.com/anvil-metal/anvil/controller/store"
	"github.com/anvil-metal/anvil/protocol"
)

// agentState is what the agent_state table keeps of a node, apart from its
// row: the agent's step catalogue and last command status, the largest and
// most often rewritten parts of the operation (a status carries the
// command's result). GetNode reads it; lists of nodes do not.
type agentState struct {
	Steps         *store.StepCache        `json:"steps,omitempty"`
	CommandStatus *protocol.CommandStatus `json:"command_status,omitempty"`
}

func decodeAgentState(b []byte, n *store.Node) error {
	if len(b) == 0 {
		return nil
	}
	var a agentState
	if err := json.Unmarshal(b, &a); err != nil {
		return fmt.Errorf("decode agent state of node %s: %w", n.UUID, err)
	}
	n.Operation.Agent.Steps, n.Operation.Agent.CommandStatus = a.Steps, a.CommandStatus
	return nil
}

// writeAgentState stores a node's agent state (nil: none) on db, after the
// node's own row was written in the same transaction.
func (s *Store) writeAgentState(ctx context.Context, db execer, uuid string, agent []byte) error {
	if agent == nil {
		_, err := s.exec(ctx, db, `DELETE FROM agent_state WHERE node_uuid = $1`, uuid)
		return err
	}
	_, err := s.exec(ctx, db, `INSERT INTO agent_state (node_uuid, data) VALUES ($1, $2)
		ON CONFLICT (node_uuid) DO UPDATE SET data = excluded.data`, uuid, agent)
	return err
}

// LoadAgentState reads the agent state of nodes read by a list (Partial)
// and makes them whole, in one query. A page whose ids are dense (a page
// in id order, the default) is read as an id range, rows outside the page
// ignored; otherwise the page's ids are written into the query as integer
// literals (they are int64s from the database, never client text): a
// thousand bound parameters cost SQLite's driver more than the query
// itself, as it looks each parameter's name up in a list, and a thousand
// literals cost more to parse than the range's extra rows to skip.
func (s *Store) LoadAgentState(ctx context.Context, nodes []*store.Node) error {
	byUUID := make(map[string]*store.Node, len(nodes))
	lo, hi := int64(math.MaxInt64), int64(math.MinInt64)
	for _, n := range nodes {
		if n.Partial {
			byUUID[n.UUID] = n
			lo, hi = min(lo, n.ID), max(hi, n.ID)
		}
	}
	if len(byUUID) == 0 {
		return nil
	}
	cond := "n.id BETWEEN " + strconv.FormatInt(lo, 10) + " AND " + strconv.FormatInt(hi, 10)
	if hi-lo >= 2*int64(len(byUUID)) {
		ids := make([]byte, 0, 8*len(nodes))
		for _, n := range nodes {
			if n.Partial {
				if len(ids) > 0 {
					ids = append(ids, ',')
				}
				ids = strconv.AppendInt(ids, n.ID, 10)
			}
		}
		cond = "n.id IN (" + string(ids) + ")"
	}
	rows, err := s.query(ctx, s.r, `SELECT a.node_uuid, a.data FROM agent_state a JOIN nodes n ON n.uuid = a.node_uuid
		WHERE `+cond)
	if err != nil {
		return fmt.Errorf("load agent state: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var uuid string
		var data []byte
		if err := rows.Scan(&uuid, &data); err != nil {
			return fmt.Errorf("load agent state: %w", err)
		}
		if n := byUUID[uuid]; n != nil {
			if err := decodeAgentState(data, n); err != nil {
				return err
			}
			n.AgentStateRead = data
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("load agent state: %w", err)
	}
	for _, n := range byUUID {
		n.Partial = false
	}
	return nil
}

// agentStateMigration is the migration that adds agent_state; the migrator
// moves each node's step cache and command status there (moveAgentState).
const agentStateMigration = 8

// moveAgentState moves the agent state out of each node's operation
// column, in the migration's transaction, a page of nodes at a time.
func (s *Store) moveAgentState(ctx context.Context, tx *sql.Tx) error {
	return s.eachNodeRow(ctx, tx, `operation IS NOT NULL`, func(id int64, data, op []byte) error {
		var o store.Operation
		if err := store.DecodeOperation(op, &o); err != nil {
			return fmt.Errorf("decode operation of node %d: %w", id, err)
		}
		if o.Agent.Steps == nil && o.Agent.CommandStatus == nil {
			return nil
		}
		n := &store.Node{Operation: o}
		if err := json.Unmarshal(data, n); err != nil {
			return fmt.Errorf("decode node %d: %w", id, err)
		}
		_, rest, agent, err := encodeNode(n)
		if err != nil {
			return err
		}
		if _, err := s.exec(ctx, tx, `UPDATE nodes SET operation = $1 WHERE id = $2`, rest, id); err != nil {
			return fmt.Errorf("move agent state of node %s: %w", n.UUID, err)
		}
		if _, err := s.exec(ctx, tx, `INSERT INTO agent_state (node_uuid, data) VALUES ($1, $2)`, n.UUID, agent); err != nil {
			return fmt.Errorf("move agent state of node %s: %w", n.UUID, err)
		}
		return nil
	})
}
