package api

// This file owns GET /v1/whoami (anvil's: the caller's account, roles and
// scope, for `anvil whoami`) and what the dashboard asks of the policy.

import (
	"net/http"
)

// whoami answers who the API takes the caller for.
func (s *Server) whoami(w http.ResponseWriter, r *http.Request) error {
	if _, err := parseQuery(r); err != nil {
		return err
	}
	c := callerCreds(r.Context())
	doc := map[string]any{"user": nil, "roles": c.Roles, "system_scope": nil, "project_id": nil, "auth": "noauth"}
	if s.auth != nil {
		doc["auth"] = "http_basic"
	}
	if c.User != "" {
		doc["user"] = c.User
	}
	if c.System {
		doc["system_scope"] = "all"
	}
	if c.ProjectID != "" {
		doc["project_id"] = c.ProjectID
	}
	// without a users file every account is a system admin, as before
	// roles existed: say so, it is a deployment's choice to revisit
	doc["users_file"] = s.currentAuthz().Users != nil
	writeJSON(w, http.StatusOK, doc)
	return nil
}

// dashboardActions are the node actions the dashboard offers, by the rule
// each needs.
func dashboardActions() map[string]string {
	return map[string]string{
		"provision":   "baremetal:node:set_provision_state",
		"clean_steps": "baremetal:node:set_provision_state:clean_steps",
		"power":       "baremetal:node:set_power_state",
		"maintenance": "baremetal:node:set_maintenance",
		"retire":      "baremetal:node:update:retired",
		"nmi":         "baremetal:node:inject_nmi",
	}
}

// NodeActions says which of the dashboard's actions on a node of that
// owner and lessee the account of r may take (the dashboard authenticates
// r itself); none for an account the users file does not list.
func (s *Server) NodeActions(r *http.Request, owner, lessee string) map[string]bool {
	az := s.currentAuthz()
	c := s.identify(r, az)
	out := map[string]bool{}
	for action, rule := range dashboardActions() {
		out[action] = c != nil && az.Policy.Allowed(rule, c, map[string]string{"node.owner": owner, "node.lessee": lessee})
	}
	return out
}

// SeesAllNodes says whether the account of r may list every node (the
// dashboard's counts then come from the store, not from its node list).
func (s *Server) SeesAllNodes(r *http.Request) bool {
	az := s.currentAuthz()
	c := s.identify(r, az)
	return c != nil && az.Policy.Allowed("baremetal:node:list_all", c, nil)
}
