package api

// Inspection rules (API 1.96): Ironic's inspection_rule.py. The rule
// body is checked by controller/inspectrules (Ironic's schema and
// validate_rule, with their texts); the conductor runs the stored rules
// at the end of every inspection. A sensitive rule's conditions and
// actions are never shown (null), and once sensitive a rule stays so.

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/gorilla/mux"

	"github.com/anvil-metal/anvil/controller/conductor"
	"github.com/anvil-metal/anvil/controller/inspectrules"
	"github.com/anvil-metal/anvil/controller/store"
)

// inspectionRulesVersion is the microversion of /v1/inspection_rules.
const inspectionRulesVersion = 96

var ruleFieldMin = map[string]int{"uuid": inspectionRulesVersion, "description": inspectionRulesVersion,
	"phase": inspectionRulesVersion, "priority": inspectionRulesVersion, "sensitive": inspectionRulesVersion,
	"conditions": inspectionRulesVersion, "actions": inspectionRulesVersion, "created_at": inspectionRulesVersion,
	"updated_at": inspectionRulesVersion, "links": inspectionRulesVersion}

// ruleListFields are what a list shows without detail or fields (Ironic's
// DEFAULT_RETURN_FIELDS).
var ruleListFields = []string{"uuid", "priority", "phase", "description"}

// ruleInternal are the fields a PATCH may not touch (Ironic's
// JsonPatchType internal attributes).
var ruleInternal = []string{"created_at", "id", "links", "updated_at", "uuid"}

// rulesGate answers a request below 1.96 as Ironic's controller does: GET
// 404, anything else 405, with its message.
func rulesGate(h handler) handler {
	return func(w http.ResponseWriter, r *http.Request) error {
		if version(r.Context()) >= inspectionRulesVersion {
			return h(w, r)
		}
		status, title := http.StatusMethodNotAllowed, "Method Not Allowed"
		if r.Method == http.MethodGet {
			status, title = http.StatusNotFound, "Not Found"
		}
		writeJSON(w, status, map[string]any{"error_message": mustJSON(map[string]any{
			"code": status, "title": title, "description": "The API version does not allow inspection rules"})})
		return nil
	}
}

// ruleOps renders conditions or actions as Ironic's convert_conditions
// and convert_actions: op and args, and loop (with multiple, for a
// condition) only when there is a loop.
func ruleOps(ops []map[string]any, condition bool) []any {
	out := make([]any, 0, len(ops))
	for _, o := range ops {
		m := map[string]any{"op": o["op"], "args": o["args"]}
		if loop := o["loop"]; truthyJSON(loop) {
			m["loop"] = loop
			if condition {
				multiple := o["multiple"]
				if multiple == nil {
					multiple = "any"
				}
				m["multiple"] = multiple
			}
		}
		out = append(out, m)
	}
	return out
}

// truthyJSON is Python's bool() of a decoded JSON value.
func truthyJSON(v any) bool {
	switch x := v.(type) {
	case nil:
		return false
	case []any:
		return len(x) > 0
	case map[string]any:
		return len(x) > 0
	}
	return true
}

func (s *Server) ruleView(r *http.Request, rule *store.InspectionRule, fields []string) map[string]any {
	all := map[string]any{"uuid": rule.UUID, "description": sp(rule.Description), "phase": rule.Phase,
		"priority": rule.Priority, "sensitive": rule.Sensitive, "created_at": fmtTime(rule.CreatedAt),
		"updated_at": ts(rule.UpdatedAt), "conditions": nil, "actions": nil}
	if !rule.Sensitive {
		all["conditions"], all["actions"] = ruleOps(rule.Conditions, true), ruleOps(rule.Actions, false)
	}
	return s.view(r, all, ruleFieldMin, fields, "inspection_rules/"+rule.UUID)
}

func (s *Server) listInspectionRules(w http.ResponseWriter, r *http.Request) error {
	q, err := parseQuery(r, "fields", "detail", "limit", "marker", "sort_key", "sort_dir", "phase")
	if err != nil {
		return err
	}
	phase := q.v.Get("phase")
	r2 := r.Clone(r.Context())
	vals := r2.URL.Query()
	vals.Del("phase")
	r2.URL.RawQuery = vals.Encode()
	fields, p, err := collectionArgs(r2, ruleFieldMin, ruleListFields, store.InspectionRuleSortKeys(), []string{"actions", "conditions"})
	if err != nil {
		return err
	}
	items, err := s.st.ListInspectionRules(r.Context(), phase, store.Page{Limit: p.limit, Marker: p.marker, SortKey: p.sortKey, Desc: p.desc})
	if err != nil {
		if errors.Is(err, store.ErrNotFound) && p.marker != "" {
			return notFound("Rule", p.marker)
		}
		return err
	}
	out := make([]map[string]any, 0, len(items))
	for _, x := range items {
		out = append(out, s.ruleView(r, x, fields))
	}
	body := map[string]any{"inspection_rules": out}
	if len(items) == p.limit {
		body["next"] = nextURL(s.baseURL(r), r.URL.Path, r.URL.Query(), items[len(items)-1].UUID, p)
	}
	writeJSON(w, http.StatusOK, body)
	return nil
}

func (s *Server) loadRule(r *http.Request) (*store.InspectionRule, error) {
	id := mux.Vars(r)["rule"]
	if _, err := uuid.Parse(id); err != nil {
		return nil, badRequest("Expected a UUID for inspection_rule_uuid: %s", id)
	}
	rule, err := s.st.GetInspectionRule(r.Context(), id)
	if errors.Is(err, store.ErrNotFound) {
		return nil, notFound("Rule", id)
	}
	return rule, err
}

func (s *Server) getInspectionRule(w http.ResponseWriter, r *http.Request) error {
	q, err := parseQuery(r, "fields")
	if err != nil {
		return err
	}
	fields := fieldsArg(q)
	if err := checkFields(r.Context(), fields, ruleFieldMin); err != nil {
		return err
	}
	rule, err := s.loadRule(r)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, s.ruleView(r, rule, fields))
	return nil
}

// parseRule checks a rule document and fills rule from it.
func parseRule(doc map[string]any, rule *store.InspectionRule) error {
	if err := boundField("inspection rule", "body", doc, maxFieldJSON); err != nil {
		return err
	}
	parsed, err := inspectrules.Parse(doc, false)
	if err != nil {
		var ve *inspectrules.ValidationError
		if errors.As(err, &ve) {
			return badRequest("%s", ve.Msg)
		}
		return err
	}
	if u, ok := doc["uuid"].(string); ok {
		id, err := uuid.Parse(u)
		if err != nil {
			return badRequest("Expected a UUID for uuid: %s", mustJSON(u))
		}
		rule.UUID = id.String()
	}
	rule.Description = nil
	if d, ok := doc["description"].(string); ok {
		rule.Description = &d
	}
	rule.Phase, rule.Priority, rule.Sensitive = parsed.Phase, parsed.Priority, parsed.Sensitive
	rule.Conditions, rule.Actions = objects(doc["conditions"]), objects(doc["actions"])
	return nil
}

// objects is a checked list of objects as the store keeps it.
func objects(v any) []map[string]any {
	l, _ := v.([]any)
	out := make([]map[string]any, 0, len(l))
	for _, x := range l {
		out = append(out, x.(map[string]any))
	}
	return out
}

func ruleWriteError(rule *store.InspectionRule, err error) error {
	if errors.Is(err, store.ErrDuplicateUUID) {
		return conductor.Wrap(conductor.CodeConflict, err, "A rule with UUID %s already exists.", rule.UUID)
	}
	return err
}

func (s *Server) createInspectionRule(w http.ResponseWriter, r *http.Request) error {
	if _, err := parseQuery(r); err != nil {
		return err
	}
	doc, err := readObject(r)
	if err != nil {
		return err
	}
	rule := &store.InspectionRule{UUID: uuid.NewString(), CreatedAt: time.Now().UTC()}
	if err := parseRule(doc, rule); err != nil {
		return err
	}
	if err := s.st.CreateInspectionRule(r.Context(), rule); err != nil {
		return ruleWriteError(rule, err)
	}
	w.Header().Set("Location", s.baseURL(r)+"/v1/inspection_rules/"+rule.UUID)
	writeJSON(w, http.StatusCreated, s.ruleView(r, rule, nil))
	return nil
}

// patchInspectionRule applies a JSON patch to the rule's document and
// checks the result as a new rule. The sensitive flag cannot be unset.
func (s *Server) patchInspectionRule(w http.ResponseWriter, r *http.Request) error {
	if _, err := parseQuery(r); err != nil {
		return err
	}
	ops, err := readPatch(r)
	if err != nil {
		return err
	}
	for _, op := range ops {
		if slices.Contains(ruleInternal, rootOf(op.Path)) {
			return badRequest("'%s' is an internal attribute and can not be updated", op.Path)
		}
	}
	if err := checkPatchable(ops, []string{"actions", "conditions", "description", "phase", "priority", "sensitive"}); err != nil {
		return err
	}
	rule, err := s.loadRule(r)
	if err != nil {
		return err
	}
	cur := map[string]any{"description": sp(rule.Description), "phase": rule.Phase, "priority": rule.Priority,
		"sensitive": rule.Sensitive, "conditions": rule.Conditions, "actions": rule.Actions}
	var doc map[string]any
	if err := jsonCopy(cur, &doc); err != nil {
		return err
	}
	if err := applyPatch(doc, ops); err != nil {
		return err
	}
	if rule.Sensitive && doc["sensitive"] != true {
		return badRequest("Couldn't apply patch '%s'. Reason: Inspection rules cannot have the sensitive flag unset.", patchText(ops))
	}
	for _, k := range []string{"description", "phase", "sensitive"} {
		if doc[k] == nil {
			delete(doc, k)
		}
	}
	next := *rule
	if err := parseRule(doc, &next); err != nil {
		return err
	}
	now := time.Now().UTC()
	next.UpdatedAt = &now
	if err := s.st.UpdateInspectionRule(r.Context(), &next); err != nil {
		return ruleWriteError(&next, err)
	}
	writeJSON(w, http.StatusOK, s.ruleView(r, &next, nil))
	return nil
}

func rootOf(path string) string {
	p := path
	if len(p) > 0 && p[0] == '/' {
		p = p[1:]
	}
	for i := 0; i < len(p); i++ {
		if p[i] == '/' {
			return p[:i]
		}
	}
	return p
}

// patchText shows a patch as Ironic's PatchError does (a list of dicts).
func patchText(ops []patchOp) string {
	out := "["
	for i, op := range ops {
		if i > 0 {
			out += ", "
		}
		out += fmt.Sprintf("{'op': %s, 'path': %s", pyRepr(op.Op), pyRepr(op.Path))
		if op.Value != nil {
			v := string(op.Value)
			switch v {
			case "true", "false", "null":
				v = map[string]string{"true": "True", "false": "False", "null": "None"}[v]
			}
			out += ", 'value': " + v
		}
		out += "}"
	}
	return out + "]"
}

func (s *Server) deleteInspectionRule(w http.ResponseWriter, r *http.Request) error {
	if _, err := parseQuery(r); err != nil {
		return err
	}
	rule, err := s.loadRule(r)
	if err != nil {
		return err
	}
	if err := s.st.DeleteInspectionRule(r.Context(), rule.UUID); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
