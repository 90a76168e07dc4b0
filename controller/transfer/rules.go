package transfer

// Inspection rules (API 1.96) in the document: written after the runbooks,
// sensitive ones included (the document holds BMC credentials already); a
// document without them reads as one without.

import (
	"errors"
	"fmt"

	"github.com/anvil-metal/anvil/controller/store"
)

// inspectionRule checks an inspection rule as the API takes one: a
// unique UUID, the one phase, and at least one action.
func (d *decoder) inspectionRule(r *store.InspectionRule) error {
	err := unique(d.ruleUUIDs, "uuid", r.UUID)
	if r.Phase != "main" {
		err = errors.Join(err, fmt.Errorf("phase %q is not main", r.Phase))
	}
	if len(r.Actions) == 0 {
		err = errors.Join(err, errors.New("actions is missing or empty"))
	}
	return err
}
