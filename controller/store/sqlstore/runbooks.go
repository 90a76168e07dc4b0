package sqlstore

import (
	"context"

	"github.com/anvil-metal/anvil/controller/store"
)

// Runbooks have a table of their own (migration 15), as deploy templates
// do: one definition (tableKind) serves both. The columns are what a
// list sorts or filters by; the steps live in the document.
var runbookKind = &tableKind[store.Runbook]{
	table: "runbooks", what: "runbook", byName: true,
	uuid:  func(rb *store.Runbook) string { return rb.UUID },
	setID: func(rb *store.Runbook, id int64) { rb.ID = id },
	created: func(s *Store, rb *store.Runbook) []column {
		return []column{{"created_at", s.d.stamp(&rb.CreatedAt)}}
	},
	written: func(s *Store, rb *store.Runbook) []column {
		return []column{{"name", rb.Name}, {"owner", rb.Owner}, {"public", rb.Public},
			{"disable_ramdisk", rb.DisableRamdisk}, {"updated_at", s.d.stamp(rb.UpdatedAt)}}
	},
}

// CreateRunbook inserts a runbook.
func (s *Store) CreateRunbook(ctx context.Context, rb *store.Runbook) error {
	return runbookKind.create(ctx, s, rb)
}

// GetRunbook finds a runbook by UUID, then by name.
func (s *Store) GetRunbook(ctx context.Context, ident string) (*store.Runbook, error) {
	return runbookKind.get(ctx, s, ident)
}

// ListRunbooks lists runbooks, one keyset page at a time.
func (s *Store) ListRunbooks(ctx context.Context, f store.RunbookFilter, p store.Page) ([]*store.Runbook, error) {
	var args params
	var where []string
	if f.Project != nil {
		where = append(where, "(owner = "+args.add(*f.Project)+" OR public = "+args.add(true)+")")
	}
	return runbookKind.list(ctx, s, where, args, p)
}

// UpdateRunbook writes a runbook.
func (s *Store) UpdateRunbook(ctx context.Context, rb *store.Runbook) error {
	return runbookKind.update(ctx, s, rb)
}

// DeleteRunbook removes a runbook.
func (s *Store) DeleteRunbook(ctx context.Context, uuid string) error {
	return runbookKind.delete(ctx, s, uuid)
}
