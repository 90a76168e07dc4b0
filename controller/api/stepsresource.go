package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/gorilla/mux"

	"github.com/anvil-metal/anvil/controller/conductor"
	"github.com/anvil-metal/anvil/controller/store"
)

// stepsResource is one of Ironic's named lists of steps kept apart from
// nodes, deploy templates (1.55) and runbooks (1.92): the same gate,
// list, show, create, patch and delete, and only the document, its checks
// and its view differ. One definition serves both kinds.
type stepsResource[T any] struct {
	version int
	plural  string // "runbooks": the list's body key and path
	gateMsg string // "runbooks": "The API version does not allow runbooks"
	title   string // "Runbook": "Runbook X could not be found."
	noun    string // "runbook": "A runbook with name X already exists."
	muxVar  string
	// fieldMin are the fields a view has, with their microversions;
	// defaults, what a plain list shows.
	fieldMin map[string]int
	defaults []string
	sortKeys []string // the store's (store.RunbookSortKeys...)
	noSort   []string // Ironic's invalid_sort_key_list
	// listParams are query parameters a list takes besides the
	// collection's own (fields, detail, limit, marker, sort_key, sort_dir).
	listParams []string
	patchable  []string // Ironic's PATCH_ALLOWED_FIELDS, in its order

	// create builds a new one from a POST body, checked as Ironic does.
	create func(s *Server, r *http.Request, doc map[string]any) (*T, error)
	// patch returns v with ops applied, checked as Ironic does.
	patch func(s *Server, ops []patchOp, v *T) (*T, error)
	view  func(s *Server, r *http.Request, v *T, fields []string) map[string]any
	uuid  func(v *T) string
	name  func(v *T) string
	touch func(v *T, at time.Time) // sets updated_at

	get    func(ctx context.Context, st store.Store, ident string) (*T, error)
	list   func(ctx context.Context, st store.Store, q query, p store.Page) ([]*T, error)
	insert func(ctx context.Context, st store.Store, v *T) error
	update func(ctx context.Context, st store.Store, v *T) error
	remove func(ctx context.Context, st store.Store, uuid string) error
}

// collection routes the kind: every handler behind the version gate.
func (res *stepsResource[T]) collection(s *Server) collection {
	gated := func(h func(*Server, http.ResponseWriter, *http.Request) error) handler {
		return func(w http.ResponseWriter, r *http.Request) error {
			if !res.gate(w, r) {
				return nil
			}
			return h(s, w, r)
		}
	}
	return collection{list: gated(res.listAll), create: gated(res.post), get: gated(res.show),
		patch: gated(res.patchOne), del: gated(res.deleteOne)}
}

// gate answers a request below the kind's version as Ironic's controller
// (_route) does: GET 404, anything else 405, with its message.
func (res *stepsResource[T]) gate(w http.ResponseWriter, r *http.Request) bool {
	if version(r.Context()) >= res.version {
		return true
	}
	status, title := http.StatusMethodNotAllowed, "Method Not Allowed"
	if r.Method == http.MethodGet {
		status, title = http.StatusNotFound, "Not Found"
	}
	writeJSON(w, status, map[string]any{"error_message": mustJSON(map[string]any{
		"code": status, "title": title, "description": "The API version does not allow " + res.gateMsg})})
	return false
}

func (res *stepsResource[T]) listAll(s *Server, w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	fields, p, q, err := collectionQuery(r, res.fieldMin, res.defaults, res.sortKeys, res.noSort, res.listParams...)
	if err != nil {
		return err
	}
	items, err := res.list(ctx, s.st, q, store.Page{Limit: p.limit, Marker: p.marker, SortKey: p.sortKey, Desc: p.desc})
	if err != nil {
		if errors.Is(err, store.ErrNotFound) && p.marker != "" {
			return notFound(res.title, p.marker)
		}
		return err
	}
	out := make([]map[string]any, 0, len(items))
	for _, v := range items {
		out = append(out, res.view(s, r, v, fields))
	}
	body := map[string]any{res.plural: out}
	if len(items) == p.limit {
		body["next"] = nextURL(s.baseURL(r), r.URL.Path, r.URL.Query(), res.uuid(items[len(items)-1]), p)
	}
	writeJSON(w, http.StatusOK, body)
	return nil
}

// load reads the one the route names.
func (res *stepsResource[T]) load(s *Server, r *http.Request) (*T, error) {
	id := mux.Vars(r)[res.muxVar]
	v, err := res.get(r.Context(), s.st, id)
	if errors.Is(err, store.ErrNotFound) {
		return nil, notFound(res.title, id)
	}
	return v, err
}

func (res *stepsResource[T]) show(s *Server, w http.ResponseWriter, r *http.Request) error {
	q, err := parseQuery(r, "fields")
	if err != nil {
		return err
	}
	fields := fieldsArg(q)
	if err := checkFields(r.Context(), fields, res.fieldMin); err != nil {
		return err
	}
	v, err := res.load(s, r)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, res.view(s, r, v, fields))
	return nil
}

// writeError is Ironic's 409 for a name or UUID already taken.
func (res *stepsResource[T]) writeError(v *T, err error) error {
	switch {
	case errors.Is(err, store.ErrDuplicateName):
		return conductor.Wrap(conductor.CodeConflict, err, "A %s with name %s already exists.", res.noun, res.name(v))
	case errors.Is(err, store.ErrDuplicateUUID):
		return conductor.Wrap(conductor.CodeConflict, err, "A %s with UUID %s already exists.", res.noun, res.uuid(v))
	}
	return err
}

func (res *stepsResource[T]) post(s *Server, w http.ResponseWriter, r *http.Request) error {
	if _, err := parseQuery(r); err != nil {
		return err
	}
	doc, err := readObject(r)
	if err != nil {
		return err
	}
	v, err := res.create(s, r, doc)
	if err != nil {
		return err
	}
	if err := res.insert(r.Context(), s.st, v); err != nil {
		return res.writeError(v, err)
	}
	w.Header().Set("Location", s.baseURL(r)+"/v1/"+res.plural+"/"+res.uuid(v))
	writeJSON(w, http.StatusCreated, res.view(s, r, v, nil))
	return nil
}

func (res *stepsResource[T]) patchOne(s *Server, w http.ResponseWriter, r *http.Request) error {
	if _, err := parseQuery(r); err != nil {
		return err
	}
	ops, err := readPatch(r)
	if err != nil {
		return err
	}
	if err := checkPatchable(ops, res.patchable); err != nil {
		return err
	}
	v, err := res.load(s, r)
	if err != nil {
		return err
	}
	next, err := res.patch(s, ops, v)
	if err != nil {
		return err
	}
	res.touch(next, time.Now().UTC())
	if err := res.update(r.Context(), s.st, next); err != nil {
		return res.writeError(next, err)
	}
	writeJSON(w, http.StatusOK, res.view(s, r, next, nil))
	return nil
}

func (res *stepsResource[T]) deleteOne(s *Server, w http.ResponseWriter, r *http.Request) error {
	if _, err := parseQuery(r); err != nil {
		return err
	}
	v, err := res.load(s, r)
	if err != nil {
		return err
	}
	if err := res.remove(r.Context(), s.st, res.uuid(v)); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// patchedDoc applies ops to a copy of cur, the patchable document.
func patchedDoc(cur map[string]any, ops []patchOp) (map[string]any, error) {
	var doc map[string]any
	if err := jsonCopy(cur, &doc); err != nil {
		return nil, fmt.Errorf("copy document: %w", err)
	}
	if err := applyPatch(doc, ops); err != nil {
		return nil, err
	}
	return doc, nil
}
