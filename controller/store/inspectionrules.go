package store

import (
	"context"
	"time"
)

// InspectionRule is an admin's rule run at the end of every inspection
// (Ironic's inspection rule, API 1.96): when its conditions hold on the
// node and its inventory, its actions change the node. Conditions and
// actions are kept as the documents the API accepted (op, args, loop,
// multiple); controller/inspectrules parses and runs them.
type InspectionRule struct {
	ID          int64            `json:"-"`
	UUID        string           `json:"uuid"`
	Description *string          `json:"description"`
	Phase       string           `json:"phase"` // "main", the only phase
	Priority    int              `json:"priority"`
	Sensitive   bool             `json:"sensitive"`
	Conditions  []map[string]any `json:"conditions"`
	Actions     []map[string]any `json:"actions"`
	CreatedAt   time.Time        `json:"created_at"`
	UpdatedAt   *time.Time       `json:"updated_at"`
}

// InspectionRules is the inspection-rule part of the store. UUIDs are
// unique (ErrDuplicateUUID).
type InspectionRules interface {
	CreateInspectionRule(ctx context.Context, r *InspectionRule) error
	GetInspectionRule(ctx context.Context, uuid string) (*InspectionRule, error)
	// ListInspectionRules pages the rules of phase (every phase if "") by
	// InspectionRuleSortKeys.
	ListInspectionRules(ctx context.Context, phase string, p Page) ([]*InspectionRule, error)
	UpdateInspectionRule(ctx context.Context, r *InspectionRule) error
	DeleteInspectionRule(ctx context.Context, uuid string) error
}

// InspectionRuleSortKeys are the keys a rule list sorts by: the columns
// of the table (Ironic sorts by any but conditions and actions; the
// document's description and sensitive are not columns here).
func InspectionRuleSortKeys() []string {
	return []string{"id", "uuid", "priority", "phase", "created_at", "updated_at"}
}
