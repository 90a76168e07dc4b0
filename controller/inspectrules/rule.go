// Package inspectrules is the inspection rule engine (Ironic's
// ironic/common/inspection_rules, API 1.96): rules whose conditions are
// checked against a node, its inventory and plugin data at the end of an
// inspection, and whose actions then change the node and its ports. It
// knows nothing of the store: the caller hands it the rules and the node
// as documents and writes back what it returns.
package inspectrules

import (
	"fmt"
	"regexp"
	"sort"
	"strings"
)

// PhaseMain is the only inspection phase (Ironic's InspectionPhase).
const PhaseMain = "main"

// Rule is a checked rule.
type Rule struct {
	UUID        string
	Description string
	Phase       string
	Priority    int
	Sensitive   bool
	Conditions  []Condition
	Actions     []Action
}

// Condition is one check: Op (without the "!"), Invert for "!op".
type Condition struct {
	Op       string
	Invert   bool
	Args     any // a dict of named arguments, or the deprecated list
	Loop     any // a list (or dict) of items, nil for none
	Multiple string
}

// Action is one change.
type Action struct {
	Op   string
	Args any
	Loop any
}

// signature is an operation's named arguments (Ironic reads them from its
// plugins' __call__).
type signature struct {
	required, optional []string
}

// conditionOps are Ironic's operators at master (operators.OPERATORS), in
// its order.
var conditionOps = []string{"eq", "lt", "gt", "is-empty", "in-net", "matches", "contains", "one-of", "is-none", "is-true", "is-false"}

var conditionSigs = map[string]signature{
	"eq":       {[]string{"values"}, []string{"force_strings"}},
	"lt":       {[]string{"values"}, []string{"force_strings"}},
	"gt":       {[]string{"values"}, []string{"force_strings"}},
	"is-empty": {[]string{"value"}, nil},
	"in-net":   {[]string{"address", "subnet"}, nil},
	"matches":  {[]string{"value", "regex"}, nil},
	"contains": {[]string{"value", "regex"}, nil},
	"one-of":   {[]string{"value"}, []string{"values"}},
	"is-none":  {[]string{"value"}, nil},
	"is-true":  {[]string{"value"}, nil},
	"is-false": {[]string{"value"}, nil},
}

// actionOps are Ironic's actions at master (actions.ACTIONS), in its
// order.
var actionOps = []string{"fail", "log", "set-attribute", "extend-attribute", "del-attribute", "set-capability",
	"unset-capability", "add-trait", "remove-trait", "set-plugin-data", "extend-plugin-data", "unset-plugin-data",
	"set-port-attribute", "extend-port-attribute", "del-port-attribute", "api-call",
	// anvil's own: Ironic has no action that changes a node's state.
	ActionManage}

// ActionManage asks that a node discovery just enrolled be managed (its
// BMC credentials verified, enroll -> manageable) once the rules have
// run: the end of hands-off enrolment. It does nothing on an inspection,
// where the node is manageable already.
const ActionManage = "anvil-manage"

var actionSigs = map[string]signature{
	"fail":                  {[]string{"msg"}, nil},
	"log":                   {[]string{"msg"}, []string{"level"}},
	"set-attribute":         {[]string{"path", "value"}, nil},
	"extend-attribute":      {[]string{"path", "value"}, []string{"unique"}},
	"del-attribute":         {[]string{"path"}, nil},
	"set-capability":        {[]string{"name", "value"}, nil},
	"unset-capability":      {[]string{"name"}, nil},
	"add-trait":             {[]string{"name"}, nil},
	"remove-trait":          {[]string{"name"}, nil},
	"set-plugin-data":       {[]string{"path", "value"}, nil},
	"extend-plugin-data":    {[]string{"path", "value"}, []string{"unique"}},
	"unset-plugin-data":     {[]string{"path"}, nil},
	"set-port-attribute":    {[]string{"port_id", "path", "value"}, nil},
	"extend-port-attribute": {[]string{"port_id", "path", "value"}, []string{"unique"}},
	"del-port-attribute":    {[]string{"port_id", "path"}, nil},
	"api-call":              {[]string{"url"}, []string{"headers", "proxies", "timeout", "retries", "backoff_factor"}},
	ActionManage:            {nil, nil},
}

// formattedArgs are the arguments interpolated outside loops (Ironic's
// FORMATTED_ARGS); in a loop every argument is.
var formattedArgs = map[string][]string{
	"eq": {"values"}, "lt": {"values"}, "gt": {"values"}, "is-empty": {"value"}, "in-net": {"address", "subnet"},
	"matches": {"value"}, "contains": {"value"}, "one-of": {"value"}, "is-none": {"value"}, "is-true": {"value"},
	"is-false": {"value"},
	"log":      {"msg"}, "set-attribute": {"value"}, "extend-attribute": {"value"}, "set-capability": {"value"},
	"set-plugin-data": {"value"}, "extend-plugin-data": {"value"}, "set-port-attribute": {"value"},
	"extend-port-attribute": {"value"}, "api-call": {"url"},
}

// ValidationError is a rule the API refuses (400), with Ironic's text.
type ValidationError struct{ Msg string }

func (e *ValidationError) Error() string { return e.Msg }

func invalid(format string, a ...any) error { return &ValidationError{Msg: fmt.Sprintf(format, a...)} }

// parseInverted is Ironic's parse_inverted_operator: "!eq" is eq
// negated, with optional spaces; two "!" are refused.
func parseInverted(op string) (string, bool, error) {
	op = strings.TrimSpace(op)
	if strings.Count(op, "!") > 1 {
		return "", false, invalid("Multiple exclamation marks are not allowed. To apply the invert of an operation, " +
			"simply add an exclamation mark (with an optional space) before the operator, e.g. eq - !eq.")
	}
	inv := strings.HasPrefix(op, "!")
	return strings.TrimSpace(strings.TrimLeft(op, "!")), inv, nil
}

// normalizeArgs turns args into named arguments (a list is the
// deprecated positional form).
func normalizeArgs(sig signature, args any) (map[string]any, error) {
	switch a := args.(type) {
	case map[string]any:
		return a, nil
	case []any:
		if len(a) < len(sig.required) {
			return nil, invalid("Not enough arguments provided. Missing: %s", strings.Join(sig.required[len(a):], ", "))
		}
		out := make(map[string]any, len(a))
		names := append(append([]string{}, sig.required...), sig.optional...)
		for i, v := range a {
			if i >= len(names) {
				break // Python's zip drops the surplus
			}
			out[names[i]] = v
		}
		return out, nil
	}
	return nil, invalid("args must be either a list or dictionary")
}

// checkArgs is Ironic's Base.validate: every required argument and no
// other.
func checkArgs(sig signature, args any) error {
	named, err := normalizeArgs(sig, args)
	if err != nil {
		return err
	}
	var missing, unexpected []string
	for _, r := range sig.required {
		if _, ok := named[r]; !ok {
			missing = append(missing, r)
		}
	}
	known := map[string]bool{}
	for _, n := range append(append([]string{}, sig.required...), sig.optional...) {
		known[n] = true
	}
	for k := range named {
		if !known[k] {
			unexpected = append(unexpected, k)
		}
	}
	sort.Strings(unexpected)
	var msg []string
	if len(missing) > 0 {
		msg = append(msg, "missing required argument(s): "+strings.Join(missing, ", "))
	}
	if len(unexpected) > 0 {
		msg = append(msg, "unexpected argument(s): "+strings.Join(unexpected, ", "))
	}
	if len(msg) > 0 {
		return invalid("%s", strings.Join(msg, "; "))
	}
	return nil
}

// Parse checks a rule document (the API's body, or one rule of the
// built-in file) as Ironic's schema and validate_rule do, and returns
// the rule. builtIn lets the priority be any integer (negative ones are
// reserved to built-in rules).
func Parse(doc map[string]any, builtIn bool) (*Rule, error) {
	if err := checkSchema(doc, builtIn); err != nil {
		return nil, err
	}
	r := &Rule{Phase: PhaseMain}
	if s, ok := doc["uuid"].(string); ok {
		r.UUID = s
	}
	if s, ok := doc["description"].(string); ok {
		r.Description = s
	}
	if s, ok := doc["phase"].(string); ok {
		r.Phase = s
	}
	if p, ok := doc["priority"].(float64); ok {
		r.Priority = int(p)
	}
	if b, ok := doc["sensitive"].(bool); ok {
		r.Sensitive = b
	}
	var errs []string
	if r.Phase != PhaseMain {
		errs = append(errs, fmt.Sprintf("Invalid phase: %s. Valid phases are: %s", r.Phase, PhaseMain))
	}
	if !builtIn && r.Priority < 0 {
		errs = append(errs, "Priority cannot be negative for user-defined rules.")
	}
	if !builtIn && r.Priority > 9999 {
		errs = append(errs, "Priority must be between 0 and 9999 for user-defined rules.")
	}
	conds, _ := doc["conditions"].([]any)
	for _, c := range conds {
		m := c.(map[string]any) // checkSchema: objects with op and args
		op, inv, err := parseInverted(m["op"].(string))
		if err != nil {
			errs = append(errs, err.Error())
			continue
		}
		if err := checkArgs(conditionSigs[op], m["args"]); err != nil {
			errs = append(errs, fmt.Sprintf("Invalid parameters for condition operator %s: %v", op, err))
		} else if err := checkRegex(op, m["args"], emptyToNil(m["loop"]) != nil); err != nil {
			errs = append(errs, fmt.Sprintf("Invalid parameters for condition operator %s: %v", op, err))
		}
		multiple, _ := m["multiple"].(string)
		if multiple == "" {
			multiple = "any"
		}
		r.Conditions = append(r.Conditions, Condition{Op: op, Invert: inv, Args: m["args"], Loop: emptyToNil(m["loop"]), Multiple: multiple})
	}
	for _, a := range doc["actions"].([]any) {
		m := a.(map[string]any)
		op := m["op"].(string)
		if err := checkArgs(actionSigs[op], m["args"]); err != nil {
			errs = append(errs, fmt.Sprintf("Invalid parameters for action operator %s: %v", op, err))
		}
		r.Actions = append(r.Actions, Action{Op: op, Args: m["args"], Loop: emptyToNil(m["loop"])})
	}
	switch len(errs) {
	case 0:
		return r, nil
	case 1:
		return nil, invalid("%s", errs[0])
	}
	return nil, invalid("Multiple validation errors occurred: %s", strings.Join(errs, "; "))
}

// checkRegex refuses, when the rule is written, a literal regular
// expression that Go's RE2 cannot compile (Ironic finds out only when the
// rule runs; lookarounds and backreferences are Python's alone).
func checkRegex(op string, args any, inLoop bool) error {
	if op != "matches" && op != "contains" || inLoop {
		return nil // in a loop the regex is formatted first: checked when it runs
	}
	named, _ := normalizeArgs(conditionSigs[op], args)
	re, ok := named["regex"].(string)
	if !ok {
		return nil
	}
	if _, err := regexp.Compile(re); err != nil {
		return errorf("invalid regular expression: %v", err)
	}
	return nil
}

// emptyToNil: an empty loop is no loop, as Ironic's `if loop`.
func emptyToNil(v any) any {
	switch x := v.(type) {
	case []any:
		if len(x) == 0 {
			return nil
		}
	case map[string]any:
		if len(x) == 0 {
			return nil
		}
	}
	return v
}

// ConditionOps and ActionOps list the operations, in Ironic's order.
func ConditionOps() []string { return append([]string{}, conditionOps...) }

// ActionOps lists the actions, in Ironic's order.
func ActionOps() []string { return append([]string{}, actionOps...) }

// ruleError carries Ironic's texts, which start with a capital and end
// with a full stop.
type ruleError string

func (e ruleError) Error() string { return string(e) }

func errorf(format string, a ...any) error { return ruleError(fmt.Sprintf(format, a...)) }
