package store

import "time"

// DHCPLease is an address the controller's full-mode DHCP server (the boot
// service) gave a MAC. Kept in the store so a restarted controller, or
// another one sharing the database, never gives a live lease's address to
// anyone else. The SQLite and PostgreSQL stores implement
// ListDHCPLeases and ClaimDHCPLease; the boot service owns the interface.
type DHCPLease struct {
	MAC       string    // lower-case, colon-separated
	IP        string    // dotted IPv4
	ExpiresAt time.Time // by the controller's clock
}
