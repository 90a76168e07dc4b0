package sqlstore

import (
	"context"

	"github.com/anvil-metal/anvil/controller/store"
)

// Inspection rules have a table of their own (migration 16): lists filter
// by phase and sort by priority, which the document alone cannot index.
var ruleKind = &tableKind[store.InspectionRule]{
	table: "inspection_rules", what: "inspection rule",
	uuid:  func(r *store.InspectionRule) string { return r.UUID },
	setID: func(r *store.InspectionRule, id int64) { r.ID = id },
	created: func(s *Store, r *store.InspectionRule) []column {
		return []column{{"created_at", s.d.stamp(&r.CreatedAt)}}
	},
	written: func(s *Store, r *store.InspectionRule) []column {
		return []column{{"phase", r.Phase}, {"priority", r.Priority}, {"updated_at", s.d.stamp(r.UpdatedAt)}}
	},
}

// CreateInspectionRule inserts a rule.
func (s *Store) CreateInspectionRule(ctx context.Context, r *store.InspectionRule) error {
	return ruleKind.create(ctx, s, r)
}

// GetInspectionRule finds a rule by UUID.
func (s *Store) GetInspectionRule(ctx context.Context, uuid string) (*store.InspectionRule, error) {
	return ruleKind.get(ctx, s, uuid)
}

// ListInspectionRules lists the rules of a phase (all if ""), one keyset
// page at a time.
func (s *Store) ListInspectionRules(ctx context.Context, phase string, p store.Page) ([]*store.InspectionRule, error) {
	if phase == "" {
		return ruleKind.list(ctx, s, nil, nil, p)
	}
	var args params
	return ruleKind.list(ctx, s, []string{"phase = " + args.add(phase)}, args, p)
}

// UpdateInspectionRule writes a rule.
func (s *Store) UpdateInspectionRule(ctx context.Context, r *store.InspectionRule) error {
	return ruleKind.update(ctx, s, r)
}

// DeleteInspectionRule removes a rule.
func (s *Store) DeleteInspectionRule(ctx context.Context, uuid string) error {
	return ruleKind.delete(ctx, s, uuid)
}
