package api

// This file owns authorization: which policy rule guards each route (one
// table, routeRules), who the caller is (the users file's role and scope,
// or system admin without one), and the check every authenticated request
// passes before its handler runs, as Ironic's api_utils.check_*_policy do.

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"

	"github.com/gorilla/mux"

	"github.com/anvil-metal/anvil/controller/policy"
	"github.com/anvil-metal/anvil/controller/store"
)

// Authz is the policy in force and the accounts' identities; the controller
// swaps it whole on SIGHUP (SetAuthz).
type Authz struct {
	Policy *policy.Enforcer // nil: Ironic's defaults
	// Users gives each account its role and scope; nil: every account is
	// a system admin (anvil before roles, and noauth).
	Users *policy.Users
}

// SetAuthz puts a new policy and users file in force for the requests that
// follow.
func (s *Server) SetAuthz(a Authz) {
	if a.Policy == nil {
		a.Policy = policy.Default()
	}
	s.authz.Store(&a)
}

func (s *Server) currentAuthz() *Authz {
	if a := s.authz.Load(); a != nil {
		return a
	}
	// a Server not made by New (tests of single handlers)
	s.authz.CompareAndSwap(nil, &Authz{Policy: policy.Default()})
	return s.authz.Load()
}

// targetKind is what a route's rule is checked against.
type targetKind int8

const (
	tPublic    targetKind = iota // no credentials: agent and boot routes
	tNone                        // the caller's credentials only
	tNode                        // the {node} of the path
	tList                        // a collection: list_all, else list of one's project
	tAlloc                       // the {alloc} of the path
	tRunbook                     // the {runbook} of the path
	tPort                        // the {port}'s node
	tPortgroup                   // the {pg}'s node
)

// routeRule is the rule that guards a route and what it is checked on.
type routeRule struct {
	rule   string
	target targetKind
}

// routeRules maps "METHOD path" (the route's template without its /v1
// prefix and trailing slash) to its rule: every route has an entry
// (TestEveryRouteHasARule), and a route without one is refused.
func routeRules() map[string]routeRule {
	node := func(rule string) routeRule { return routeRule{"baremetal:node:" + rule, tNode} }
	none := func(rule string) routeRule { return routeRule{rule, tNone} }
	list := func(kind string) routeRule { return routeRule{"baremetal:" + kind + ":list", tList} }
	pub := routeRule{"", tPublic}
	m := map[string]routeRule{
		"GET ":              none("anvil:api:get"),
		"GET /metrics":      none("anvil:metrics:get"),
		"GET /nodes":        list("node"),
		"GET /nodes/detail": list("node"),
		"POST /nodes":       none("baremetal:node:create"),
		"GET /nodes/{node}": node("get"),
		// the patch's paths choose the rules (checkPatchPolicy)
		"PATCH /nodes/{node}":                                node("get"),
		"DELETE /nodes/{node}":                               node("delete"),
		"GET /nodes/{node}/states":                           node("get_states"),
		"GET /nodes/{node}/states/console":                   node("get_console"),
		"PUT /nodes/{node}/states/console":                   node("set_console_state"),
		"GET /nodes/{node}/console/log":                      node("get_console"),
		"GET /nodes/{node}/console/ws":                       node("get_console"),
		"PUT /nodes/{node}/states/provision":                 node("set_provision_state"),
		"PUT /nodes/{node}/states/power":                     node("set_power_state"),
		"PUT /nodes/{node}/states/raid":                      node("set_raid_state"),
		"PUT /nodes/{node}/maintenance":                      node("set_maintenance"),
		"DELETE /nodes/{node}/maintenance":                   node("clear_maintenance"),
		"GET /nodes/{node}/traits":                           node("traits:list"),
		"PUT /nodes/{node}/traits":                           node("traits:set"),
		"DELETE /nodes/{node}/traits":                        node("traits:delete"),
		"PUT /nodes/{node}/traits/{trait}":                   node("traits:set"),
		"DELETE /nodes/{node}/traits/{trait}":                node("traits:delete"),
		"GET /nodes/{node}/validate":                         node("validate"),
		"GET /nodes/{node}/history":                          node("history:get"),
		"GET /nodes/{node}/cleaning/steps":                   {"anvil:node:cleaning_steps:get", tNode},
		"GET /nodes/{node}/inventory":                        node("inventory:get"),
		"GET /nodes/{node}/bios":                             node("bios:get"),
		"GET /nodes/{node}/bios/{setting}":                   node("bios:get"),
		"GET /nodes/{node}/firmware":                         node("firmware:get"),
		"GET /nodes/{node}/children":                         {"anvil:node:children:get", tNode},
		"GET /nodes/{node}/steps/results":                    {"anvil:node:step_results:get", tNode},
		"GET /nodes/{node}/boot-timeline":                    {"anvil:node:boot_timeline:get", tNode},
		"GET /nodes/{node}/sel":                              {"anvil:node:sel:get", tNode},
		"PUT /nodes/{node}/management/inject_nmi":            node("inject_nmi"),
		"GET /nodes/{node}/erase-records":                    {"anvil:node:erase_records:get", tNode},
		"DELETE /nodes/{node}/agent_token":                   {"anvil:node:agent_token:delete", tNode},
		"GET /whoami":                                        none("anvil:api:get"),
		"GET /erase-records/public-key":                      none("anvil:erase_records:public_key"),
		"GET /nodes/{node}/vmedia":                           node("vmedia:get"),
		"POST /nodes/{node}/vmedia":                          node("vmedia:attach"),
		"DELETE /nodes/{node}/vmedia":                        node("vmedia:detach"),
		"GET /nodes/{node}/vendor_passthru/methods":          node("vendor_passthru"),
		"GET /nodes/{node}/ports":                            {"baremetal:port:get", tNode},
		"GET /nodes/{node}/portgroups":                       {"baremetal:portgroup:get", tNode},
		"GET /nodes/{node}/vifs":                             node("vif:list"),
		"POST /nodes/{node}/vifs":                            node("vif:attach"),
		"DELETE /nodes/{node}/vifs/{vif}":                    node("vif:detach"),
		"GET /nodes/{node}/allocation":                       {"baremetal:allocation:get", tNode},
		"DELETE /nodes/{node}/allocation":                    {"baremetal:allocation:delete", tNode},
		"GET /nodes/{node}/volume":                           {"baremetal:volume:get", tNode},
		"GET /nodes/{node}/volume/connectors":                {"baremetal:volume:get", tNode},
		"POST /nodes/{node}/volume/connectors":               {"baremetal:volume:create", tNode},
		"GET /nodes/{node}/volume/targets":                   {"baremetal:volume:get", tNode},
		"POST /nodes/{node}/volume/targets":                  {"baremetal:volume:create", tNode},
		"GET /ports":                                         list("port"),
		"GET /ports/detail":                                  list("port"),
		"POST /ports":                                        none("baremetal:port:create"),
		"GET /ports/{port}":                                  {"baremetal:port:get", tPort},
		"PATCH /ports/{port}":                                {"baremetal:port:update", tPort},
		"DELETE /ports/{port}":                               {"baremetal:port:delete", tPort},
		"GET /portgroups":                                    list("portgroup"),
		"GET /portgroups/detail":                             list("portgroup"),
		"POST /portgroups":                                   none("baremetal:portgroup:create"),
		"GET /portgroups/{pg}":                               {"baremetal:portgroup:get", tPortgroup},
		"PATCH /portgroups/{pg}":                             {"baremetal:portgroup:update", tPortgroup},
		"DELETE /portgroups/{pg}":                            {"baremetal:portgroup:delete", tPortgroup},
		"GET /allocations":                                   list("allocation"),
		"POST /allocations":                                  none("baremetal:allocation:create"),
		"GET /allocations/{alloc}":                           {"baremetal:allocation:get", tAlloc},
		"PATCH /allocations/{alloc}":                         {"baremetal:allocation:update", tAlloc},
		"DELETE /allocations/{alloc}":                        {"baremetal:allocation:delete", tAlloc},
		"GET /chassis":                                       none("baremetal:chassis:get"),
		"GET /chassis/detail":                                none("baremetal:chassis:get"),
		"POST /chassis":                                      none("baremetal:chassis:create"),
		"GET /chassis/{chassis}":                             none("baremetal:chassis:get"),
		"PATCH /chassis/{chassis}":                           none("baremetal:chassis:update"),
		"DELETE /chassis/{chassis}":                          none("baremetal:chassis:delete"),
		"GET /chassis/{chassis}/nodes":                       none("baremetal:chassis:get"),
		"GET /chassis/{chassis}/nodes/detail":                none("baremetal:chassis:get"),
		"GET /volume":                                        none("baremetal:volume:list_all"),
		"GET /volume/connectors":                             none("baremetal:volume:list_all"),
		"GET /volume/connectors/detail":                      none("baremetal:volume:list_all"),
		"POST /volume/connectors":                            none("baremetal:volume:create"),
		"GET /volume/targets":                                none("baremetal:volume:list_all"),
		"GET /volume/targets/detail":                         none("baremetal:volume:list_all"),
		"POST /volume/targets":                               none("baremetal:volume:create"),
		"GET /drivers":                                       none("baremetal:driver:get"),
		"GET /drivers/{driver}":                              none("baremetal:driver:get"),
		"GET /drivers/{driver}/properties":                   none("baremetal:driver:get_properties"),
		"GET /drivers/{driver}/raid/logical_disk_properties": none("baremetal:driver:get_raid_logical_disk_properties"),
		"GET /conductors":                                    none("baremetal:conductor:get"),
		"GET /conductors/{hostname}":                         none("baremetal:conductor:get"),
		"GET /deploy_templates":                              none("baremetal:deploy_template:get"),
		"POST /deploy_templates":                             none("baremetal:deploy_template:create"),
		"GET /deploy_templates/{template}":                   none("baremetal:deploy_template:get"),
		"PATCH /deploy_templates/{template}":                 none("baremetal:deploy_template:update"),
		"DELETE /deploy_templates/{template}":                none("baremetal:deploy_template:delete"),
		"GET /runbooks":                                      list("runbook"),
		"POST /runbooks":                                     none("baremetal:runbook:create"),
		"GET /runbooks/{runbook}":                            {"baremetal:runbook:get", tRunbook},
		"PATCH /runbooks/{runbook}":                          {"baremetal:runbook:update", tRunbook},
		"DELETE /runbooks/{runbook}":                         {"baremetal:runbook:delete", tRunbook},
		"GET /inspection_rules":                              none("baremetal:inspection_rule:get"),
		"POST /inspection_rules":                             none("baremetal:inspection_rule:create"),
		"GET /inspection_rules/{rule}":                       none("baremetal:inspection_rule:get"),
		"PATCH /inspection_rules/{rule}":                     none("baremetal:inspection_rule:update"),
		"DELETE /inspection_rules/{rule}":                    none("baremetal:inspection_rule:delete"),
		// the agent's and the nodes' own routes prove themselves otherwise
		"GET /lookup":                                       pub,
		"POST /heartbeat/{node}":                            pub,
		"POST /discovery":                                   pub,
		"POST /continue_inspection":                         pub,
		"GET /boot/files/{file}":                            pub,
		"HEAD /boot/files/{file}":                           pub,
		"GET /boot/firmware/{file}":                         pub,
		"HEAD /boot/firmware/{file}":                        pub,
		"GET /boot/{node}/ipxe":                             pub,
		"GET /boot/{node}/grub":                             pub,
		"GET /boot/{node}/vmedia/{key:[0-9a-f]{1,64}}.iso":  pub,
		"HEAD /boot/{node}/vmedia/{key:[0-9a-f]{1,64}}.iso": pub,
		"GET /boot/{node}/data/{key:[0-9a-f]{48}}/{file}":   pub,
		"HEAD /boot/{node}/data/{key:[0-9a-f]{48}}/{file}":  pub,
	}
	for _, v := range []string{"GET", "POST", "PUT", "PATCH", "DELETE"} {
		m[v+" /nodes/{node}/vendor_passthru"] = node("vendor_passthru")
	}
	for _, kind := range []string{"connectors/{connector}", "targets/{target}"} {
		for _, p := range []string{"/volume/" + kind, "/nodes/{node}/volume/" + kind} {
			// checked without the node: system scope only (see docs)
			m["GET "+p] = none("baremetal:volume:get")
			m["PATCH "+p] = none("baremetal:volume:update")
			m["DELETE "+p] = none("baremetal:volume:delete")
		}
	}
	return m
}

// routeKey is r's entry in routeRules.
func routeKey(r *http.Request) (string, bool) {
	cr := mux.CurrentRoute(r)
	if cr == nil {
		return "", false
	}
	t, err := cr.GetPathTemplate()
	if err != nil {
		return "", false
	}
	return r.Method + " " + routePath(t), true
}

// routePath is a route template without the /v1 prefix and trailing slash.
func routePath(t string) string {
	if t == "/v1" || strings.HasPrefix(t, "/v1/") {
		t = t[len("/v1"):]
	}
	return strings.TrimSuffix(t, "/")
}

type ctxPolicyKey int

const (
	ctxCreds ctxPolicyKey = iota
	ctxListProject
)

// callerCreds are the credentials of the request's caller (a system admin
// where nothing set them: noauth, and handlers called directly).
func callerCreds(ctx context.Context) *policy.Creds {
	if c, ok := ctx.Value(ctxCreds).(*policy.Creds); ok {
		return c
	}
	c := policy.SystemAdmin("")
	return &c
}

// listProject is the project a list is limited to ("" = all): a caller
// that may list only its own project's objects.
func listProject(ctx context.Context) string {
	p, _ := ctx.Value(ctxListProject).(string)
	return p
}

// forbidden is Ironic's HTTPForbidden for a rule.
func forbidden(rule string) error {
	return errf(http.StatusForbidden, "Access was denied to the following resource: %s", rule)
}

// identify finds the caller's credentials: nil when the account has no
// entry in the users file (refused: a forgotten line must not grant).
func (s *Server) identify(r *http.Request, az *Authz) *policy.Creds {
	user, _, _ := r.BasicAuth()
	if az.Users == nil {
		c := policy.SystemAdmin(user)
		return &c
	}
	c, ok := az.Users.Lookup(user)
	if !ok {
		return nil
	}
	return &c
}

// authorize checks the route's rule for the caller and returns the
// request to serve (with the credentials, and the project a list is
// limited to, in its context).
func (s *Server) authorize(r *http.Request, c *policy.Creds, az *Authz) (*http.Request, error) {
	ctx := context.WithValue(r.Context(), ctxCreds, c)
	r = r.WithContext(ctx)
	key, ok := routeKey(r)
	if !ok {
		return r, nil // the not-found handler: nothing to guard
	}
	rr, ok := s.routeRules[key]
	if !ok {
		return nil, errf(http.StatusForbidden, "Access was denied: route %s has no policy rule", key)
	}
	enf := az.Policy
	switch rr.target {
	case tPublic:
		return r, nil
	case tNone:
		if !enf.Allowed(rr.rule, c, nil) {
			return nil, forbidden(rr.rule)
		}
		return r, nil
	case tList:
		all := strings.TrimSuffix(rr.rule, ":list") + ":list_all"
		if enf.Allowed(all, c, nil) {
			return r, nil
		}
		owner := r.URL.Query().Get("owner")
		if c.ProjectID == "" || (owner != "" && owner != c.ProjectID) {
			return nil, forbidden(all)
		}
		if !enf.Allowed(rr.rule, c, nil) {
			return nil, forbidden(rr.rule)
		}
		return r.WithContext(context.WithValue(ctx, ctxListProject, c.ProjectID)), nil
	}
	// an object's rule: decided without reading it where the answer does
	// not depend on it (a system admin's every request)
	partial := policy.Target{Partial: true}
	see := seeRule(rr.target)
	if enf.Decide(see, c, partial) == policy.Yes && enf.Decide(rr.rule, c, partial) == policy.Yes {
		return r, nil
	}
	values, hide, err := s.targetOf(r, rr.target)
	if errors.Is(err, store.ErrNotFound) {
		return r, nil // the handler answers its own 404
	}
	if err != nil {
		return nil, err
	}
	if !enf.Allowed(see, c, values) {
		if rr.target == tRunbook && values["runbook.public"] == "true" && r.Method == http.MethodGet {
			return r, nil // Ironic's check_and_retrieve_public_runbook
		}
		// A project's caller learns nothing of a node it may not see;
		// ports, port groups and allocations are not found for anyone
		// (Ironic's check_*_policy_and_retrieve); runbooks are refused.
		if rr.target == tRunbook || (rr.target == tNode && c.ProjectID == "") {
			return nil, forbidden(see)
		}
		return nil, hide
	}
	if !enf.Allowed(rr.rule, c, values) {
		return nil, forbidden(rr.rule)
	}
	return r, nil
}

// seeRule is the rule that lets a caller see an object at all: failing it
// is a 404, not a 403.
func seeRule(k targetKind) string {
	switch k {
	case tAlloc:
		return "baremetal:allocation:get"
	case tRunbook:
		return "baremetal:runbook:get"
	}
	return "baremetal:node:get"
}

// targetOf reads the object a route names: its policy values, and the 404
// a caller who may not see it gets.
func (s *Server) targetOf(r *http.Request, k targetKind) (map[string]string, error, error) {
	ctx := r.Context()
	vars := mux.Vars(r)
	switch k {
	case tAlloc:
		a, err := withJSONSuffix(ctx, vars["alloc"], func(id string) (*store.Allocation, error) { return s.st.GetAllocation(ctx, id) })
		if err != nil {
			return nil, nil, err
		}
		return map[string]string{"allocation.owner": deref(a.Owner)}, notFound("Allocation", vars["alloc"]), nil
	case tRunbook:
		rb, err := withJSONSuffix(ctx, vars["runbook"], func(id string) (*store.Runbook, error) { return s.st.GetRunbook(ctx, id) })
		if err != nil {
			return nil, nil, err
		}
		pub := "false"
		if rb.Public {
			pub = "true"
		}
		return map[string]string{"runbook.owner": deref(rb.Owner), "runbook.public": pub}, notFound("Runbook", vars["runbook"]), nil
	case tPort, tPortgroup:
		var nodeUUID string
		var hide error
		if k == tPort {
			p, err := withJSONSuffix(ctx, vars["port"], func(id string) (*store.Port, error) { return s.st.GetPort(ctx, id) })
			if err != nil {
				return nil, nil, err
			}
			nodeUUID, hide = p.NodeUUID, notFound("Port", vars["port"])
		} else {
			p, err := withJSONSuffix(ctx, vars["pg"], func(id string) (*store.Portgroup, error) { return s.st.GetPortgroup(ctx, id) })
			if err != nil {
				return nil, nil, err
			}
			nodeUUID, hide = p.NodeUUID, notFound("Portgroup", vars["pg"])
		}
		n, err := s.st.GetNode(ctx, nodeUUID)
		if err != nil {
			return nil, nil, err
		}
		return nodeValues(n), hide, nil
	}
	n, err := s.loadNode(r)
	if err != nil {
		var nf *notFoundKey
		if errors.As(err, &nf) {
			return nil, nil, store.ErrNotFound
		}
		return nil, nil, err
	}
	return nodeValues(n), notFound("Node", mux.Vars(r)["node"]), nil
}

// nodeValues are a node's policy target.
func nodeValues(n *store.Node) map[string]string {
	return map[string]string{"node.owner": deref(n.Owner), "node.lessee": deref(n.Lessee)}
}

// allowedOn says whether the request's caller passes rule on node n.
func (s *Server) allowedOn(ctx context.Context, rule string, n *store.Node) bool {
	return s.currentAuthz().Policy.Allowed(rule, callerCreds(ctx), nodeValues(n))
}

// authzHolder is the Server's swappable policy.
type authzHolder = atomic.Pointer[Authz]
