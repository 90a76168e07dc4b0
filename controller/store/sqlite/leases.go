package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Leases use this process's clock: an SQLite database has one controller
// (the file is local), so there is no other clock to disagree with.

// AcquireLease takes the node's lease if it is free, expired or already
// holder's.
func (s *Store) AcquireLease(ctx context.Context, nodeUUID, holder string, ttl time.Duration) (bool, string, error) {
	now := time.Now()
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return false, "", fmt.Errorf("acquire lease of node %s: %w", nodeUUID, err)
	}
	defer tx.Rollback()
	var prev string
	var expires int64
	err = tx.QueryRowContext(ctx, `SELECT holder, expires_at FROM node_leases WHERE node_uuid = ?`, nodeUUID).Scan(&prev, &expires)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		prev = ""
	case err != nil:
		return false, "", fmt.Errorf("acquire lease of node %s: %w", nodeUUID, err)
	case prev != holder && expires > now.UnixNano():
		return false, prev, nil // live, someone else's
	case prev == holder:
		prev = ""
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO node_leases (node_uuid, holder, expires_at) VALUES (?1, ?2, ?3)
		ON CONFLICT (node_uuid) DO UPDATE SET holder = excluded.holder, expires_at = excluded.expires_at`,
		nodeUUID, holder, now.Add(ttl).UnixNano()); err != nil {
		return false, "", fmt.Errorf("acquire lease of node %s: %w", nodeUUID, err)
	}
	if err := tx.Commit(); err != nil {
		return false, "", fmt.Errorf("acquire lease of node %s: %w", nodeUUID, err)
	}
	return true, prev, nil
}

// RenewLeases extends holder's live leases.
func (s *Store) RenewLeases(ctx context.Context, holder string, ttl time.Duration) ([]string, error) {
	now := time.Now()
	rows, err := s.w.QueryContext(ctx, `UPDATE node_leases SET expires_at = ?1 WHERE holder = ?2 AND expires_at > ?3
		RETURNING node_uuid`, now.Add(ttl).UnixNano(), holder, now.UnixNano())
	if err != nil {
		return nil, fmt.Errorf("renew leases of %s: %w", holder, err)
	}
	return scanStrings(rows)
}

// ReleaseLease ends holder's lease on the node.
func (s *Store) ReleaseLease(ctx context.Context, nodeUUID, holder string) error {
	if _, err := s.w.ExecContext(ctx, `DELETE FROM node_leases WHERE node_uuid = ? AND holder = ?`, nodeUUID, holder); err != nil {
		return fmt.Errorf("release lease of node %s: %w", nodeUUID, err)
	}
	return nil
}

// ReleaseLeases ends every lease of holder.
func (s *Store) ReleaseLeases(ctx context.Context, holder string) error {
	if _, err := s.w.ExecContext(ctx, `DELETE FROM node_leases WHERE holder = ?`, holder); err != nil {
		return fmt.Errorf("release leases of %s: %w", holder, err)
	}
	return nil
}

// ClearLeases ends every lease.
func (s *Store) ClearLeases(ctx context.Context) error {
	if _, err := s.w.ExecContext(ctx, `DELETE FROM node_leases`); err != nil {
		return fmt.Errorf("clear leases: %w", err)
	}
	return nil
}

// UnleasedWork lists reserved or waiting nodes without a live lease.
func (s *Store) UnleasedWork(ctx context.Context, waitStates []string, limit int) ([]string, error) {
	var args []any
	cond := "reservation IS NOT NULL"
	if len(waitStates) > 0 {
		cond += " OR provision_state IN (?" + strings.Repeat(", ?", len(waitStates)-1) + ")"
		for _, st := range waitStates {
			args = append(args, st)
		}
	}
	args = append(args, time.Now().UnixNano(), limit)
	rows, err := s.r.QueryContext(ctx, `SELECT uuid FROM nodes WHERE (`+cond+`)
		AND NOT EXISTS (SELECT 1 FROM node_leases l WHERE l.node_uuid = nodes.uuid AND l.expires_at > ?)
		ORDER BY id LIMIT ?`, args...)
	if err != nil {
		return nil, fmt.Errorf("list unleased work: %w", err)
	}
	return scanStrings(rows)
}

// RegisterController records holder as live.
func (s *Store) RegisterController(ctx context.Context, holder string, ttl time.Duration) error {
	if _, err := s.w.ExecContext(ctx, `INSERT INTO controllers (holder, expires_at) VALUES (?1, ?2)
		ON CONFLICT (holder) DO UPDATE SET expires_at = excluded.expires_at`, holder, time.Now().Add(ttl).UnixNano()); err != nil {
		return fmt.Errorf("register controller %s: %w", holder, err)
	}
	return nil
}

// UnregisterController removes holder.
func (s *Store) UnregisterController(ctx context.Context, holder string) error {
	if _, err := s.w.ExecContext(ctx, `DELETE FROM controllers WHERE holder = ?`, holder); err != nil {
		return fmt.Errorf("unregister controller %s: %w", holder, err)
	}
	return nil
}

// LiveControllers lists unexpired registrations, sorted.
func (s *Store) LiveControllers(ctx context.Context) ([]string, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT holder FROM controllers WHERE expires_at > ? ORDER BY holder`, time.Now().UnixNano())
	if err != nil {
		return nil, fmt.Errorf("list live controllers: %w", err)
	}
	return scanStrings(rows)
}

func scanStrings(rows *sql.Rows) ([]string, error) {
	defer rows.Close()
	var out []string
	for rows.Next() {
		var v string
		if err := rows.Scan(&v); err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}
