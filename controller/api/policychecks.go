package api

// This file owns the policy checks inside handlers, past the route's own
// rule (policy.go): per-step rules, the clean and service steps of a
// provision request, node patches by path, allocations of a project, and
// the node fields redacted below filter_threshold.

import (
	"context"
	"net/http"
	"strings"

	"github.com/anvil-metal/anvil/controller/policy"
	"github.com/anvil-metal/anvil/controller/store"
	"github.com/anvil-metal/anvil/protocol"
)

// checkStepsPolicy is Ironic's validate_user_steps_policy: a step with a
// rule of its own (baremetal:step:execute:<interface>.<step>) runs only
// for callers who pass it; other steps are unrestricted.
func (s *Server) checkStepsPolicy(ctx context.Context, n *store.Node, steps []stepName) error {
	enf := s.currentAuthz().Policy
	c := callerCreds(ctx)
	var values map[string]string // no node: a runbook being written
	if n != nil {
		values = nodeValues(n)
	}
	var errs []string
	for _, st := range steps {
		rule := policy.StepRulePrefix + st.iface + "." + st.step
		if enf.Known(rule) && !enf.Allowed(rule, c, values) {
			errs = append(errs, "insufficient privileges to execute step "+st.step+" on interface "+st.iface)
		}
	}
	if len(errs) > 0 {
		return errf(http.StatusForbidden, "%s", strings.Join(errs, "; "))
	}
	return nil
}

// nodeRedactions are the fields Ironic's node_sanitize redacts for a
// caller below baremetal:node:get:filter_threshold who fails the field's
// rule, as the JSON shown instead.
func nodeRedactions() []struct{ field, rule, json string } {
	return []struct{ field, rule, json string }{
		{"last_error", "baremetal:node:get:last_error",
			`"** Value Redacted - Requires baremetal:node:get:last_error permission. **"`},
		{"reservation", "baremetal:node:get:reservation",
			`"** Redacted - requires baremetal:node:get:reservation permission. **"`},
		{"driver_internal_info", "baremetal:node:get:driver_internal_info",
			`{"content":"** Redacted - Requires baremetal:node:get:driver_internal_info permission. **"}`},
		{"driver_info", "baremetal:node:get:driver_info",
			`{"content":"** Redacted - requires baremetal:node:get:driver_info permission. **"}`},
	}
}

// nodeRedactor is the node renderer's redact for the request's caller:
// nil for a caller at Ironic's filter_threshold (system readers), who
// sees every field.
func (s *Server) nodeRedactor(ctx context.Context) func(n *store.Node) map[string]string {
	enf, c := s.currentAuthz().Policy, callerCreds(ctx)
	if enf.Allowed("baremetal:node:get:filter_threshold", c, nil) {
		return nil
	}
	redactions := nodeRedactions()
	return func(n *store.Node) map[string]string {
		values := nodeValues(n)
		var out map[string]string
		for _, red := range redactions {
			if !enf.Allowed(red.rule, c, values) {
				if out == nil {
					out = map[string]string{}
				}
				out[red.field] = red.json
			}
		}
		return out
	}
}

// scopeAllocation applies Ironic's rules for an allocation a project's
// caller creates: it belongs to the caller's project unless the caller
// passes baremetal:allocation:create_restricted (so the conductor picks
// only the project's nodes), and a node to backfill must be one the caller
// may see.
func (s *Server) scopeAllocation(ctx context.Context, a *store.Allocation, node *store.Node, nodeIdent *string) error {
	c := callerCreds(ctx)
	if c.System || c.ProjectID == "" {
		return nil
	}
	if node != nil && !s.allowedOn(ctx, "baremetal:node:get", node) {
		return badRequest("Node %s could not be found.", deref(nodeIdent))
	}
	if a.Owner != nil && *a.Owner != "" {
		if *a.Owner != c.ProjectID && !s.currentAuthz().Policy.Allowed("baremetal:allocation:create_restricted", c, nil) {
			return errf(http.StatusForbidden, "Cannot create allocation with an owner Project ID value %s not matching the requester Project ID %s. "+
				"Policy baremetal:allocation:create_restricted is required for this capability.", *a.Owner, c.ProjectID)
		}
		return nil
	}
	own := c.ProjectID
	a.Owner = &own
	return nil
}

// patchRules are Ironic's rules for the paths a node patch writes (its
// _authorize_patch_and_get_node), by path prefix.
func patchRules() [][2]string {
	return [][2]string{
		{"/instance_info", "baremetal:node:update_instance_info"},
		{"/extra", "baremetal:node:update_extra"},
		{"/driver_info", "baremetal:node:update:driver_info"},
		{"/properties", "baremetal:node:update:properties"},
		{"/chassis_uuid", "baremetal:node:update:chassis_uuid"},
		{"/instance_uuid", "baremetal:node:update:instance_uuid"},
		{"/instance_name", "baremetal:node:update_instance_info"},
		{"/lessee", "baremetal:node:update:lessee"},
		{"/owner", "baremetal:node:update:owner"},
		{"/driver", "baremetal:node:update:driver_interfaces"},
		{"/network_data", "baremetal:node:update:network_data"},
		{"/conductor_group", "baremetal:node:update:conductor_group"},
		{"/name", "baremetal:node:update:name"},
		{"/retired", "baremetal:node:update:retired"},
		{"/shard", "baremetal:node:update:shard"},
		{"/parent_node", "baremetal:node:update:parent_node"},
		{"/disable_power_off", "baremetal:node:update:disable_power_off"},
	}
}

// checkPatchPolicy checks the rules of every path a node patch writes,
// baremetal:node:update for the paths without one of their own.
func (s *Server) checkPatchPolicy(ctx context.Context, n *store.Node, ops []patchOp) error {
	var rules []string
	generic := len(ops) == 0
	for _, op := range ops {
		found := false
		for _, pr := range patchRules() {
			if strings.HasPrefix(op.Path, pr[0]) {
				rules, found = append(rules, pr[1]), true
				break
			}
		}
		field := strings.TrimPrefix(op.Path, "/")
		if !found && strings.HasSuffix(field, "_interface") && !strings.Contains(field, "/") {
			rules, found = append(rules, "baremetal:node:update:driver_interfaces"), true
		}
		if !found && strings.HasPrefix(op.Path, "/automated_clean") && strings.TrimSpace(string(op.Value)) == "false" {
			rules, found = append(rules, "baremetal:node:disable_cleaning"), true
		}
		if !found {
			generic = true
		}
	}
	if generic {
		rules = append(rules, "baremetal:node:update")
	}
	for _, rule := range rules {
		if !s.allowedOn(ctx, rule, n) {
			return forbidden(rule)
		}
	}
	return nil
}

// stepName is a step as the per-step rules name it.
type stepName struct{ iface, step string }

// requestStepNames names the steps of a request body (malformed steps are
// the request's own checks' to refuse).
func requestStepNames(raw []map[string]any) []stepName {
	out := make([]stepName, 0, len(raw))
	for _, m := range raw {
		iface, _ := m["interface"].(string)
		step, _ := m["step"].(string)
		out = append(out, stepName{iface, step})
	}
	return out
}

func protocolStepNames(steps []protocol.Step) []stepName {
	out := make([]stepName, len(steps))
	for i, st := range steps {
		out[i] = stepName{st.Interface, st.Step}
	}
	return out
}

// checkProvisionSteps is Ironic's secondary check of a provision request
// that names its own steps: the clean_steps and service_steps rules on
// the node, then each step's own rule.
func (s *Server) checkProvisionSteps(ctx context.Context, n *store.Node, b *provisionBody) error {
	if len(b.CleanSteps) > 0 && !s.allowedOn(ctx, "baremetal:node:set_provision_state:clean_steps", n) {
		return forbidden("baremetal:node:set_provision_state:clean_steps")
	}
	if len(b.ServiceSteps) > 0 && !s.allowedOn(ctx, "baremetal:node:set_provision_state:service_steps", n) {
		return forbidden("baremetal:node:set_provision_state:service_steps")
	}
	var all []stepName
	for _, raw := range [][]map[string]any{b.DeploySteps, b.CleanSteps, b.ServiceSteps} {
		all = append(all, requestStepNames(raw)...)
	}
	return s.checkStepsPolicy(ctx, n, all)
}
