package sqlstore

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	"github.com/anvil-metal/anvil/controller/store"
)

// updateReq is one node update: for the group committer, or run at once.
type updateReq struct {
	n      *store.Node
	old    int64
	events []*store.Event
	args   params // $1..$24 of updateNodeSQL
	agent  []byte // the node's agent state (nil: none)
	// keepAgent: leave the stored agent state as it is (the node was read
	// without it, or it did not change)
	keepAgent bool
	holder    string // non-empty: write only under this holder's live lease
	volatile  bool   // may be committed without waiting for the disk
	// results are step results stored with the node (store.WithStepResult)
	results []stepResultRow
	done    chan error
	// fn, when set, is another write sharing the group commit (a node
	// created or deleted): it runs on the batch's transaction in place of
	// a node update; what names it in errors.
	fn   func(ctx context.Context, db execer) error
	what string
}

// updateNodeSQL is an optimistic node update: it matches only the revision
// the caller read ($23). $24 is parent_node, after the revision because
// it came later. On PostgreSQL at READ COMMITTED a concurrent
// writer's row is re-checked after its commit, so exactly one of two racing
// writers matches.
const updateNodeSQL = `UPDATE nodes SET name = $2, revision = $3, driver = $4, provision_state = $5,
		power_state = $6, maintenance = $7, retired = $8, instance_uuid = $9, resource_class = $10, fault = $11,
		owner = $12, lessee = $13, conductor_group = $14, chassis_uuid = $15, description = $16, shard = $17,
		reservation = $18, updated_at = $19, provision_updated_at = $20, data = $21, operation = $22,
		parent_node = $24
	WHERE uuid = $1 AND revision = $23`

// updateNodeNarrowSQL is updateNodeSQL for an update that changes no
// indexed column: those are conditions, not assignments.
const updateNodeNarrowSQL = `UPDATE nodes SET revision = $3, power_state = $6, fault = $11, owner = $12,
		lessee = $13, conductor_group = $14, chassis_uuid = $15, description = $16, shard = $17,
		updated_at = $19, provision_updated_at = $20, data = $21, operation = $22
	WHERE uuid = $1 AND revision = $23 AND name IS NOT DISTINCT FROM $2 AND driver = $4 AND provision_state = $5
		AND maintenance = $7 AND retired = $8 AND instance_uuid IS NOT DISTINCT FROM $9
		AND resource_class IS NOT DISTINCT FROM $10 AND reservation IS NOT DISTINCT FROM $18
		AND parent_node IS NOT DISTINCT FROM $24`

// UpdateNode writes n if nobody changed it since it was read, with its
// history events in the same transaction.
func (s *Store) UpdateNode(ctx context.Context, n *store.Node, events ...*store.Event) error {
	n.Normalize()
	now := time.Now().UTC()
	n.UpdatedAt = &now
	old := n.Revision
	n.Revision = old + 1
	err := s.updateNode(ctx, n, old, events)
	if err != nil {
		n.Revision = old
	}
	return err
}

func (s *Store) updateNode(ctx context.Context, n *store.Node, old int64, events []*store.Event) error {
	data, op, agent, err := encodeNode(n)
	if err != nil {
		return err
	}
	r := &updateReq{n: n, old: old, events: events, agent: agent, keepAgent: n.Partial || bytes.Equal(agent, n.AgentStateRead),
		holder: store.LeaseHolder(ctx), volatile: store.IsVolatile(ctx) && len(store.StepResultsOf(ctx)) == 0,
		args: params{n.UUID, n.Name, n.Revision, n.Driver, n.ProvisionState, n.PowerState, n.Maintenance, n.Retired,
			n.InstanceUUID, n.ResourceClass, n.Fault, n.Owner, n.Lessee, n.ConductorGroup, n.ChassisUUID,
			n.Description, n.Shard, n.Reservation, s.d.stamp(n.UpdatedAt), s.d.stamp(n.ProvisionUpdatedAt), data, op, old, n.ParentNode}}
	for _, res := range store.StepResultsOf(ctx) {
		row, err := encodeStepResult(res)
		if err != nil {
			return err
		}
		r.results = append(r.results, row)
	}
	if s.updates == nil {
		err = s.updateNow(ctx, r)
	} else {
		r.done = make(chan error, 1)
		select {
		case s.updates <- r:
		case <-ctx.Done():
			return ctx.Err()
		}
		err = <-r.done
	}
	if err == nil && !r.keepAgent {
		n.AgentStateRead = agent
	}
	return err
}

// updateNow runs one update as one statement where the dialect has one,
// else in a transaction of its own.
func (s *Store) updateNow(ctx context.Context, r *updateReq) error {
	err := s.updateOneStatement(ctx, r)
	if s.d.conflict(err) {
		// Another writer won; the update, events included, was rolled back.
		return fmt.Errorf("update node %s at revision %d: %w", r.n.UUID, r.old, store.ErrConflict)
	}
	return err
}

func (s *Store) updateOneStatement(ctx context.Context, r *updateReq) error {
	args := append(params(nil), r.args...)
	rows := make([][4]any, len(r.events))
	for i, e := range r.events {
		data, err := encodeEvent(e)
		if err != nil {
			return err
		}
		rows[i] = [4]any{e.UUID, e.NodeUUID, s.d.stamp(&e.CreatedAt), data}
	}
	q, ok := s.d.oneStatement(updateNodeSQL+s.fence(&args, r.holder), &args, r.agent, !r.keepAgent, rows)
	if !ok || len(r.results) > 0 {
		// SQLite, or step results to store with the node: a transaction
		// (the results' pruning does not fit the one statement).
		return s.inTx(ctx, func(tx *sql.Tx) error { return s.applyUpdate(ctx, tx, r) })
	}
	var updated int
	err := s.queryRow(ctx, s.w, q, args...).Scan(&updated)
	if s.d.conflict(err) {
		return err
	}
	if err != nil {
		return s.mapErr(err, "update node "+r.n.UUID)
	}
	if updated == 1 {
		return nil
	}
	return s.whyNotUpdated(ctx, s.w, r.n.UUID, r.holder, fmt.Sprintf("update node %s at revision %d", r.n.UUID, r.old))
}

// fence restricts a node write to holder's live lease ("" when holder is
// "": no restriction).
func (s *Store) fence(args *params, holder string) string {
	if holder == "" {
		return ""
	}
	return ` AND EXISTS (SELECT 1 FROM node_leases WHERE node_uuid = $1 AND holder = ` + args.add(holder) +
		` AND expires_at > ` + s.d.now(args) + `)`
}

// applyUpdate writes the node and its events on db.
func (s *Store) applyUpdate(ctx context.Context, db execer, r *updateReq) error {
	n := r.n
	args := append(params(nil), r.args...)
	fence := s.fence(&args, r.holder)
	if s.d.narrowUpdates() {
		// Most updates (heartbeats, step progress) leave every indexed
		// column as it was: the narrow statement then rewrites the row
		// alone, not the eight index entries a full UPDATE touches. When
		// an indexed column changed (or the revision is stale) it matches
		// nothing and the full statement decides.
		res, err := s.exec(ctx, db, updateNodeNarrowSQL+fence, args...)
		if err != nil {
			return s.mapErr(err, "update node "+n.UUID)
		}
		if c, _ := res.RowsAffected(); c == 1 {
			return s.afterUpdate(ctx, db, r)
		}
	}
	res, err := s.exec(ctx, db, updateNodeSQL+fence, args...)
	if s.d.conflict(err) {
		return err
	}
	if err != nil {
		return s.mapErr(err, "update node "+n.UUID)
	}
	if c, _ := res.RowsAffected(); c == 0 {
		return s.whyNotUpdated(ctx, db, n.UUID, r.holder, fmt.Sprintf("update node %s at revision %d", n.UUID, r.old))
	}
	return s.afterUpdate(ctx, db, r)
}

// afterUpdate writes what goes with a node's row: its agent state (unless
// the node was read without it), its events and step results.
func (s *Store) afterUpdate(ctx context.Context, db execer, r *updateReq) error {
	if !r.keepAgent {
		if err := s.writeAgentState(ctx, db, r.n.UUID, r.agent); err != nil {
			return fmt.Errorf("update agent state of node %s: %w", r.n.UUID, err)
		}
	}
	if err := s.insertEvents(ctx, db, r.events); err != nil {
		return err
	}
	if err := s.insertStepResults(ctx, db, r.results); err != nil {
		return fmt.Errorf("store step results with node %s: %w", r.n.UUID, err)
	}
	return nil
}

// eventChunk bounds the rows of one multi-row INSERT of events.
const eventChunk = 100

// insertEvents appends history entries in order, a chunk per statement.
func (s *Store) insertEvents(ctx context.Context, db execer, events []*store.Event) error {
	for len(events) > 0 {
		chunk := events[:min(len(events), eventChunk)]
		events = events[len(chunk):]
		var p params
		var b strings.Builder
		b.WriteString(`INSERT INTO events (uuid, node_uuid, created_at, data) VALUES `)
		for i, e := range chunk {
			data, err := encodeEvent(e)
			if err != nil {
				return err
			}
			if i > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "(%s, %s, %s, %s)", p.add(e.UUID), p.add(e.NodeUUID), p.add(s.d.stamp(&e.CreatedAt)), p.add(data))
		}
		if _, err := s.exec(ctx, db, b.String(), p...); err != nil {
			return s.mapErr(err, "append event")
		}
	}
	return nil
}

// grouped runs fn in a transaction: the group committer's when the store
// has one, so that node creates and deletes from many clients share a
// commit (one fsync) with each other and with node updates; else a
// transaction of its own. fn must use only db.
func (s *Store) grouped(ctx context.Context, what string, fn func(ctx context.Context, db execer) error) error {
	if s.updates == nil {
		return s.inTx(ctx, func(tx *sql.Tx) error { return fn(ctx, tx) })
	}
	r := &updateReq{fn: fn, what: what, done: make(chan error, 1)}
	select {
	case s.updates <- r:
	case <-ctx.Done():
		return ctx.Err()
	}
	return <-r.done
}

// maxBatch bounds how many updates share one transaction.
const maxBatch = 128

// committer is the group commit: updates queued while a transaction was
// being written are committed together in the next one, so N concurrent
// heartbeats cost one fsync instead of N. Each update runs in its own
// savepoint, so one that fails (stale revision, constraint) leaves the
// others intact; every caller learns its own outcome only after the commit.
func (s *Store) committer() {
	defer close(s.stopped)
	for first := range s.updates {
		batch := []*updateReq{first}
	drain:
		for len(batch) < maxBatch {
			select {
			case r, ok := <-s.updates:
				if !ok {
					break drain
				}
				batch = append(batch, r)
			default:
				break drain
			}
		}
		s.commitBatch(batch)
	}
}

func (s *Store) commitBatch(batch []*updateReq) {
	ctx := context.Background()
	results := make([]error, len(batch))
	// A dedicated connection for the whole batch: the writer pool has one
	// connection, and holding it keeps other writers (node creation,
	// leases) from committing while the durability setting is relaxed.
	conn, err := s.wdb.Conn(ctx)
	if err != nil {
		failBatch(batch, "", err)
		return
	}
	defer s.afterTx(ctx) // after the connection is back in the pool
	defer conn.Close()
	if s.durable && allVolatile(batch) {
		// Only volatile writes (agent last-seen and progress): commit
		// without waiting for the disk (WAL with synchronous NORMAL; the
		// next FULL commit syncs these frames too), then restore FULL
		// before the connection serves anyone else.
		if _, err := conn.ExecContext(ctx, `PRAGMA synchronous = NORMAL`); err == nil {
			defer func() { _, _ = conn.ExecContext(ctx, `PRAGMA synchronous = FULL`) }()
		}
	}
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		failBatch(batch, "", err)
		return
	}
	for i, r := range batch {
		if _, err := tx.ExecContext(ctx, `SAVEPOINT u`); err != nil {
			results[i] = err
			continue
		}
		if r.fn != nil {
			results[i] = r.fn(ctx, tx)
		} else {
			results[i] = s.applyUpdate(ctx, tx, r)
		}
		if results[i] != nil {
			_, _ = tx.ExecContext(ctx, `ROLLBACK TO u`)
		}
		_, _ = tx.ExecContext(ctx, `RELEASE u`)
	}
	if err := tx.Commit(); err != nil {
		failBatch(batch, "commit: ", err)
		return
	}
	for i, r := range batch {
		r.done <- results[i]
	}
}

// failBatch reports err to every update of a batch that could not commit.
func failBatch(batch []*updateReq, what string, err error) {
	for _, r := range batch {
		name := r.what
		if r.fn == nil {
			name = "update node " + r.n.UUID
		}
		r.done <- fmt.Errorf("%s: %s%w", name, what, err)
	}
}

func allVolatile(batch []*updateReq) bool {
	for _, r := range batch {
		if !r.volatile {
			return false
		}
	}
	return true
}
