package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Lease expiry is computed and compared by the database server's clock
// (now()), so controllers on hosts whose clocks drift apart still agree on
// who holds a node.

// AcquireLease takes the node's lease if it is free, expired or already
// holder's. At READ COMMITTED, two controllers racing for an expired lease
// serialise on the row lock and the loser re-checks the WHERE against the
// winner's row, so exactly one gets it.
func (s *Store) AcquireLease(ctx context.Context, nodeUUID, holder string, ttl time.Duration) (bool, string, error) {
	var current string
	// prev reads the row as it was before the upsert (the statement's
	// snapshot): the holder whose expired lease this takes over, for the
	// history; under a race it may be stale, which only affects a message.
	err := s.pool.QueryRow(ctx, `WITH prev AS (SELECT holder FROM node_leases WHERE node_uuid = $1)
		INSERT INTO node_leases (node_uuid, holder, expires_at)
		VALUES ($1, $2, now() + $3 * interval '1 microsecond')
		ON CONFLICT (node_uuid) DO UPDATE SET holder = excluded.holder, expires_at = excluded.expires_at
			WHERE node_leases.holder = excluded.holder OR node_leases.expires_at <= now()
		RETURNING COALESCE((SELECT holder FROM prev), '')`, nodeUUID, holder, ttl.Microseconds()).Scan(&current)
	if err == nil {
		if current == holder {
			current = ""
		}
		return true, current, nil
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && (pgErr.Code == serializationFailure || pgErr.Code == deadlockDetected) {
		return false, "", nil // lost a race (stricter isolation): someone else has it
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return false, "", fmt.Errorf("acquire lease of node %s: %w", nodeUUID, err)
	}
	err = s.pool.QueryRow(ctx, `SELECT holder FROM node_leases WHERE node_uuid = $1`, nodeUUID).Scan(&current)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, "", nil // released in between: the caller may try again
	}
	if err != nil {
		return false, "", fmt.Errorf("acquire lease of node %s: %w", nodeUUID, err)
	}
	return false, current, nil
}

// RenewLeases extends holder's live leases.
func (s *Store) RenewLeases(ctx context.Context, holder string, ttl time.Duration) ([]string, error) {
	rows, err := s.pool.Query(ctx, `UPDATE node_leases SET expires_at = now() + $2 * interval '1 microsecond'
		WHERE holder = $1 AND expires_at > now() RETURNING node_uuid`, holder, ttl.Microseconds())
	if err != nil {
		return nil, fmt.Errorf("renew leases of %s: %w", holder, err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("renew leases of %s: %w", holder, err)
	}
	return out, nil
}

// ReleaseLease ends holder's lease on the node.
func (s *Store) ReleaseLease(ctx context.Context, nodeUUID, holder string) error {
	if _, err := s.pool.Exec(ctx, `DELETE FROM node_leases WHERE node_uuid = $1 AND holder = $2`, nodeUUID, holder); err != nil {
		return fmt.Errorf("release lease of node %s: %w", nodeUUID, err)
	}
	return nil
}

// ReleaseLeases ends every lease of holder.
func (s *Store) ReleaseLeases(ctx context.Context, holder string) error {
	if _, err := s.pool.Exec(ctx, `DELETE FROM node_leases WHERE holder = $1`, holder); err != nil {
		return fmt.Errorf("release leases of %s: %w", holder, err)
	}
	return nil
}

// ClearLeases ends every lease.
func (s *Store) ClearLeases(ctx context.Context) error {
	if _, err := s.pool.Exec(ctx, `DELETE FROM node_leases`); err != nil {
		return fmt.Errorf("clear leases: %w", err)
	}
	return nil
}

// UnleasedWork lists reserved or waiting nodes without a live lease.
func (s *Store) UnleasedWork(ctx context.Context, waitStates []string, limit int) ([]string, error) {
	rows, err := s.pool.Query(ctx, `SELECT uuid FROM nodes
		WHERE (reservation IS NOT NULL OR provision_state = ANY($1))
		AND NOT EXISTS (SELECT 1 FROM node_leases l WHERE l.node_uuid = nodes.uuid AND l.expires_at > now())
		ORDER BY id LIMIT $2`, waitStates, limit)
	if err != nil {
		return nil, fmt.Errorf("list unleased work: %w", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("list unleased work: %w", err)
	}
	return out, nil
}

// RegisterController records holder as live.
func (s *Store) RegisterController(ctx context.Context, holder string, ttl time.Duration) error {
	if _, err := s.pool.Exec(ctx, `INSERT INTO controllers (holder, expires_at) VALUES ($1, now() + $2 * interval '1 microsecond')
		ON CONFLICT (holder) DO UPDATE SET expires_at = excluded.expires_at`, holder, ttl.Microseconds()); err != nil {
		return fmt.Errorf("register controller %s: %w", holder, err)
	}
	return nil
}

// UnregisterController removes holder.
func (s *Store) UnregisterController(ctx context.Context, holder string) error {
	if _, err := s.pool.Exec(ctx, `DELETE FROM controllers WHERE holder = $1`, holder); err != nil {
		return fmt.Errorf("unregister controller %s: %w", holder, err)
	}
	return nil
}

// LiveControllers lists unexpired registrations, sorted.
func (s *Store) LiveControllers(ctx context.Context) ([]string, error) {
	rows, err := s.pool.Query(ctx, `SELECT holder FROM controllers WHERE expires_at > now() ORDER BY holder`)
	if err != nil {
		return nil, fmt.Errorf("list live controllers: %w", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("list live controllers: %w", err)
	}
	return out, nil
}

// notifyChannel carries "holder\nnode" payloads between controllers.
const notifyChannel = "anvil_nodes"

// NotifyNode asks holder to process the node (PostgreSQL NOTIFY: delivered
// to every listening controller at commit; only holder acts on it).
func (s *Store) NotifyNode(ctx context.Context, nodeUUID, holder string) error {
	if _, err := s.pool.Exec(ctx, `SELECT pg_notify($1, $2)`, notifyChannel, holder+"\n"+nodeUUID); err != nil {
		return fmt.Errorf("notify %s about node %s: %w", holder, nodeUUID, err)
	}
	return nil
}

// ListenNodes calls fn for notifications addressed to holder. It listens on
// a connection of its own, outside the pool, because LISTEN belongs to a
// session and the wait would otherwise pin a pooled connection.
func (s *Store) ListenNodes(ctx context.Context, holder string, fn func(nodeUUID string)) error {
	conn, err := pgx.ConnectConfig(ctx, s.pool.Config().ConnConfig.Copy())
	if err != nil {
		return fmt.Errorf("listen for node notifications: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, `LISTEN `+notifyChannel); err != nil {
		return fmt.Errorf("listen for node notifications: %w", err)
	}
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("wait for node notifications: %w", err)
		}
		to, node, ok := strings.Cut(n.Payload, "\n")
		if ok && to == holder {
			fn(node)
		}
	}
}
