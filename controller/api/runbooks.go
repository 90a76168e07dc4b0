package api

import (
	"context"
	"encoding/json"
	"net/http"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/anvil-metal/anvil/controller/inspectrules"
	"github.com/anvil-metal/anvil/controller/store"
	"github.com/anvil-metal/anvil/protocol"
)

// Runbooks (API 1.92): Ironic's runbook.py. A runbook is a named list of
// steps a manual clean (or a service) runs instead of the steps its
// request would name; a node may run it only if one of its traits is the
// runbook's name. The CRUD is deploy templates' (stepsResource); the
// document and its checks are Ironic's RUNBOOK_SCHEMA.

// runbooksVersion is the microversion runbooks appeared in.
const runbooksVersion = 92

var runbookFieldMin = map[string]int{"uuid": runbooksVersion, "name": runbooksVersion, "steps": runbooksVersion,
	"disable_ramdisk": runbooksVersion, "public": runbooksVersion, "owner": runbooksVersion, "extra": runbooksVersion,
	"created_at": runbooksVersion, "updated_at": runbooksVersion, "links": runbooksVersion}

// runbookStepInterfaces is the enum of Ironic's RUNBOOK_STEP_SCHEMA
// (conductor_steps.CLEANING_INTERFACE_PRIORITY, in its order). A step of
// an interface anvil does not run is refused when a clean plans it.
var runbookStepInterfaces = []string{"vendor", "power", "management", "firmware", "deploy", "bios", "raid"}

// runbookNameRE is Ironic's RUNBOOK_NAME_SCHEMA pattern, which a PATCH
// checks a name against (a POST, before 1.112, against TRAITS_SCHEMA).
var runbookNameRE = regexp.MustCompile(`^[A-Za-z0-9\-._~]+$`)

var runbooks = &stepsResource[store.Runbook]{
	version: runbooksVersion, plural: "runbooks", gateMsg: "runbooks", title: "Runbook", noun: "runbook",
	muxVar: "runbook", fieldMin: runbookFieldMin, defaults: []string{"uuid", "name"},
	sortKeys: store.RunbookSortKeys(), noSort: []string{"extra", "steps", "traits"},
	listParams: []string{"project"},
	patchable:  []string{"disable_ramdisk", "extra", "name", "owner", "public", "steps"},
	create:     (*Server).createRunbook,
	patch:      (*Server).patchRunbook,
	view:       (*Server).runbookView,
	uuid:       func(rb *store.Runbook) string { return rb.UUID },
	name:       func(rb *store.Runbook) string { return rb.Name },
	touch:      func(rb *store.Runbook, at time.Time) { rb.UpdatedAt = &at },
	get: func(ctx context.Context, st store.Store, ident string) (*store.Runbook, error) {
		return st.GetRunbook(ctx, ident)
	},
	list:   listRunbooks,
	insert: func(ctx context.Context, st store.Store, rb *store.Runbook) error { return st.CreateRunbook(ctx, rb) },
	update: func(ctx context.Context, st store.Store, rb *store.Runbook) error { return st.UpdateRunbook(ctx, rb) },
	remove: func(ctx context.Context, st store.Store, id string) error { return st.DeleteRunbook(ctx, id) },
}

// listRunbooks lists, with ?project=true, the caller's project's runbooks
// and the public ones, as Ironic's project filter does; a caller who may
// not list all runbooks gets that list whatever it asked.
func listRunbooks(ctx context.Context, st store.Store, q query, p store.Page) ([]*store.Runbook, error) {
	var f store.RunbookFilter
	project, err := q.boolean("project")
	if err != nil {
		return nil, err
	}
	if project != nil && *project {
		own := callerCreds(ctx).ProjectID
		f.Project = &own
	}
	if own := listProject(ctx); own != "" {
		f.Project = &own
	}
	return st.ListRunbooks(ctx, f, p)
}

// runbookView renders a runbook as Ironic's convert_with_links does:
// step arguments that look like secrets are masked.
func (s *Server) runbookView(r *http.Request, rb *store.Runbook, fields []string) map[string]any {
	steps := make([]any, 0, len(rb.Steps))
	for _, st := range rb.Steps {
		steps = append(steps, map[string]any{"interface": st.Interface, "step": st.Step,
			"args": maskSecrets(orEmpty(st.Args)), "order": st.Order})
	}
	all := map[string]any{"uuid": rb.UUID, "name": rb.Name, "steps": steps, "disable_ramdisk": rb.DisableRamdisk,
		"public": rb.Public, "owner": sp(rb.Owner), "extra": orEmpty(rb.Extra),
		"created_at": fmtTime(rb.CreatedAt), "updated_at": ts(rb.UpdatedAt)}
	return s.view(r, all, runbookFieldMin, fields, "runbooks/"+rb.UUID)
}

// createRunbook checks a POST body as Ironic does (RUNBOOK_SCHEMA, then
// duplicate_steps, then the UUID), then the owner rules for a caller
// without system scope: it may own a runbook only for its own project.
func (s *Server) createRunbook(r *http.Request, doc map[string]any) (*store.Runbook, error) {
	if err := s.checkRunbook("runbook", doc, false); err != nil {
		return nil, err
	}
	// Ironic checks the steps' own rules when a runbook is written
	var steps []map[string]any
	for _, x := range doc["steps"].([]any) {
		steps = append(steps, x.(map[string]any))
	}
	if err := s.checkStepsPolicy(r.Context(), nil, requestStepNames(steps)); err != nil {
		return nil, err
	}
	rb := &store.Runbook{UUID: uuid.NewString(), CreatedAt: time.Now().UTC()}
	if u, _ := doc["uuid"].(string); u != "" {
		rb.UUID = uuid.MustParse(u).String()
	}
	// Ironic's rules for callers without system scope
	if c := callerCreds(r.Context()); !c.System || c.Legacy {
		project := c.ProjectID
		if owner, _ := doc["owner"].(string); owner != "" && owner != project {
			return nil, badRequest("Cannot create a runbook as a project scoped admin with an owner other than your own project.")
		}
		if public, _ := doc["public"].(bool); public && project != "" {
			return nil, badRequest("Cannot create a public runbook as a project scoped admin.")
		}
		if project != "" {
			rb.Owner = &project
		}
	} else if owner, _ := doc["owner"].(string); owner != "" {
		rb.Owner = &owner // a system-scoped caller names any project
	}
	fillRunbook(rb, doc)
	return rb, nil
}

// fillRunbook copies a checked document into rb (owner aside).
func fillRunbook(rb *store.Runbook, doc map[string]any) {
	rb.Name = doc["name"].(string)
	raw := doc["steps"].([]any)
	rb.Steps = make([]store.RunbookStep, len(raw))
	for i, x := range raw {
		m := x.(map[string]any)
		args, _ := m["args"].(map[string]any)
		order, _ := stepOrder(m["order"])
		rb.Steps[i] = store.RunbookStep{Interface: m["interface"].(string), Step: m["step"].(string), Args: orEmpty(args), Order: order}
	}
	rb.DisableRamdisk, _ = doc["disable_ramdisk"].(bool)
	rb.Public, _ = doc["public"].(bool)
	rb.Extra, _ = doc["extra"].(map[string]any)
}

// patchRunbook applies a JSON patch as Ironic does: a public runbook has
// no owner (making one public drops its owner), each step is pruned to
// the step schema's keys and checked, then the whole document
// (RUNBOOK_MUTATION_SCHEMA_V112, whose name is any URL-safe one).
func (s *Server) patchRunbook(ops []patchOp, rb *store.Runbook) (*store.Runbook, error) {
	owners, publics := patchValues(ops, "/owner"), patchValues(ops, "/public")
	if len(owners) > 0 {
		publicValue := len(publics) > 0 && inspectrules.Truthy(publics[0])
		if rb.Public && len(publics) == 0 || publicValue {
			return nil, badRequest("Couldn't apply patch '%s'. Reason: There cannot be an owner for a public runbook", pyPatch(ops))
		}
	}
	next := *rb
	if len(publics) > 0 {
		next.Owner = nil
	}
	steps := make([]any, len(rb.Steps))
	for i, st := range rb.Steps {
		steps[i] = map[string]any{"interface": st.Interface, "step": st.Step, "args": orEmpty(st.Args), "order": st.Order}
	}
	doc, err := patchedDoc(map[string]any{"uuid": rb.UUID, "name": rb.Name, "steps": steps, "disable_ramdisk": rb.DisableRamdisk,
		"public": rb.Public, "owner": sp(next.Owner), "extra": orEmpty(rb.Extra)}, ops)
	if err != nil {
		return nil, err
	}
	for _, k := range []string{"name", "steps"} {
		if removed(ops, k) {
			delete(doc, k) // jsonpatch's remove drops the key: then it is missing
		}
	}
	if list, ok := doc["steps"].([]any); ok {
		for _, x := range list {
			var errs schemaErrs
			if m, ok := x.(map[string]any); ok {
				for k := range m {
					if !slices.Contains([]string{"args", "interface", "step", "order"}, k) {
						delete(m, k)
					}
				}
			}
			checkRunbookStep(nil, x, &errs)
			if err := errs.refusal("patch"); err != nil {
				return nil, err
			}
		}
	}
	if err := s.checkRunbook("patch", doc, true); err != nil {
		return nil, err
	}
	fillRunbook(&next, doc)
	next.Owner = nil
	if o, ok := doc["owner"].(string); ok {
		next.Owner = &o
	}
	return &next, nil
}

// patchValues are the values ops add or replace at path (Ironic's
// get_patch_values).
func patchValues(ops []patchOp, path string) []any {
	var out []any
	for _, op := range ops {
		if op.Path == path && op.Op != "remove" {
			var v any
			_ = json.Unmarshal(op.Value, &v)
			out = append(out, v)
		}
	}
	return out
}

// removed says whether the last operation on the root field k removes it.
func removed(ops []patchOp, k string) bool {
	last := ""
	for _, op := range ops {
		if op.Path == "/"+k {
			last = op.Op
		} else if strings.HasPrefix(op.Path, "/"+k+"/") {
			last = ""
		}
	}
	return last == "remove"
}

// pyPatch is Python's repr of a patch document, as Ironic's PatchError
// quotes it (keys in the order clients send them: op, path, value).
func pyPatch(ops []patchOp) string {
	parts := make([]string, len(ops))
	for i, op := range ops {
		p := "{'op': " + pyRepr(op.Op) + ", 'path': " + pyRepr(op.Path)
		if op.Value != nil {
			var v any
			_ = json.Unmarshal(op.Value, &v)
			p += ", 'value': " + pyValue(v)
		}
		parts[i] = p + "}"
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

// runbookRun is what a runbook gives the provision request naming it.
type runbookRun struct {
	steps          []protocol.Step // in their order
	disableRamdisk bool
	label          string // "CUSTOM_X (uuid)", for the node's history
}

// runbookSteps resolves the runbook a provision request names (clean, and
// service: stepsField names the request's own steps, "clean_steps" or
// "service_steps") as Ironic's _handle_runbook does: 406 below 1.92, the
// runbook by UUID or name, the node must have a trait of its name, and
// the request may not name steps of its own as well. The steps come in
// their order (lowest first; equal orders as written), and with them
// whether the runbook runs them without the agent (disable_ramdisk).
//
// Ironic's owner and public rules for using a runbook are policy checks:
// baremetal:runbook:use on the runbook's owner, and the steps' own rules
// for a runbook that is neither public nor unowned (policy.go).
func (s *Server) runbookSteps(ctx context.Context, n *store.Node, ident, stepsField string, stepsGiven bool) (*runbookRun, error) {
	if err := atLeast(ctx, runbooksVersion); err != nil {
		return nil, err
	}
	rb, err := s.st.GetRunbook(ctx, ident)
	if err != nil {
		if isNotFound(err) {
			return nil, notFound("Runbook", ident)
		}
		return nil, err
	}
	if !s.currentAuthz().Policy.Allowed("baremetal:runbook:use", callerCreds(ctx), map[string]string{"runbook.owner": deref(rb.Owner)}) {
		return nil, forbidden("baremetal:runbook:use")
	}
	if !slices.Contains(n.Traits, rb.Name) {
		return nil, badRequest("This runbook has not been approved for use on this node %s. "+
			"Please ask an administrator to add it to your node traits.", n.UUID)
	}
	if stepsField != "" && stepsGiven {
		return nil, badRequest("Please provide either %q or a runbook, but not both.", stepsField)
	}
	ordered := slices.Clone(rb.Steps)
	sort.SliceStable(ordered, func(i, j int) bool { return ordered[i].Order < ordered[j].Order })
	steps := make([]protocol.Step, len(ordered))
	for i, st := range ordered {
		steps[i] = protocol.Step{Interface: st.Interface, Step: st.Step, Args: orEmpty(st.Args)}
	}
	if rb.Owner != nil && !rb.Public {
		// a project's own runbook is not admin-approved: its steps'
		// rules apply as to steps the request names
		if err := s.checkStepsPolicy(ctx, n, protocolStepNames(steps)); err != nil {
			return nil, err
		}
	}
	return &runbookRun{steps: steps, disableRamdisk: rb.DisableRamdisk, label: rb.Name + " (" + rb.UUID + ")"}, nil
}
