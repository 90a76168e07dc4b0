package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/anvil-metal/anvil/controller/store"
)

// ListDHCPLeases returns every recorded lease, live or expired.
func (s *Store) ListDHCPLeases(ctx context.Context) ([]store.DHCPLease, error) {
	rows, err := s.pool.Query(ctx, `SELECT mac, ip, expires_at FROM dhcp_leases ORDER BY ip`)
	if err != nil {
		return nil, fmt.Errorf("list DHCP leases: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (store.DHCPLease, error) {
		var l store.DHCPLease
		err := r.Scan(&l.MAC, &l.IP, &l.ExpiresAt)
		return l, err
	})
	if err != nil {
		return nil, fmt.Errorf("list DHCP leases: %w", err)
	}
	return out, nil
}

// ClaimDHCPLease gives l.IP to l.MAC unless another MAC's lease on it is
// live at now (then store.ErrConflict). Two controllers claiming one free
// address race on the dhcp_leases_ip_key constraint: one wins, the other
// gets ErrConflict and offers another address.
func (s *Store) ClaimDHCPLease(ctx context.Context, l store.DHCPLease, now time.Time) error {
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `DELETE FROM dhcp_leases WHERE ip = $1 AND mac <> $2 AND expires_at <= $3`,
			l.IP, l.MAC, now); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO dhcp_leases (mac, ip, expires_at) VALUES ($1, $2, $3)
			ON CONFLICT (mac) DO UPDATE SET ip = excluded.ip, expires_at = excluded.expires_at`,
			l.MAC, l.IP, l.ExpiresAt)
		return err
	})
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && (pgErr.Code == uniqueViolation || pgErr.Code == serializationFailure || pgErr.Code == deadlockDetected) {
		return fmt.Errorf("claim DHCP lease %s: held by another MAC: %w", l.IP, store.ErrConflict)
	}
	if err != nil {
		return fmt.Errorf("claim DHCP lease %s: %w", l.IP, err)
	}
	return nil
}
