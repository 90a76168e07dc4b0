package api

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"
)

// A runbook's checks: Ironic validates a runbook with jsonschema
// (RUNBOOK_SCHEMA, RUNBOOK_STEP_SCHEMA) and reports the one error
// jsonschema's best_match picks; schemaErrs collects every error as
// jsonschema would find it and picks the same one, so a refusal reads as
// Ironic's (the messages are jsonschema 4.2x's).

// checkRunbook validates a runbook document as jsonschema does Ironic's
// RUNBOOK_SCHEMA (patch: the mutation schema), reporting the error
// best_match picks, then duplicate steps and the UUID as Ironic's
// validators after the schema do.
func (s *Server) checkRunbook(what string, doc map[string]any, patch bool) error {
	var errs schemaErrs
	props := []string{"disable_ramdisk", "extra", "name", "owner", "public", "steps", "uuid"}
	for _, k := range []string{"uuid", "name", "steps", "disable_ramdisk", "extra", "public", "owner"} {
		v, ok := doc[k]
		if !ok {
			continue
		}
		path := []any{k}
		switch k {
		case "uuid":
			errs.typed(path, v, "string", "null")
		case "disable_ramdisk", "public":
			errs.typed(path, v, "boolean", "null")
		case "extra":
			errs.typed(path, v, "object", "null")
		case "owner":
			if errs.typed(path, v, "string", "null") {
				errs.maxLength(path, v, 255)
			}
		case "name":
			s.checkRunbookName(path, v, patch, &errs)
		case "steps":
			list, ok := v.([]any)
			if !ok {
				errs.add(path, false, "%s is not of type 'array'", pyValue(v))
				break
			}
			if len(list) == 0 {
				errs.add(path, false, "[] should be non-empty")
			}
			for i, x := range list {
				checkRunbookStep([]any{"steps", i}, x, &errs)
			}
		}
	}
	for _, k := range []string{"steps", "name"} {
		if _, ok := doc[k]; !ok {
			errs.add(nil, false, "%s is a required property", pyRepr(k))
		}
	}
	var extra []string
	for k := range doc {
		if !slices.Contains(props, k) {
			extra = append(extra, k)
		}
	}
	if len(extra) > 0 {
		errs.additional(nil, extra)
	}
	if err := errs.refusal(what); err != nil {
		return err
	}
	for _, k := range []string{"extra", "steps"} {
		if err := boundField(what, k, doc[k], maxFieldJSON); err != nil {
			return err
		}
	}
	if err := duplicateRunbookSteps(doc["steps"].([]any)); err != nil {
		return err
	}
	if u, ok := doc["uuid"].(string); ok && !isUUIDLike(u) {
		return badRequest("Expected UUID for uuid: %s", u)
	}
	return nil
}

// checkRunbookName: a POST's name is a trait (TRAITS_SCHEMA), a PATCH's
// any URL-safe name (RUNBOOK_NAME_SCHEMA), 1 to 255 characters.
func (s *Server) checkRunbookName(path []any, v any, patch bool, errs *schemaErrs) {
	name, ok := v.(string)
	if !ok {
		errs.add(path, false, "%s is not of type 'string'", pyValue(v))
		return
	}
	if name == "" {
		errs.add(path, false, "'' should be non-empty")
	}
	errs.maxLength(path, v, 255)
	switch {
	case patch:
		if !runbookNameRE.MatchString(name) {
			errs.add(path, false, "%s does not match %s", pyRepr(name), pyRepr(runbookNameRE.String()))
		}
	default:
		if _, std := s.traitNames[name]; !std && !customTraitRE.MatchString(name) {
			errs.add(path, true, "%s is not valid under any of the given schemas. Possible root cause: %s does not match '%s'",
				pyRepr(name), pyRepr(name), customTraitRE.String())
		}
	}
}

// checkRunbookStep checks one step against RUNBOOK_STEP_SCHEMA.
func checkRunbookStep(path []any, v any, errs *schemaErrs) {
	m, ok := v.(map[string]any)
	if !ok {
		errs.add(path, false, "%s is not of type 'object'", pyValue(v))
		return
	}
	at := func(k string) []any { return append(slices.Clone(path), k) }
	if a, ok := m["args"]; ok {
		errs.typed(at("args"), a, "object")
	}
	if i, ok := m["interface"]; ok {
		if errs.typed(at("interface"), i, "string") && !slices.Contains(runbookStepInterfaces, i.(string)) {
			quoted := make([]string, len(runbookStepInterfaces))
			for n, x := range runbookStepInterfaces {
				quoted[n] = pyRepr(x)
			}
			errs.add(at("interface"), false, "%s is not one of [%s]", pyValue(i), strings.Join(quoted, ", "))
		}
	}
	if st, ok := m["step"]; ok && errs.typed(at("step"), st, "string") && st == "" {
		errs.add(at("step"), false, "'' should be non-empty")
	}
	if o, ok := m["order"]; ok {
		if _, msg := stepOrder(o); msg != "" {
			errs.add(at("order"), true, "%s", msg)
		}
	}
	for _, k := range []string{"interface", "step", "order"} {
		if _, ok := m[k]; !ok {
			errs.add(path, false, "%s is a required property", pyRepr(k))
		}
	}
	var extra []string
	for k := range m {
		if !slices.Contains([]string{"args", "interface", "step", "order"}, k) {
			extra = append(extra, k)
		}
	}
	if len(extra) > 0 {
		errs.additional(path, extra)
	}
}

// maxOrder bounds an order (Ironic's column is a 32-bit integer).
const maxOrder = math.MaxInt32

// stepOrder reads a step's order (a non-negative integer or a string of
// digits), or says why not as jsonschema's best_match does for the
// schema's anyOf.
func stepOrder(v any) (int, string) {
	notAny := func() string {
		return pyValue(v) + " is not valid under any of the given schemas. Possible root cause: " + pyValue(v) + " is not of type 'integer'"
	}
	switch x := v.(type) {
	case float64:
		if x != math.Trunc(x) || math.IsInf(x, 0) {
			return 0, notAny()
		}
		if x < 0 {
			return 0, pyValue(v) + " is less than the minimum of 0"
		}
		if x > maxOrder {
			return 0, pyValue(v) + " is greater than the maximum of " + strconv.Itoa(maxOrder)
		}
		return int(x), ""
	case string:
		if x == "" {
			return 0, notAny()
		}
		for _, c := range x {
			if c < '0' || c > '9' {
				return 0, pyRepr(x) + " does not match '^[0-9]+$'"
			}
		}
		n, err := strconv.Atoi(x)
		if err != nil || n > maxOrder {
			return 0, pyRepr(x) + " is greater than the maximum of " + strconv.Itoa(maxOrder)
		}
		return n, ""
	}
	return 0, notAny()
}

// duplicateRunbookSteps is Ironic's duplicate_steps (shared with deploy
// templates there, hence the wording).
func duplicateRunbookSteps(steps []any) error {
	seen := map[[2]string]int{}
	var dups []string
	for _, x := range steps {
		m := x.(map[string]any)
		k := [2]string{m["interface"].(string), m["step"].(string)}
		if seen[k]++; seen[k] == 2 {
			dups = append(dups, "interface: "+k[0]+", step: "+k[1])
		}
	}
	if dups == nil {
		return nil
	}
	sort.Strings(dups)
	return badRequest("Deploy template invalid: Duplicate deploy steps. A template cannot have multiple deploy steps "+
		"with the same interface and step. Duplicates: %s.", strings.Join(dups, "; "))
}

// schemaErr is one error jsonschema would report: where and what; weak
// errors are anyOf's.
type schemaErr struct {
	path []any // property names and list indexes
	msg  string
	weak bool
}

type schemaErrs []schemaErr

func (e *schemaErrs) add(path []any, weak bool, format string, a ...any) {
	*e = append(*e, schemaErr{path: slices.Clone(path), msg: fmt.Sprintf(format, a...), weak: weak})
}

// typed checks v's JSON type, reporting as jsonschema does; it says
// whether v is of one of the types.
func (e *schemaErrs) typed(path []any, v any, types ...string) bool {
	t := schemaType(v)
	if slices.Contains(types, t) || t == "integer" && slices.Contains(types, "number") {
		return true
	}
	quoted := make([]string, len(types))
	for i, x := range types {
		quoted[i] = pyRepr(x)
	}
	e.add(path, false, "%s is not of type %s", pyValue(v), strings.Join(quoted, ", "))
	return false
}

func (e *schemaErrs) maxLength(path []any, v any, n int) {
	if s, ok := v.(string); ok && utf8.RuneCountInString(s) > n {
		e.add(path, false, "%s is too long", pyRepr(s))
	}
}

func (e *schemaErrs) additional(path []any, extra []string) {
	sort.Strings(extra)
	quoted := make([]string, len(extra))
	for i, k := range extra {
		quoted[i] = pyRepr(k)
	}
	verb := "was"
	if len(extra) > 1 {
		verb = "were"
	}
	e.add(path, false, "Additional properties are not allowed (%s %s unexpected)", strings.Join(quoted, ", "), verb)
}

// refusal is Ironic's 400 for the error jsonschema's best_match picks:
// the shallowest, then the greatest path, then a strong one over anyOf's,
// then the first found.
func (e schemaErrs) refusal(what string) error {
	var best *schemaErr
	for i := range e {
		if c := &e[i]; best == nil || moreRelevant(c, best) {
			best = c
		}
	}
	if best == nil {
		return nil
	}
	return badRequest("Schema error for %s: %s", what, best.msg)
}

func moreRelevant(a, b *schemaErr) bool {
	if len(a.path) != len(b.path) {
		return len(a.path) < len(b.path)
	}
	for i := range a.path {
		if c := comparePathPart(a.path[i], b.path[i]); c != 0 {
			return c > 0
		}
	}
	return !a.weak && b.weak
}

func comparePathPart(a, b any) int {
	ai, aInt := a.(int)
	bi, bInt := b.(int)
	switch {
	case aInt && bInt:
		return ai - bi
	case !aInt && !bInt:
		return strings.Compare(a.(string), b.(string))
	case aInt:
		return -1
	}
	return 1
}
