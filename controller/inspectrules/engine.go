package inspectrules

// Running rules: each rule whose conditions all hold runs its actions, in
// priority order (highest first; equal priorities in the order given:
// stored rules by id, then built-in ones), on copies of the node, its
// ports and the plugin data. Nothing is applied unless every rule ran:
// the first error stops the run and the caller writes nothing.

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"sort"
	"strings"
)

// Subject is what rules read and change: the node's fields by Ironic's
// names (interfaces as boot_interface etc., traits a list of names), its
// ports (uuid, address, extra, local_link_connection, ...), the
// inventory and the plugin data.
type Subject struct {
	Node       map[string]any
	Ports      []map[string]any
	Inventory  map[string]any
	PluginData map[string]any
}

// Options are the engine's settings and the caller's checks.
type Options struct {
	// MaskSecrets is Ironic's [inspection_rules]mask_secrets: "always"
	// (the default, ""), "never", or "sensitive" (masked but for
	// sensitive rules): password, auth_token and bmc_password in the
	// inventory and plugin data read as "***".
	MaskSecrets string
	Logger      *slog.Logger
	// CheckNode and CheckPort, if set, check the value a rule leaves in a
	// top-level field (the store's types, an existing driver, ...).
	CheckNode, CheckPort func(field string, v any) error
	// HTTPClient makes api-call's requests (http.DefaultClient if nil);
	// each is bounded by its timeout argument, at most maxCallTimeout.
	HTTPClient *http.Client
}

// Result is what the rules left.
type Result struct {
	Node         map[string]any
	Ports        []map[string]any
	PortsChanged []string // UUIDs of the ports actions changed
	PluginData   map[string]any
	// Changes say what each applied action did, for the node's history:
	// "rule UUID: set-attribute driver_info/ipmi_address". Values are
	// never in them.
	Changes []string
	Matched []string // the UUIDs of the rules whose actions ran
	// Manage: a rule asked for the node to be managed (ActionManage).
	Manage bool
}

// SensitiveFields are the keys Ironic masks (base.SENSITIVE_FIELDS).
var SensitiveFields = []string{"password", "auth_token", "bmc_password"}

func sensitiveKey(k string) bool {
	for _, f := range SensitiveFields {
		if k == f {
			return true
		}
	}
	return false
}

// secretKey is what the log action never prints: Ironic's sensitive
// fields and any key that looks like a credential (ipmi_password,
// redfish_password, ...).
func secretKey(k string) bool {
	l := strings.ToLower(k)
	return sensitiveKey(l) || strings.Contains(l, "password") || strings.Contains(l, "secret") ||
		strings.Contains(l, "token") || strings.Contains(l, "credential")
}

// run is one run's state.
type run struct {
	ctx  context.Context
	o    Options
	log  *slog.Logger
	s    Subject
	res  *Result
	rule *Rule
}

// Run applies rules to the subject. An error is an *ExecError naming the
// rule; the subject is never changed (the result holds copies).
func Run(ctx context.Context, rules []Rule, s Subject, o Options) (*Result, error) {
	log := o.Logger
	if log == nil {
		log = slog.Default()
	}
	sorted := append([]Rule{}, rules...)
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].Priority > sorted[j].Priority })
	res := &Result{Node: copyMap(s.Node), PluginData: copyMap(s.PluginData)}
	for _, p := range s.Ports {
		res.Ports = append(res.Ports, copyMap(p))
	}
	inv := s.Inventory
	if inv == nil {
		inv = map[string]any{}
	}
	r := &run{ctx: ctx, o: o, log: log, res: res,
		s: Subject{Node: res.Node, Ports: res.Ports, Inventory: inv, PluginData: res.PluginData}}
	for i := range sorted {
		r.rule = &sorted[i]
		ok, err := r.conditions()
		if err != nil {
			return nil, r.fail(err)
		}
		if !ok {
			log.Debug("inspection rule skipped: a condition does not hold", "rule", r.rule.UUID, "node", res.Node["uuid"])
			continue
		}
		log.Info("applying inspection rule", "rule", r.rule.UUID, "node", res.Node["uuid"])
		res.Matched = append(res.Matched, r.rule.UUID)
		for _, a := range r.rule.Actions {
			if err := r.action(a); err != nil {
				return nil, r.fail(err)
			}
		}
	}
	return res, nil
}

func (r *run) fail(err error) error {
	if e, ok := err.(*ExecError); ok {
		return e
	}
	return &ExecError{Rule: r.rule.UUID, Msg: fmt.Sprintf("Failed to apply rule %s to node %v: %v", r.rule.UUID, r.s.Node["uuid"], err)}
}

// scope is the names a rule's strings may use; item only in a loop.
func (r *run) scope(item any, inLoop, forLog bool) *scope {
	vars := map[string]any{"node": object(r.s.Node), "inventory": r.s.Inventory, "plugin_data": r.s.PluginData}
	if inLoop {
		vars["item"] = item
	}
	sc := &scope{vars: vars}
	mode := r.o.MaskSecrets
	if mode == "" || mode == "always" || mode == "sensitive" && !r.rule.Sensitive {
		sc.masked = sensitiveKey
	}
	if forLog {
		sc.masked, sc.maskNode = secretKey, true
	}
	return sc
}

// args names and interpolates an operation's arguments.
func (r *run) args(sig signature, op string, raw any, item any, inLoop, forLog bool) (map[string]any, error) {
	named, err := normalizeArgs(sig, deepCopy(raw))
	if err != nil {
		return nil, err
	}
	sc := r.scope(item, inLoop, forLog)
	out := make(map[string]any, len(named))
	for k, v := range named {
		if inLoop || contains(formattedArgs[op], k) {
			v = sc.interpolate(v, inLoop, op)
		}
		out[k] = v
	}
	return out, nil
}

func contains(l []string, s string) bool {
	for _, x := range l {
		if x == s {
			return true
		}
	}
	return false
}

// conditions says whether all of the rule's conditions hold.
func (r *run) conditions() (bool, error) {
	for _, c := range r.rule.Conditions {
		ok, err := r.condition(c)
		if err != nil || !ok {
			return false, err
		}
	}
	return true, nil
}

// condition is Ironic's check_with_loop / check_condition, "multiple"
// as it does: first is true as soon as one item is (so, as any), last is
// the last item's.
func (r *run) condition(c Condition) (bool, error) {
	once := func(item any, inLoop bool) (bool, error) {
		args, err := r.args(conditionSigs[c.Op], c.Op, c.Args, item, inLoop, false)
		if err != nil {
			return false, err
		}
		if inLoop && contains(conditionSigs[c.Op].optional, "force_strings") {
			args["force_strings"] = true
		}
		ok, err := check(c.Op, args)
		return ok != c.Invert, err
	}
	if c.Loop == nil {
		return once(nil, false)
	}
	var results []bool
	switch items := c.Loop.(type) {
	case map[string]any:
		ok, err := once(items, true)
		if err != nil || c.Multiple == "first" || c.Multiple == "last" {
			return ok, err
		}
		results = []bool{ok}
	case []any:
		for _, it := range items {
			ok, err := once(it, true)
			if err != nil {
				return false, err
			}
			results = append(results, ok)
			if c.Multiple == "first" && ok {
				return true, nil
			}
			if c.Multiple == "last" {
				results = []bool{ok}
			}
		}
	default:
		return once(nil, false)
	}
	switch c.Multiple {
	case "all":
		for _, ok := range results {
			if !ok {
				return false, nil
			}
		}
		return true, nil
	case "first", "last":
		return len(results) > 0 && results[0], nil
	}
	for _, ok := range results { // any
		if ok {
			return true, nil
		}
	}
	return false, nil
}

// action runs an action, once per loop item.
func (r *run) action(a Action) error {
	switch items := a.Loop.(type) {
	case map[string]any:
		return r.actionOnce(a, items, true)
	case []any:
		for _, it := range items {
			if err := r.actionOnce(a, it, true); err != nil {
				return err
			}
		}
		return nil
	}
	return r.actionOnce(a, nil, false)
}

func (r *run) actionOnce(a Action, item any, inLoop bool) error {
	args, err := r.args(actionSigs[a.Op], a.Op, a.Args, item, inLoop, a.Op == "log")
	if err != nil {
		return err
	}
	what, err := r.apply(a.Op, args)
	if err != nil {
		return err
	}
	if what != "" {
		r.res.Changes = append(r.res.Changes, fmt.Sprintf("rule %s: %s %s", r.rule.UUID, a.Op, what))
	}
	return nil
}

// deepCopy copies a JSON value.
func deepCopy(v any) any {
	switch x := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = deepCopy(e)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = deepCopy(e)
		}
		return out
	case []string:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = e
		}
		return out
	}
	return v
}

// copyMap copies a document; nil is an empty one.
func copyMap(m map[string]any) map[string]any {
	if m == nil {
		return map[string]any{}
	}
	return deepCopy(m).(map[string]any)
}
