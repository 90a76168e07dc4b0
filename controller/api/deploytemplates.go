package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/anvil-metal/anvil/controller/store"
	"github.com/anvil-metal/anvil/protocol"
)

// Deploy templates (API 1.55): Ironic's deploy_template.py.

var templateFieldMin = map[string]int{"uuid": 55, "name": 55, "steps": 55, "extra": 55,
	"created_at": 55, "updated_at": 55, "links": 55}

// deployTemplates is the deploy template kind of stepsResource.
var deployTemplates = &stepsResource[store.DeployTemplate]{
	version: 55, plural: "deploy_templates", gateMsg: "deploy templates", title: "Deploy template",
	noun: "deploy template", muxVar: "template",
	fieldMin: templateFieldMin, defaults: []string{"uuid", "name"},
	sortKeys: store.DeployTemplateSortKeys(), noSort: []string{"extra", "steps"},
	patchable: []string{"extra", "name", "steps", "description"},
	create: func(s *Server, _ *http.Request, doc map[string]any) (*store.DeployTemplate, error) {
		t := &store.DeployTemplate{UUID: uuid.NewString(), CreatedAt: time.Now().UTC()}
		return t, s.parseTemplate(doc, t)
	},
	patch: (*Server).patchTemplate,
	view:  (*Server).templateView,
	uuid:  func(t *store.DeployTemplate) string { return t.UUID },
	name:  func(t *store.DeployTemplate) string { return t.Name },
	touch: func(t *store.DeployTemplate, at time.Time) { t.UpdatedAt = &at },
	get: func(ctx context.Context, st store.Store, ident string) (*store.DeployTemplate, error) {
		return st.GetDeployTemplate(ctx, ident)
	},
	list: func(ctx context.Context, st store.Store, _ query, p store.Page) ([]*store.DeployTemplate, error) {
		return st.ListDeployTemplates(ctx, p)
	},
	insert: func(ctx context.Context, st store.Store, t *store.DeployTemplate) error {
		return st.CreateDeployTemplate(ctx, t)
	},
	update: func(ctx context.Context, st store.Store, t *store.DeployTemplate) error {
		return st.UpdateDeployTemplate(ctx, t)
	},
	remove: func(ctx context.Context, st store.Store, id string) error { return st.DeleteDeployTemplate(ctx, id) },
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

// patchTemplate applies a JSON patch to name, steps, extra (and the
// dropped description), then checks the result as a new template.
func (s *Server) patchTemplate(ops []patchOp, t *store.DeployTemplate) (*store.DeployTemplate, error) {
	doc, err := patchedDoc(map[string]any{"name": t.Name, "extra": orEmpty(t.Extra), "steps": t.Steps, "description": nil}, ops)
	if err != nil {
		return nil, err
	}
	for _, k := range []string{"description", "extra"} {
		if doc[k] == nil {
			delete(doc, k)
		}
	}
	next := *t
	if err := s.parseTemplate(doc, &next); err != nil {
		return nil, err
	}
	return &next, nil
}
