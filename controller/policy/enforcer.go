package policy

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Creds are who a request comes from: the roles of its account (with the
// roles they imply, as Keystone's admin implies manager, member and
// reader), and either system scope or one project.
type Creds struct {
	User      string
	Roles     []string
	ProjectID string // "" with system scope
	System    bool   // system_scope:all
	// Legacy marks the identity of every account without a users file
	// (and of noauth): it passes the policy as a system admin, but the
	// handlers' own scope rules see it as Ironic sees an http_basic or
	// noauth caller, with neither system scope nor a project.
	Legacy bool
}

// value is a credential a check names (oslo.policy's to_policy_values).
func (c *Creds) value(kind string) (string, bool) {
	switch kind {
	case "project_id", "project_name":
		return c.ProjectID, true
	case "system_scope":
		if c.System {
			return "all", true
		}
		return "", true
	case "user_id", "user_name", "user":
		return c.User, true
	case "is_admin_project":
		// what oslo.context reports without Keystone's admin project:
		// system-scoped callers are the deployment's admins
		if c.System {
			return "True", true
		}
		return "False", true
	}
	return "", false
}

// HasRole says whether the credentials carry role (or a role implying it).
func (c *Creds) HasRole(role string) bool {
	for _, r := range c.Roles {
		if strings.EqualFold(r, role) {
			return true
		}
	}
	return false
}

// String names the caller for logs and records.
func (c *Creds) String() string {
	scope := "system"
	if !c.System {
		scope = "project:" + c.ProjectID
	}
	return fmt.Sprintf("%s (%s, %s)", c.User, strings.Join(c.Roles, ","), scope)
}

// impliedRoles are Keystone's default role implications (admin implies
// manager, manager member, member reader), so that a rule naming
// role:reader passes for an admin as it does with a Keystone token.
func impliedRoles(role string) []string {
	chain := []string{"admin", "manager", "member", "reader"}
	for i, r := range chain {
		if r == role {
			return append([]string(nil), chain[i:]...)
		}
	}
	return []string{role}
}

// SystemAdmin is the identity every account has without a users file (and
// every request under noauth): anvil's behaviour before roles existed.
func SystemAdmin(user string) Creds {
	return Creds{User: user, Roles: impliedRoles("admin"), System: true, Legacy: true}
}

// anvilDefaults are the rules of anvil's own routes, which Ironic does not
// have; their defaults follow the Ironic rule closest in meaning.
func anvilDefaults() [][2]string {
	return [][2]string{
		// what a node did (erasure records, boot timeline, step results)
		// reads like its history
		{"anvil:node:erase_records:get", "rule:baremetal:node:history:get"},
		{"anvil:node:boot_timeline:get", "rule:baremetal:node:history:get"},
		{"anvil:node:step_results:get", "rule:baremetal:node:history:get"},
		// the BMC's event log is the hardware's own history
		{"anvil:node:sel:get", "rule:baremetal:node:history:get"},
		{"anvil:node:children:get", "rule:baremetal:node:get"},
		{"anvil:node:cleaning_steps:get", "rule:baremetal:node:get"},
		// a new agent token is a change of the node's running state
		{"anvil:node:agent_token:delete", "rule:baremetal:node:set_provision_state"},
		{"anvil:erase_records:public_key", "(role:reader) or (role:service)"},
		{"anvil:api:get", ""},
		{"anvil:metrics:get", "(role:reader and system_scope:all) or (role:service and system_scope:all)"},
	}
}

// StepRulePrefix names the per-step rules (Ironic's
// baremetal:step:execute:<interface>.<step>): a step without a rule of
// its own is unrestricted.
const StepRulePrefix = "baremetal:step:execute:"

// Enforcer holds the rules in force. It is immutable: a reloaded policy
// is a new Enforcer.
type Enforcer struct {
	rules   map[string]expr
	sources map[string]string // check strings, for Rules
}

// Default is Ironic's default policy with anvil's own rules.
func Default() *Enforcer {
	e := &Enforcer{rules: map[string]expr{}, sources: map[string]string{}}
	for _, tbl := range [][][2]string{ironicDefaults(), anvilDefaults()} {
		for _, r := range tbl {
			x, err := parse(r[1])
			if err != nil {
				// the tables are code: a bad entry is a bug the tests catch
				panic(fmt.Sprintf("default rule %s: %v", r[0], err))
			}
			e.rules[r[0]], e.sources[r[0]] = x, r[1]
		}
	}
	return e
}

// Known says whether a rule of that name exists.
func (e *Enforcer) Known(rule string) bool {
	_, ok := e.rules[rule]
	return ok
}

// Rules lists the rules in force with their check strings, sorted by name.
func (e *Enforcer) Rules() [][2]string {
	out := make([][2]string, 0, len(e.sources))
	for k, v := range e.sources {
		out = append(out, [2]string{k, v})
	}
	sort.Slice(out, func(i, j int) bool { return out[i][0] < out[j][0] })
	return out
}

// Decide evaluates rule for creds against a target that may be partial: the
// answer is Yes, No, or Unknown (only for a partial target, when the rule
// depends on a value it lacks). A rule that does not exist fails.
func (e *Enforcer) Decide(rule string, c *Creds, t Target) Decision {
	x, ok := e.rules[rule]
	if !ok {
		return No
	}
	return Decision(x.eval(&evalCtx{rules: e.rules, creds: c, target: t}))
}

// Allowed evaluates rule for creds against a complete target.
func (e *Enforcer) Allowed(rule string, c *Creds, values map[string]string) bool {
	return e.Decide(rule, c, Target{Values: values}) == Yes
}

// Decision is Decide's answer.
type Decision int8

// Decide's answers.
const (
	No      = Decision(no)
	Yes     = Decision(yes)
	Unknown = Decision(unknown)
)

// LoadError is a policy file entry that is refused, with its line.
type LoadError struct {
	Line int
	Msg  string
}

func (e *LoadError) Error() string { return fmt.Sprintf("policy file line %d: %s", e.Line, e.Msg) }

// Override returns the policy with the rules of a policy file (YAML or
// JSON: rule name to check string, as Ironic's policy.yaml) in place of
// the defaults. Every entry must be a rule anvil knows, a per-step rule
// (baremetal:step:execute:...), or an alias another rule of the file
// names with rule:; a check string must parse; rules may not refer to
// each other in a cycle.
func (e *Enforcer) Override(data []byte) (*Enforcer, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("policy file: %w", err)
	}
	out := &Enforcer{rules: map[string]expr{}, sources: map[string]string{}}
	for k, v := range e.rules {
		out.rules[k], out.sources[k] = v, e.sources[k]
	}
	if len(doc.Content) == 0 {
		return out, nil // an empty file changes nothing
	}
	m := doc.Content[0]
	if m.Kind != yaml.MappingNode {
		return nil, &LoadError{Line: m.Line, Msg: "expected a mapping of rule names to check strings"}
	}
	type entry struct {
		line int
		x    expr
	}
	given := map[string]entry{}
	named := map[string]bool{}
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, v := m.Content[i], m.Content[i+1]
		if k.Kind != yaml.ScalarNode || v.Kind != yaml.ScalarNode {
			return nil, &LoadError{Line: k.Line, Msg: "expected rule: \"check string\""}
		}
		if _, dup := given[k.Value]; dup {
			return nil, &LoadError{Line: k.Line, Msg: fmt.Sprintf("rule %q is given twice", k.Value)}
		}
		x, err := parse(v.Value)
		if err != nil {
			var pe *ParseError
			if errors.As(err, &pe) {
				return nil, &LoadError{Line: v.Line, Msg: fmt.Sprintf("rule %q: %s", k.Value, pe.Msg)}
			}
			return nil, &LoadError{Line: v.Line, Msg: err.Error()}
		}
		given[k.Value] = entry{line: k.Line, x: x}
		refs(x, named)
		out.rules[k.Value], out.sources[k.Value] = x, v.Value
	}
	for name, en := range given {
		if e.Known(name) || strings.HasPrefix(name, StepRulePrefix) || named[name] {
			continue
		}
		return nil, &LoadError{Line: en.line, Msg: fmt.Sprintf("unknown rule %q (not a rule of Ironic's or anvil's, not %s<interface>.<step>, and no rule of the file names it)", name, StepRulePrefix)}
	}
	if name, ok := out.cycle(); ok {
		line := 0
		if en, ok := given[name]; ok {
			line = en.line
		}
		return nil, &LoadError{Line: line, Msg: fmt.Sprintf("rule %q refers to itself through rule: checks", name)}
	}
	return out, nil
}

// cycle finds a rule that reaches itself through rule: references.
func (e *Enforcer) cycle() (string, bool) {
	const (
		unseen = iota
		active
		done
	)
	state := map[string]int{}
	var visit func(string) bool
	visit = func(n string) bool {
		switch state[n] {
		case active:
			return true
		case done:
			return false
		}
		state[n] = active
		x, ok := e.rules[n]
		if ok {
			rs := map[string]bool{}
			refs(x, rs)
			for r := range rs {
				if visit(r) {
					return true
				}
			}
		}
		state[n] = done
		return false
	}
	names := make([]string, 0, len(e.rules))
	for n := range e.rules {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if state[n] == unseen && visit(n) {
			return n, true
		}
	}
	return "", false
}
