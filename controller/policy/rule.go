// Package policy is Ironic's authorization policy: its default rules
// (defaults_gen.go), check strings in oslo.policy's syntax (this file), a
// policy file that overrides them, and the identities anvil's own accounts
// have (users.go).
package policy

import (
	"fmt"
	"strings"
)

// tri is the result of a check whose target may not be loaded yet: a
// route's rule is first evaluated without the node (or allocation, or
// runbook), and the object is read only when the answer depends on it.
type tri int8

const (
	no tri = iota
	yes
	unknown
)

func triOf(b bool) tri {
	if b {
		return yes
	}
	return no
}

// expr is a parsed check string.
type expr interface {
	eval(e *evalCtx) tri
}

// evalCtx is what one evaluation sees.
type evalCtx struct {
	rules  map[string]expr
	creds  *Creds
	target Target
	depth  int
}

// Target is the object a rule is checked against: keys such as
// "node.owner", "node.lessee", "allocation.owner", "runbook.owner".
// Partial targets are not loaded yet: a key they lack is unknown, not
// absent.
type Target struct {
	Values  map[string]string
	Partial bool
}

type (
	constExpr bool
	notExpr   struct{ x expr }
	andExpr   []expr
	orExpr    []expr
	ruleRef   string
	// check is "kind:match": role:X, or a credential compared to match
	// (which may name a target value, %(node.owner)s), or a quoted
	// literal compared to match.
	check struct {
		kind, match string
		literal     bool
	}
)

func (c constExpr) eval(*evalCtx) tri { return triOf(bool(c)) }

func (n notExpr) eval(e *evalCtx) tri {
	switch n.x.eval(e) {
	case yes:
		return no
	case no:
		return yes
	}
	return unknown
}

func (a andExpr) eval(e *evalCtx) tri {
	out := yes
	for _, x := range a {
		switch x.eval(e) {
		case no:
			return no
		case unknown:
			out = unknown
		}
	}
	return out
}

func (o orExpr) eval(e *evalCtx) tri {
	out := no
	for _, x := range o {
		switch x.eval(e) {
		case yes:
			return yes
		case unknown:
			out = unknown
		}
	}
	return out
}

// maxDepth bounds rule:x chains; loading refuses cycles, this is a guard.
const maxDepth = 32

func (r ruleRef) eval(e *evalCtx) tri {
	x, ok := e.rules[string(r)]
	if !ok || e.depth >= maxDepth {
		return no // oslo.policy: a missing rule fails
	}
	e.depth++
	defer func() { e.depth-- }()
	return x.eval(e)
}

// substitute expands %(key)s from the target; ok is false when a key is
// absent (a failed check, as oslo's KeyError), known false when the target
// is partial and lacks it.
func substitute(s string, t Target) (out string, ok, known bool) {
	if !strings.Contains(s, "%(") {
		return s, true, true
	}
	var b strings.Builder
	for {
		i := strings.Index(s, "%(")
		if i < 0 {
			b.WriteString(s)
			return b.String(), true, true
		}
		j := strings.Index(s[i:], ")s")
		if j < 0 {
			b.WriteString(s)
			return b.String(), true, true
		}
		key := s[i+2 : i+j]
		v, present := t.Values[key]
		if !present {
			return "", false, !t.Partial
		}
		b.WriteString(s[:i])
		b.WriteString(v)
		s = s[i+j+2:]
	}
}

func (c check) eval(e *evalCtx) tri {
	match, ok, known := substitute(c.match, e.target)
	if !known {
		return unknown
	}
	if !ok {
		return no
	}
	if c.literal {
		return triOf(c.kind == match)
	}
	if c.kind == "role" {
		for _, r := range e.creds.Roles {
			if strings.EqualFold(r, match) {
				return yes
			}
		}
		return no
	}
	v, has := e.creds.value(c.kind)
	// An empty value (a node without owner, a caller without project)
	// matches nothing: oslo would compare "None" with "None" and let a
	// system-scoped caller pass a project check on an unowned node.
	return triOf(has && v != "" && v == match)
}

// ParseError is a check string that does not parse.
type ParseError struct {
	Check string
	Msg   string
}

func (e *ParseError) Error() string { return fmt.Sprintf("check %q: %s", e.Check, e.Msg) }

// parse reads a check string in oslo.policy's syntax: "" and "@" always
// pass, "!" never does; checks are kind:match (rule:, role:, a credential
// such as project_id, system_scope, user_id, or a quoted literal); they
// combine with not, and, or (in that precedence) and parentheses.
func parse(s string) (expr, error) {
	toks, err := tokenize(s)
	if err != nil {
		return nil, &ParseError{Check: s, Msg: err.Error()}
	}
	if len(toks) == 0 {
		return constExpr(true), nil
	}
	p := &parser{toks: toks}
	x, err := p.or()
	if err == nil && p.pos < len(p.toks) {
		err = fmt.Errorf("unexpected %q", p.toks[p.pos])
	}
	if err != nil {
		return nil, &ParseError{Check: s, Msg: err.Error()}
	}
	return x, nil
}

// maxCheckLen bounds a check string: the parser recurses on parentheses.
const maxCheckLen = 8192

func tokenize(s string) ([]string, error) {
	if len(s) > maxCheckLen {
		return nil, fmt.Errorf("longer than %d bytes", maxCheckLen)
	}
	var toks []string
	for _, w := range strings.Fields(s) {
		for strings.HasPrefix(w, "(") {
			toks = append(toks, "(")
			w = w[1:]
		}
		// as oslo.policy: leading "(" and trailing ")" are tokens of
		// their own ("%(node.owner)s" ends in "s", not ")")
		trimmed := strings.TrimRight(w, ")")
		closing := len(w) - len(trimmed)
		w = trimmed
		if w != "" {
			toks = append(toks, w)
		}
		for range closing {
			toks = append(toks, ")")
		}
	}
	return toks, nil
}

type parser struct {
	toks  []string
	pos   int
	depth int
}

func (p *parser) peek() string {
	if p.pos < len(p.toks) {
		return p.toks[p.pos]
	}
	return ""
}

func (p *parser) or() (expr, error) {
	x, err := p.and()
	if err != nil {
		return nil, err
	}
	terms := []expr{x}
	for strings.EqualFold(p.peek(), "or") {
		p.pos++
		y, err := p.and()
		if err != nil {
			return nil, err
		}
		terms = append(terms, y)
	}
	if len(terms) == 1 {
		return x, nil
	}
	return orExpr(terms), nil
}

func (p *parser) and() (expr, error) {
	x, err := p.not()
	if err != nil {
		return nil, err
	}
	terms := []expr{x}
	for strings.EqualFold(p.peek(), "and") {
		p.pos++
		y, err := p.not()
		if err != nil {
			return nil, err
		}
		terms = append(terms, y)
	}
	if len(terms) == 1 {
		return x, nil
	}
	return andExpr(terms), nil
}

// maxNesting bounds parentheses and nots.
const maxNesting = 64

func (p *parser) not() (expr, error) {
	if strings.EqualFold(p.peek(), "not") {
		p.pos++
		p.depth++
		defer func() { p.depth-- }()
		if p.depth > maxNesting {
			return nil, fmt.Errorf("nested deeper than %d", maxNesting)
		}
		x, err := p.not()
		if err != nil {
			return nil, err
		}
		return notExpr{x}, nil
	}
	return p.atom()
}

func (p *parser) atom() (expr, error) {
	t := p.peek()
	switch {
	case t == "":
		return nil, fmt.Errorf("a check is missing at the end")
	case t == "(":
		p.pos++
		p.depth++
		defer func() { p.depth-- }()
		if p.depth > maxNesting {
			return nil, fmt.Errorf("nested deeper than %d", maxNesting)
		}
		x, err := p.or()
		if err != nil {
			return nil, err
		}
		if p.peek() != ")" {
			return nil, fmt.Errorf("missing )")
		}
		p.pos++
		return x, nil
	case t == ")":
		return nil, fmt.Errorf("unexpected )")
	case t == "@":
		p.pos++
		return constExpr(true), nil
	case t == "!":
		p.pos++
		return constExpr(false), nil
	case strings.EqualFold(t, "and"), strings.EqualFold(t, "or"):
		return nil, fmt.Errorf("unexpected %q", t)
	}
	p.pos++
	kind, match, ok := strings.Cut(t, ":")
	if !ok || kind == "" {
		return nil, fmt.Errorf("%q is not kind:match", t)
	}
	if strings.HasPrefix(kind, "http") {
		return nil, fmt.Errorf("%q: remote (http) checks are not supported", t)
	}
	if kind == "rule" {
		if match == "" {
			return nil, fmt.Errorf("%q names no rule", t)
		}
		return ruleRef(match), nil
	}
	if len(kind) >= 2 && (kind[0] == '\'' || kind[0] == '"') && kind[len(kind)-1] == kind[0] {
		return check{kind: kind[1 : len(kind)-1], match: match, literal: true}, nil
	}
	return check{kind: kind, match: match}, nil
}

// refs lists the rules x names with rule:.
func refs(x expr, out map[string]bool) {
	switch v := x.(type) {
	case ruleRef:
		out[string(v)] = true
	case notExpr:
		refs(v.x, out)
	case andExpr:
		for _, y := range v {
			refs(y, out)
		}
	case orExpr:
		for _, y := range v {
			refs(y, out)
		}
	}
}
