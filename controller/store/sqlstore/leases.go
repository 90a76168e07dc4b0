package sqlstore

import (
	"context"
	"database/sql"
	stdjson "encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/anvil-metal/anvil/controller/store"
)

// Lease expiry is computed and compared by the dialect's clock: the
// database server's on PostgreSQL, so controllers on hosts whose clocks
// drift apart still agree on who holds a node; this process's on SQLite,
// whose file serves one controller.

// AcquireLease takes the node's lease if it is free, expired or already
// holder's, in one statement: the upsert's condition decides, and its
// RETURNING carries the holder it replaced (prev_holder, set from the old
// row), for the history. On PostgreSQL at READ COMMITTED, two controllers
// racing for an expired lease serialise on the row lock and the loser
// re-checks the condition against the winner's row, so exactly one gets
// it. Only when the lease is someone else's does a second statement read
// who holds it.
func (s *Store) AcquireLease(ctx context.Context, nodeUUID, holder string, ttl time.Duration) (bool, string, error) {
	p := params{nodeUUID, holder}
	q := `INSERT INTO node_leases (node_uuid, holder, expires_at) VALUES ($1, $2, ` + s.d.later(&p, ttl) + `)
		ON CONFLICT (node_uuid) DO UPDATE SET holder = excluded.holder, expires_at = excluded.expires_at,
			prev_holder = node_leases.holder
			WHERE node_leases.holder = excluded.holder OR node_leases.expires_at <= ` + s.d.now(&p) + `
		RETURNING COALESCE(prev_holder, '')`
	var prev string
	err := s.queryRow(ctx, s.w, q, p...).Scan(&prev)
	switch {
	case err == nil:
		if prev == holder {
			prev = ""
		}
		return true, prev, nil
	case s.d.conflict(err):
		return false, "", nil // lost a race (stricter isolation): someone else has it
	case !errors.Is(err, sql.ErrNoRows):
		return false, "", fmt.Errorf("acquire lease of node %s: %w", nodeUUID, err)
	}
	var current string
	err = s.queryRow(ctx, s.w, `SELECT holder FROM node_leases WHERE node_uuid = $1`, nodeUUID).Scan(&current)
	if errors.Is(err, sql.ErrNoRows) {
		return false, "", nil // released in between: the caller may try again
	}
	if err != nil {
		return false, "", fmt.Errorf("acquire lease of node %s: %w", nodeUUID, err)
	}
	return false, current, nil
}

// RenewLeases extends holder's live leases.
func (s *Store) RenewLeases(ctx context.Context, holder string, ttl time.Duration) ([]string, error) {
	p := params{holder}
	q := `UPDATE node_leases SET expires_at = ` + s.d.later(&p, ttl) + ` WHERE holder = $1 AND expires_at > ` + s.d.now(&p) +
		` RETURNING node_uuid`
	out, err := scanStrings(s.query(ctx, s.w, q, p...))
	if err != nil {
		return nil, fmt.Errorf("renew leases of %s: %w", holder, err)
	}
	return out, nil
}

// ReleaseLease ends holder's lease on the node.
func (s *Store) ReleaseLease(ctx context.Context, nodeUUID, holder string) error {
	if _, err := s.exec(ctx, s.w, `DELETE FROM node_leases WHERE node_uuid = $1 AND holder = $2`, nodeUUID, holder); err != nil {
		return fmt.Errorf("release lease of node %s: %w", nodeUUID, err)
	}
	return nil
}

// ReleaseLeases ends every lease of holder.
func (s *Store) ReleaseLeases(ctx context.Context, holder string) error {
	if _, err := s.exec(ctx, s.w, `DELETE FROM node_leases WHERE holder = $1`, holder); err != nil {
		return fmt.Errorf("release leases of %s: %w", holder, err)
	}
	return nil
}

// ClearLeases ends every lease.
func (s *Store) ClearLeases(ctx context.Context) error {
	if _, err := s.exec(ctx, s.w, `DELETE FROM node_leases`); err != nil {
		return fmt.Errorf("clear leases: %w", err)
	}
	return nil
}

// UnleasedWork lists reserved or waiting nodes without a live lease.
func (s *Store) UnleasedWork(ctx context.Context, waitStates []string, limit int) ([]string, error) {
	var p params
	cond := "reservation IS NOT NULL"
	if len(waitStates) > 0 {
		ph := make([]string, len(waitStates))
		for i, st := range waitStates {
			ph[i] = p.add(st)
		}
		cond += " OR provision_state IN (" + strings.Join(ph, ", ") + ")"
	}
	q := `SELECT uuid FROM nodes WHERE (` + cond + `)
		AND NOT EXISTS (SELECT 1 FROM node_leases l WHERE l.node_uuid = nodes.uuid AND l.expires_at > ` + s.d.now(&p) + `)
		ORDER BY id LIMIT ` + p.add(limit)
	out, err := scanStrings(s.query(ctx, s.r, q, p...))
	if err != nil {
		return nil, fmt.Errorf("list unleased work: %w", err)
	}
	return out, nil
}

// UnregisterController removes holder.
func (s *Store) UnregisterController(ctx context.Context, holder string) error {
	if _, err := s.exec(ctx, s.w, `DELETE FROM controllers WHERE holder = $1`, holder); err != nil {
		return fmt.Errorf("unregister controller %s: %w", holder, err)
	}
	return nil
}

// LiveControllers lists unexpired registrations, sorted.
func (s *Store) LiveControllers(ctx context.Context) ([]string, error) {
	var p params
	out, err := scanStrings(s.query(ctx, s.r, `SELECT holder FROM controllers WHERE expires_at > `+s.d.now(&p)+` ORDER BY holder`, p...))
	if err != nil {
		return nil, fmt.Errorf("list live controllers: %w", err)
	}
	return out, nil
}

// ListDHCPLeases returns every recorded lease, live or expired.
func (s *Store) ListDHCPLeases(ctx context.Context) ([]store.DHCPLease, error) {
	rows, err := s.query(ctx, s.r, `SELECT mac, ip, expires_at FROM dhcp_leases ORDER BY ip`)
	if err != nil {
		return nil, fmt.Errorf("list DHCP leases: %w", err)
	}
	defer rows.Close()
	var out []store.DHCPLease
	for rows.Next() {
		var l store.DHCPLease
		var exp any
		if err := rows.Scan(&l.MAC, &l.IP, &exp); err != nil {
			return nil, fmt.Errorf("list DHCP leases: %w", err)
		}
		if l.ExpiresAt, err = s.d.scanInstant(exp); err != nil {
			return nil, fmt.Errorf("list DHCP leases: %s: %w", l.IP, err)
		}
		out = append(out, l)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list DHCP leases: %w", err)
	}
	return out, nil
}

// ClaimDHCPLease gives l.IP to l.MAC unless another MAC's lease on it is
// live at now (then store.ErrConflict). Two controllers claiming one free
// address race on the address's unique constraint: one wins, the other
// gets ErrConflict and offers another address.
func (s *Store) ClaimDHCPLease(ctx context.Context, l store.DHCPLease, now time.Time) error {
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		if _, err := s.exec(ctx, tx, `DELETE FROM dhcp_leases WHERE ip = $1 AND mac <> $2 AND expires_at <= $3`,
			l.IP, l.MAC, s.d.instant(now)); err != nil {
			return err
		}
		_, err := s.exec(ctx, tx, `INSERT INTO dhcp_leases (mac, ip, expires_at) VALUES ($1, $2, $3)
			ON CONFLICT (mac) DO UPDATE SET ip = excluded.ip, expires_at = excluded.expires_at`,
			l.MAC, l.IP, s.d.instant(l.ExpiresAt))
		return err
	})
	if err == nil {
		return nil
	}
	if _, unique := s.d.duplicate(err); unique || s.d.conflict(err) {
		return fmt.Errorf("claim DHCP lease %s: held by another MAC: %w", l.IP, store.ErrConflict)
	}
	return fmt.Errorf("claim DHCP lease %s: %w", l.IP, err)
}

// RecordController registers c.Holder as live, with what it runs.
func (s *Store) RecordController(ctx context.Context, c store.Controller, ttl time.Duration) error {
	data, err := stdjson.Marshal(c)
	if err != nil {
		return fmt.Errorf("encode controller %s: %w", c.Holder, err)
	}
	p := params{c.Holder, data}
	now := s.d.now(&p)
	q := `INSERT INTO controllers (holder, data, expires_at, created_at, updated_at) VALUES ($1, $2, ` + s.d.later(&p, ttl) + `, ` + now + `, ` + now + `)
		ON CONFLICT (holder) DO UPDATE SET expires_at = excluded.expires_at, updated_at = excluded.updated_at, data = excluded.data,
			created_at = COALESCE(controllers.created_at, excluded.created_at)`
	if _, err := s.exec(ctx, s.w, q, p...); err != nil {
		return fmt.Errorf("record controller %s: %w", c.Holder, err)
	}
	return nil
}

// ListControllers lists every registration, by holder.
func (s *Store) ListControllers(ctx context.Context) ([]store.Controller, error) {
	var p params
	rows, err := s.query(ctx, s.r, `SELECT holder, expires_at > `+s.d.now(&p)+`, created_at, updated_at, data
		FROM controllers ORDER BY holder`, p...)
	if err != nil {
		return nil, fmt.Errorf("list controllers: %w", err)
	}
	defer rows.Close()
	var out []store.Controller
	for rows.Next() {
		var c store.Controller
		var created, updated any
		var data []byte
		if err := rows.Scan(&c.Holder, &c.Alive, &created, &updated, &data); err != nil {
			return nil, fmt.Errorf("list controllers: %w", err)
		}
		if data != nil {
			if err := stdjson.Unmarshal(data, &c); err != nil {
				return nil, fmt.Errorf("decode controller %s: %w", c.Holder, err)
			}
		}
		if c.Hostname == "" {
			c.Hostname, _, _ = strings.Cut(c.Holder, "/")
		}
		if created != nil {
			if c.CreatedAt, err = s.d.scanInstant(created); err != nil {
				return nil, fmt.Errorf("controller %s: %w", c.Holder, err)
			}
		}
		if updated != nil {
			t, err := s.d.scanInstant(updated)
			if err != nil {
				return nil, fmt.Errorf("controller %s: %w", c.Holder, err)
			}
			c.UpdatedAt = &t
		}
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list controllers: %w", err)
	}
	return out, nil
}
