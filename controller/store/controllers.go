package store

import (
	"context"
	"time"
)

// Controller is a controller's registration among those sharing a store,
// as GET /v1/conductors shows it.
type Controller struct {
	Holder         string   `json:"-"` // its name in leases: host/instance
	Hostname       string   `json:"hostname"`
	ConductorGroup string   `json:"conductor_group"`
	Drivers        []string `json:"drivers"` // hardware types
	// CreatedAt is the first registration, UpdatedAt the last, by the
	// lease clock (see Leases).
	CreatedAt time.Time  `json:"-"`
	UpdatedAt *time.Time `json:"-"`
	// Alive: the registration has not expired, i.e. the controller
	// renewed it within its lease TTL.
	Alive bool `json:"-"`
}

// Controllers describes the controllers sharing the store.
type Controllers interface {
	// RecordController registers c.Holder as a live controller until ttl
	// from now, with what it runs; controllers re-record as they renew
	// their leases. Leases.LiveControllers lists the live ones.
	RecordController(ctx context.Context, c Controller, ttl time.Duration) error
	// ListControllers lists every registration, live or expired, by
	// holder. A registration without a Hostname has the holder's host
	// part as its Hostname.
	ListControllers(ctx context.Context) ([]Controller, error)
}
