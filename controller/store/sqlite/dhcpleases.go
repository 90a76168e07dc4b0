package sqlite

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/anvil-metal/anvil/controller/store"
)

// ListDHCPLeases returns every recorded lease, live or expired.
func (s *Store) ListDHCPLeases(ctx context.Context) ([]store.DHCPLease, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT mac, ip, expires_at FROM dhcp_leases ORDER BY ip`)
	if err != nil {
		return nil, fmt.Errorf("list DHCP leases: %w", err)
	}
	defer rows.Close()
	var out []store.DHCPLease
	for rows.Next() {
		var l store.DHCPLease
		var exp int64
		if err := rows.Scan(&l.MAC, &l.IP, &exp); err != nil {
			return nil, fmt.Errorf("list DHCP leases: %w", err)
		}
		l.ExpiresAt = time.Unix(0, exp)
		out = append(out, l)
	}
	return out, rows.Err()
}

// ClaimDHCPLease gives l.IP to l.MAC unless another MAC's lease on it is
// live at now (then store.ErrConflict).
func (s *Store) ClaimDHCPLease(ctx context.Context, l store.DHCPLease, now time.Time) error {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("claim DHCP lease %s: %w", l.IP, err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `DELETE FROM dhcp_leases WHERE ip = ? AND mac <> ? AND expires_at <= ?`,
		l.IP, l.MAC, now.UnixNano()); err != nil {
		return fmt.Errorf("claim DHCP lease %s: %w", l.IP, err)
	}
	_, err = tx.ExecContext(ctx, `INSERT INTO dhcp_leases (mac, ip, expires_at) VALUES (?, ?, ?)
		ON CONFLICT (mac) DO UPDATE SET ip = excluded.ip, expires_at = excluded.expires_at`,
		l.MAC, l.IP, l.ExpiresAt.UnixNano())
	if err != nil && strings.Contains(err.Error(), "UNIQUE constraint failed") {
		return fmt.Errorf("claim DHCP lease %s: held by another MAC: %w", l.IP, store.ErrConflict)
	}
	if err != nil {
		return fmt.Errorf("claim DHCP lease %s: %w", l.IP, err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("claim DHCP lease %s: %w", l.IP, err)
	}
	return nil
}
