package inspectrules

// The conditions (Ironic's operators.py) with Python's comparison
// semantics on JSON values: numbers compare as numbers (a bool is 0 or 1),
// strings by code point, lists item by item; ordering a str against an
// int is an error, as Python's TypeError.

import (
	"fmt"
	"net/netip"
	"regexp"
	"strings"
)

// ExecError is a rule that failed while it ran (Ironic's
// InspectionRuleExecutionFailure and its subclasses): inspection fails.
type ExecError struct {
	Rule string // the rule's UUID
	Msg  string
}

func (e *ExecError) Error() string { return e.Msg }

// condFailure is Ironic's RuleConditionCheckFailure text.
func condFailure(format string, a ...any) error {
	return errorf("Inspection rule condition check failed. Reason: %s", fmt.Sprintf(format, a...))
}

// execFailure is Ironic's InspectionRuleExecutionFailure text.
func execFailure(format string, a ...any) error {
	return errorf("Inspection rule execution failed. Reason: %s", fmt.Sprintf(format, a...))
}

// check evaluates one condition once, on its (interpolated) arguments.
func check(op string, args map[string]any) (bool, error) {
	switch op {
	case "eq", "lt", "gt":
		return simple(op, args["values"], Truthy(args["force_strings"]))
	case "is-empty":
		switch pyStr(args["value"], nil) {
		case "", "None", "[]", "{}":
			return true, nil
		}
		return false, nil
	case "in-net":
		return inNet(args["address"], args["subnet"])
	case "matches", "contains":
		re, ok := args["regex"].(string)
		if !ok {
			return false, errorf("first argument must be string or compiled pattern")
		}
		if op == "matches" && !strings.HasSuffix(re, "$") {
			re += "$"
		}
		if op == "matches" {
			re = "^(?:" + re + ")"
		}
		rx, err := regexp.Compile(re)
		if err != nil {
			return false, execFailure("invalid regular expression: %v", err)
		}
		return rx.MatchString(pyStr(args["value"], nil)), nil
	case "one-of":
		values, ok := args["values"]
		if !ok {
			values = []any{}
		}
		return pyIn(args["value"], values)
	case "is-none":
		return args["value"] == nil, nil
	case "is-true":
		switch v := args["value"].(type) {
		case bool:
			return v, nil
		case float64:
			return v != 0, nil
		case string:
			s := strings.ToLower(v)
			return s == "yes" || s == "true", nil
		}
		return false, nil
	case "is-false":
		switch v := args["value"].(type) {
		case bool:
			return !v, nil
		case float64:
			return v == 0, nil
		case string:
			s := strings.ToLower(v)
			return s == "no" || s == "false", nil
		case nil:
			return true, nil
		}
		return false, nil
	}
	return false, errorf("Unsupported operator '%s'.", op)
}

// Truthy is Python's bool() of a decoded JSON value (Ironic's checks of
// flags such as a rule's sensitive, or a patch's values, are Python's).
func Truthy(v any) bool {
	switch x := v.(type) {
	case nil:
		return false
	case bool:
		return x
	case float64:
		return x != 0
	case string:
		return x != ""
	case []any:
		return len(x) > 0
	case map[string]any:
		return len(x) > 0
	}
	return true
}

// simple is Ironic's SimpleOperator: each value against the next.
func simple(op string, v any, forceStrings bool) (bool, error) {
	values, ok := v.([]any)
	if !ok {
		return false, condFailure("Failed to check condition: '%s' on values: %s: Expected list for 'values', got: %s",
			op, pyStr(v, nil), pyType(v))
	}
	if len(values) < 2 {
		return true, nil
	}
	if forceStrings {
		s := make([]any, len(values))
		for i, x := range values {
			s[i] = pyStr(x, nil)
		}
		values = s
	}
	for i := 0; i+1 < len(values); i++ {
		var ok bool
		var err error
		switch op {
		case "eq":
			ok = pyEq(values[i], values[i+1])
		case "lt":
			ok, err = pyLess(values[i], values[i+1], "<")
		case "gt":
			ok, err = pyLess(values[i+1], values[i], ">")
		}
		if err != nil || !ok {
			return false, err
		}
	}
	return true, nil
}

func number(v any) (float64, bool) {
	switch x := v.(type) {
	case float64:
		return x, true
	case bool:
		if x {
			return 1, true
		}
		return 0, true
	}
	return 0, false
}

// pyEq is Python's ==.
func pyEq(a, b any) bool {
	if x, ok := number(a); ok {
		y, ok := number(b)
		return ok && x == y
	}
	switch x := a.(type) {
	case nil:
		return b == nil
	case string:
		y, ok := b.(string)
		return ok && x == y
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !pyEq(x[i], y[i]) {
				return false
			}
		}
		return true
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for k, v := range x {
			w, ok := y[k]
			if !ok || !pyEq(v, w) {
				return false
			}
		}
		return true
	}
	return false
}

// pyLess is Python's a < b; sign names the operator in the TypeError.
func pyLess(a, b any, sign string) (bool, error) {
	if x, ok := number(a); ok {
		if y, ok := number(b); ok {
			return x < y, nil
		}
	}
	if x, ok := a.(string); ok {
		if y, ok := b.(string); ok {
			return x < y, nil
		}
	}
	if x, ok := a.([]any); ok {
		if y, ok := b.([]any); ok {
			for i := 0; i < len(x) && i < len(y); i++ {
				if !pyEq(x[i], y[i]) {
					return pyLess(x[i], y[i], sign)
				}
			}
			return len(x) < len(y), nil
		}
	}
	l, r := a, b
	if sign == ">" {
		l, r = b, a
	}
	return false, errorf("'%s' not supported between instances of '%s' and '%s'", sign, pyType(l), pyType(r))
}

// pyIn is Python's `value in values`.
func pyIn(v, values any) (bool, error) {
	switch c := values.(type) {
	case []any:
		for _, x := range c {
			if pyEq(v, x) {
				return true, nil
			}
		}
		return false, nil
	case map[string]any:
		s, ok := v.(string)
		_, in := c[s]
		return ok && in, nil
	case string:
		s, ok := v.(string)
		if !ok {
			return false, errorf("'in <string>' requires string as left operand, not %s", pyType(v))
		}
		return strings.Contains(c, s), nil
	}
	return false, errorf("argument of type '%s' is not iterable", pyType(values))
}

// inNet is Ironic's NetOperator (netaddr): a subnet without a prefix is
// one address; an IPv4 address is never in an IPv6 network.
func inNet(address, subnet any) (bool, error) {
	sub := pyStr(subnet, nil)
	var prefix netip.Prefix
	var err error
	if strings.Contains(sub, "/") {
		prefix, err = netip.ParsePrefix(sub)
	} else {
		var a netip.Addr
		if a, err = netip.ParseAddr(sub); err == nil {
			prefix = netip.PrefixFrom(a, a.BitLen())
		}
	}
	if err != nil {
		return false, execFailure("invalid value: invalid IPNetwork %s", sub)
	}
	addr, err := netip.ParseAddr(pyStr(address, nil))
	if err != nil {
		return false, errorf("failed to detect a valid IP address from %s", quotePy(pyStr(address, nil)))
	}
	return prefix.Masked().Contains(addr.Unmap()) && addr.Unmap().Is4() == prefix.Addr().Is4(), nil
}
