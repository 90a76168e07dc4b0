package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/gorilla/mux"

	"github.com/anvil-metal/anvil/controller/conductor"
	"github.com/anvil-metal/anvil/controller/store"
	"github.com/anvil-metal/anvil/protocol"
)

// Deploy templates (API 1.55): Ironic's deploy_template.py.

var templateFieldMin = map[string]int{"uuid": 55, "name": 55, "steps": 55, "extra": 55,
	"created_at": 55, "updated_at": 55, "links": 55}

// templateGate answers a request below 1.55 as Ironic's controller does:
// GET 404, anything else 405, with its message.
func templateGate(w http.ResponseWriter, r *http.Request) bool {
	if version(r.Context()) >= 55 {
		return true
	}
	status, title := http.StatusMethodNotAllowed, "Method Not Allowed"
	if r.Method == http.MethodGet {
		status, title = http.StatusNotFound, "Not Found"
	}
	writeJSON(w, status, map[string]any{"error_message": mustJSON(map[string]any{
		"code": status, "title": title, "description": "The API version does not allow deploy templates"})})
	return false
}

// gated wraps a deploy template handler with templateGate.
func (s *Server) gated(h handler) handler {
	return func(w http.ResponseWriter, r *http.Request) error {
		if !templateGate(w, r) {
			return nil
		}
		return h(w, r)
	}
}

// templateView renders a template; fields keeps those (and links), and
// asking for an unknown field is refused.
func (s *Server) templateView(r *http.Request, t *store.DeployTemplate, fields []string) map[string]any {
	steps := make([]any, 0, len(t.Steps))
	for _, st := range t.Steps {
		steps = append(steps, map[string]any{"interface": st.Interface, "step": st.Step,
			"args": maskSecrets(orEmpty(st.Args)), "priority": st.Priority})
	}
	all := map[string]any{"uuid": t.UUID, "name": t.Name, "steps": steps, "extra": orEmpty(t.Extra),
		"created_at": fmtTime(t.CreatedAt), "updated_at": ts(t.UpdatedAt)}
	return s.view(r, all, templateFieldMin, fields, "deploy_templates/"+t.UUID)
}

func templateFields(ctx context.Context, q query) ([]string, error) {
	fields := fieldsArg(q)
	return fields, checkFields(ctx, fields, templateFieldMin)
}

func (s *Server) listDeployTemplates(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	fields, p, err := collectionArgs(r, templateFieldMin, []string{"uuid", "name"}, store.DeployTemplateSortKeys(), []string{"extra", "steps"})
	if err != nil {
		return err
	}
	items, err := s.st.ListDeployTemplates(ctx, store.Page{Limit: p.limit, Marker: p.marker, SortKey: p.sortKey, Desc: p.desc})
	if err != nil {
		if errors.Is(err, store.ErrNotFound) && p.marker != "" {
			return notFound("Deploy template", p.marker)
		}
		return err
	}
	out := make([]map[string]any, 0, len(items))
	for _, t := range items {
		out = append(out, s.templateView(r, t, fields))
	}
	body := map[string]any{"deploy_templates": out}
	if len(items) == p.limit {
		body["next"] = nextURL(s.baseURL(r), r.URL.Path, r.URL.Query(), items[len(items)-1].UUID, p)
	}
	writeJSON(w, http.StatusOK, body)
	return nil
}

func (s *Server) loadTemplate(r *http.Request) (*store.DeployTemplate, error) {
	id := mux.Vars(r)["template"]
	t, err := s.st.GetDeployTemplate(r.Context(), id)
	if errors.Is(err, store.ErrNotFound) {
		return nil, notFound("Deploy template", id)
	}
	return t, err
}

func (s *Server) getDeployTemplate(w http.ResponseWriter, r *http.Request) error {
	q, err := parseQuery(r, "fields")
	if err != nil {
		return err
	}
	fields, err := templateFields(r.Context(), q)
	if err != nil {
		return err
	}
	t, err := s.loadTemplate(r)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, s.templateView(r, t, fields))
	return nil
}

// parseTemplate checks a template document against Ironic's
// TEMPLATE_SCHEMA and duplicate_steps and fills t from it. description is
// accepted and dropped: 21.4's schema has it, its object does not.
func (s *Server) parseTemplate(doc map[string]any, t *store.DeployTemplate) error {
	for _, k := range sortedKeys(doc) {
		switch k {
		case "description", "extra", "name", "steps", "uuid":
		default:
			return badRequest("Schema error for template: Additional properties are not allowed (%s was unexpected)", pyRepr(k))
		}
	}
	for _, k := range []string{"steps", "name"} {
		if _, ok := doc[k]; !ok {
			return badRequest("Schema error for template: %s is a required property", pyRepr(k))
		}
	}
	if d, ok := doc["description"]; ok && d != nil {
		if ds, ok := d.(string); !ok || len([]rune(ds)) > 255 {
			return badRequest("Schema error for template: description must be a string of at most 255 characters or null")
		}
	}
	extra, err := asObject("extra", doc["extra"])
	if err != nil {
		return badRequest("Schema error for template: extra must be an object or null")
	}
	if err := boundField("template", "extra", extra, maxFieldJSON); err != nil {
		return err
	}
	name, ok := doc["name"].(string)
	if !ok {
		return badRequest("Schema error for template: %s is not of type 'string'", mustJSON(doc["name"]))
	}
	if err := s.traitNames.check("template", name); err != nil {
		return err
	}
	raw, ok := doc["steps"].([]any)
	if !ok {
		return badRequest("Schema error for template: %s is not of type 'array'", mustJSON(doc["steps"]))
	}
	if len(raw) == 0 {
		return badRequest("Schema error for template: [] is too short")
	}
	if err := boundField("template", "steps", raw, maxFieldJSON); err != nil {
		return err
	}
	maps := make([]map[string]any, len(raw))
	for i, x := range raw {
		if maps[i], ok = x.(map[string]any); !ok {
			return badRequest("Schema error for template: %s is not of type 'object'", mustJSON(x))
		}
	}
	parsed, err := parseSteps(maps, true)
	if err != nil {
		var ae *apiError
		if errors.As(err, &ae) {
			return badRequest("Schema error for template: %s", ae.msg)
		}
		return err
	}
	steps := make([]store.TemplateStep, len(parsed))
	for i, p := range parsed {
		steps[i] = store.TemplateStep{Interface: p.Interface, Step: p.Step, Args: p.Args, Priority: p.Priority}
	}
	if d := protocol.Duplicates(parsed); d != nil {
		dups := make([]string, len(d))
		for i, s := range d {
			dups[i] = fmt.Sprintf("interface: %s, step: %s", s.Interface, s.Step)
		}
		return badRequest("Deploy template invalid: Duplicate deploy steps. A deploy template cannot have multiple deploy steps "+
			"with the same interface and step. Duplicates: %s.", strings.Join(dups, "; "))
	}
	// Not createUUID: a template body is no writes document, and Ironic's
	// template validator has its own refusal.
	if u, ok := doc["uuid"]; ok && u != nil {
		us, _ := u.(string)
		id, err := uuid.Parse(us)
		if err != nil {
			return badRequest("Expected a UUID for uuid: %s", mustJSON(u))
		}
		t.UUID = id.String()
	}
	t.Name, t.Steps, t.Extra = name, steps, extra
	return nil
}

func templateWriteError(t *store.DeployTemplate, err error) error {
	switch {
	case errors.Is(err, store.ErrDuplicateName):
		return conductor.Wrap(conductor.CodeConflict, err, "A deploy template with name %s already exists.", t.Name)
	case errors.Is(err, store.ErrDuplicateUUID):
		return conductor.Wrap(conductor.CodeConflict, err, "A deploy template with UUID %s already exists.", t.UUID)
	}
	return err
}

func (s *Server) createDeployTemplate(w http.ResponseWriter, r *http.Request) error {
	if _, err := parseQuery(r); err != nil {
		return err
	}
	doc, err := readObject(r)
	if err != nil {
		return err
	}
	t := &store.DeployTemplate{UUID: uuid.NewString(), CreatedAt: time.Now().UTC()}
	if err := s.parseTemplate(doc, t); err != nil {
		return err
	}
	if err := s.st.CreateDeployTemplate(r.Context(), t); err != nil {
		return templateWriteError(t, err)
	}
	w.Header().Set("Location", s.baseURL(r)+"/v1/deploy_templates/"+t.UUID)
	writeJSON(w, http.StatusCreated, s.templateView(r, t, nil))
	return nil
}

// patchDeployTemplate applies a JSON patch to name, steps, extra (and the
// dropped description), then checks the result as a new template.
func (s *Server) patchDeployTemplate(w http.ResponseWriter, r *http.Request) error {
	if _, err := parseQuery(r); err != nil {
		return err
	}
	ops, err := readPatch(r)
	if err != nil {
		return err
	}
	if err := checkPatchable(ops, []string{"extra", "name", "steps", "description"}); err != nil {
		return err
	}
	t, err := s.loadTemplate(r)
	if err != nil {
		return err
	}
	cur := map[string]any{"name": t.Name, "extra": orEmpty(t.Extra), "steps": t.Steps, "description": nil}
	var doc map[string]any
	if err := jsonCopy(cur, &doc); err != nil {
		return err
	}
	if err := applyPatch(doc, ops); err != nil {
		return err
	}
	for _, k := range []string{"description", "extra"} {
		if doc[k] == nil {
			delete(doc, k)
		}
	}
	next := *t
	if err := s.parseTemplate(doc, &next); err != nil {
		return err
	}
	now := time.Now().UTC()
	next.UpdatedAt = &now
	if err := s.st.UpdateDeployTemplate(r.Context(), &next); err != nil {
		return templateWriteError(&next, err)
	}
	writeJSON(w, http.StatusOK, s.templateView(r, &next, nil))
	return nil
}

func (s *Server) deleteDeployTemplate(w http.ResponseWriter, r *http.Request) error {
	if _, err := parseQuery(r); err != nil {
		return err
	}
	t, err := s.loadTemplate(r)
	if err != nil {
		return err
	}
	if err := s.st.DeleteDeployTemplate(r.Context(), t.UUID); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
