package store

import (
	"context"
	"time"
)

// Runbook is a named list of steps a manual clean or a service runs in
// place of the steps its request would name (Ironic's runbook, API 1.92).
// A node may run it only if one of its traits is the runbook's name.
type Runbook struct {
	ID    int64         `json:"-"`
	UUID  string        `json:"uuid"`
	Name  string        `json:"name"` // a trait: CUSTOM_... or a standard one
	Steps []RunbookStep `json:"steps"`
	// DisableRamdisk runs the steps without booting the agent (every
	// step must then be out of band).
	DisableRamdisk bool `json:"disable_ramdisk"`
	// Public and Owner say who may use it, as Ironic's policy reads them:
	// an owned runbook is its project's, a public one anyone's.
	Public    bool           `json:"public"`
	Owner     *string        `json:"owner"`
	Extra     map[string]any `json:"extra"`
	CreatedAt time.Time      `json:"created_at"`
	UpdatedAt *time.Time     `json:"updated_at"`
}

// RunbookStep is one step of a runbook: Ironic's RUNBOOK_STEP_SCHEMA,
// where order says when it runs (lowest first) instead of a priority.
type RunbookStep struct {
	Interface string         `json:"interface"`
	Step      string         `json:"step"`
	Args      map[string]any `json:"args"`
	Order     int            `json:"order"`
}

// RunbookFilter narrows a runbook list.
type RunbookFilter struct {
	// Project keeps the runbooks this project owns and the public ones
	// (Ironic's "project" filter).
	Project *string
}

// Runbooks is the runbook part of the store. Names and UUIDs are unique
// (ErrDuplicateName, ErrDuplicateUUID).
type Runbooks interface {
	CreateRunbook(ctx context.Context, rb *Runbook) error
	// GetRunbook finds a runbook by UUID or name.
	GetRunbook(ctx context.Context, ident string) (*Runbook, error)
	// ListRunbooks pages by any of RunbookSortKeys.
	ListRunbooks(ctx context.Context, f RunbookFilter, p Page) ([]*Runbook, error)
	UpdateRunbook(ctx context.Context, rb *Runbook) error
	DeleteRunbook(ctx context.Context, uuid string) error
}

// RunbookSortKeys are the keys a runbook list sorts by (Ironic's columns
// but extra and steps).
func RunbookSortKeys() []string {
	return []string{"id", "uuid", "name", "public", "owner", "disable_ramdisk", "created_at", "updated_at"}
}
