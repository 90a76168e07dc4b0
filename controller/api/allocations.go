package api

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/gorilla/mux"

	"github.com/anvil-metal/anvil/controller/conductor"
	"github.com/anvil-metal/anvil/controller/store"
)

// allocationFieldMin are the allocation fields and their microversions.
var allocationFieldMin = map[string]int{"uuid": 52, "name": 52, "node_uuid": 52, "state": 52, "last_error": 52,
	"resource_class": 52, "candidate_nodes": 52, "traits": 52, "extra": 52, "created_at": 52, "updated_at": 52,
	"owner": 60}

func (s *Server) allocationView(r *http.Request, a *store.Allocation, fields []string) map[string]any {
	cands, traits := a.CandidateNodes, a.Traits
	if cands == nil {
		cands = []string{}
	}
	if traits == nil {
		traits = []string{}
	}
	all := map[string]any{"uuid": a.UUID, "name": sp(a.Name), "node_uuid": sp(a.NodeUUID), "state": a.State,
		"last_error": sp(a.LastError), "resource_class": a.ResourceClass, "candidate_nodes": cands, "traits": traits,
		"extra": orEmpty(a.Extra), "created_at": fmtTime(a.CreatedAt), "updated_at": ts(a.UpdatedAt), "owner": sp(a.Owner)}
	return s.view(r, all, allocationFieldMin, fields, "allocations/"+a.UUID)
}

// allocationBody is Ironic's ALLOCATION_SCHEMA: every field may be null.
type allocationBody struct {
	UUID           *string        `json:"uuid"`
	Name           *string        `json:"name"`
	ResourceClass  *string        `json:"resource_class"`
	CandidateNodes []string       `json:"candidate_nodes"`
	Traits         []string       `json:"traits"`
	Extra          map[string]any `json:"extra"`
	Owner          *string        `json:"owner"`
	Node           *string        `json:"node"`
}

// allocationRequest turns a POST body into the allocation to create, with
// Ironic's checks in Ironic's order; node is the node to backfill, if any.
func (s *Server) allocationRequest(r *http.Request, b *allocationBody) (a *store.Allocation, node *store.Node, err error) {
	ctx := r.Context()
	if b.Owner != nil && version(ctx) < 60 {
		return nil, nil, notAcceptable()
	}
	if rc := b.ResourceClass; rc != nil && len(*rc) > 80 {
		return nil, nil, badRequest("Schema error for allocation: %s is too long", pyRepr(*rc))
	}
	for _, t := range b.Traits {
		if err := s.traitNames.check("allocation", t); err != nil {
			return nil, nil, err
		}
	}
	if err := boundField("allocation", "extra", b.Extra, maxFieldJSON); err != nil {
		return nil, nil, err
	}
	if b.UUID != nil {
		if _, err := uuid.Parse(*b.UUID); err != nil || len(*b.UUID) != 36 {
			return nil, nil, badRequest("Expected UUID for uuid: %s", *b.UUID)
		}
	}
	if b.Name != nil && *b.Name != "" && validName(*b.Name) != nil {
		return nil, nil, badRequest("Cannot create allocation with invalid name '%s'", *b.Name)
	}
	if b.Node != nil && *b.Node != "" {
		if version(ctx) < 58 {
			return nil, nil, badRequest("Cannot set node when creating an allocation in this API version")
		}
		n, err := s.st.GetNode(ctx, *b.Node)
		if errors.Is(err, store.ErrNotFound) {
			return nil, nil, badRequest("Node %s could not be found.", *b.Node)
		} else if err != nil {
			return nil, nil, err
		}
		node = n
	}
	a = &store.Allocation{UUID: deref(b.UUID), State: conductor.AllocAllocating, Traits: b.Traits, Extra: b.Extra,
		Owner: b.Owner, CreatedAt: time.Now().UTC(), ConductorAffinity: s.cond.Holder()}
	if b.Name != nil && *b.Name != "" {
		a.Name = b.Name
	}
	switch {
	case b.ResourceClass != nil && *b.ResourceClass != "":
		a.ResourceClass = *b.ResourceClass
	case node != nil:
		a.ResourceClass = deref(node.ResourceClass)
	default:
		return nil, nil, badRequest("The resource_class field is mandatory when not backfilling")
	}
	if len(b.CandidateNodes) > 0 {
		var missing []string
		for _, c := range b.CandidateNodes {
			n, err := s.st.GetNode(ctx, c)
			if errors.Is(err, store.ErrNotFound) {
				if !slices.Contains(missing, c) {
					missing = append(missing, c)
				}
				continue
			} else if err != nil {
				return nil, nil, err
			}
			a.CandidateNodes = append(a.CandidateNodes, n.UUID)
		}
		if len(missing) > 0 {
			return nil, nil, badRequest("Nodes cannot be found: %s", strings.Join(missing, ", "))
		}
	}
	if a.UUID == "" {
		// Not createUUID: an allocation body is no writes document, and
		// backfilling without a UUID gives the instance's.
		if node != nil && node.InstanceUUID != nil {
			a.UUID = *node.InstanceUUID
		} else {
			a.UUID = uuid.NewString()
		}
	}
	return a, node, nil
}

// createAllocation records an allocation in state allocating and leaves
// finding its node to the conductor, as Ironic does; with node (1.58) it
// backfills the allocation of a deployed node at once.
func (s *Server) createAllocation(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	var b allocationBody
	if err := decodeBody(r, &b); err != nil {
		return err
	}
	a, node, err := s.allocationRequest(r, &b)
	if err != nil {
		return err
	}
	if err := s.scopeAllocation(ctx, a, node, b.Node); err != nil {
		return err
	}
	if err := s.st.CreateAllocation(ctx, a); err != nil {
		switch {
		case errors.Is(err, store.ErrDuplicateName):
			return conductor.Wrap(conductor.CodeConflict, err, "An allocation with name %s already exists.", deref(a.Name))
		case errors.Is(err, store.ErrDuplicateUUID):
			return conductor.Wrap(conductor.CodeConflict, err, "An allocation with UUID %s already exists.", a.UUID)
		}
		return err
	}
	if node != nil {
		if err := s.cond.Backfill(ctx, a, node.UUID); err != nil {
			var af *conductor.AllocationFailed
			if errors.As(err, &af) {
				// Ironic's conductor raises AllocationFailed, which its
				// API answers as an internal error with the message.
				return errf(http.StatusInternalServerError, "%s", af.Error())
			}
			return err
		}
	} else {
		s.cond.Allocate(a.UUID)
	}
	w.Header().Set("Location", s.baseURL(r)+"/v1/allocations/"+a.UUID)
	writeJSON(w, http.StatusCreated, s.allocationView(r, a, nil))
	return nil
}

// allocationsGate answers a request below 1.52 as Ironic's allocation
// controller does: GET is 404, any other method 405.
func allocationsGate(h handler) handler {
	return func(w http.ResponseWriter, r *http.Request) error {
		if version(r.Context()) < 52 {
			status := http.StatusMethodNotAllowed
			if r.Method == http.MethodGet {
				status = http.StatusNotFound
			}
			return errf(status, "The API version does not allow allocations")
		}
		return h(w, r)
	}
}

func (s *Server) listAllocations(w http.ResponseWriter, r *http.Request) error {
	if r.URL.Query().Has("owner") && version(r.Context()) < 60 {
		return notAcceptable()
	}
	if own := listProject(r.Context()); own != "" {
		// a project's caller lists its own allocations (Ironic's
		// check_list_policy gives the owner filter)
		r2, u := *r, *r.URL
		q := u.Query()
		q.Set("owner", own)
		u.RawQuery = q.Encode()
		r2.URL = &u
		r = &r2
	}
	return listResource(s, w, r, allocationResource, false, "")
}

func (s *Server) loadAllocation(r *http.Request) (*store.Allocation, error) {
	return loadResource(s, r, allocationResource)
}

// getAllocation serves one allocation, the one load finds, with fields=.
func (s *Server) getAllocation(load func(*http.Request) (*store.Allocation, error)) handler {
	return func(w http.ResponseWriter, r *http.Request) error {
		q, err := parseQuery(r, "fields")
		if err != nil {
			return err
		}
		fields := fieldsArg(q)
		if err := checkFields(r.Context(), fields, allocationFieldMin); err != nil {
			return err
		}
		a, err := load(r)
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, s.allocationView(r, a, fields))
		return nil
	}
}

// patchAllocation changes an allocation's name and extra (1.57), the only
// fields Ironic lets a client change, through allocationWrites.
func (s *Server) patchAllocation(w http.ResponseWriter, r *http.Request) error {
	if version(r.Context()) < 57 {
		return errf(http.StatusMethodNotAllowed, "The API version does not allow updating allocations")
	}
	return patchResource(s, w, r, allocationResource)
}

// allocationWrites are what Ironic 21.4's allocation PATCH allows: name and
// extra, a name checked before the allocation is read. Allocations are
// only created by createAllocation (asynchronous, Ironic's algorithm).
var allocationWrites = &writes[store.Allocation]{
	body: "allocation",
	schema: schema{props: []prop{
		{name: "extra", types: []string{"object", "null"}},
		{name: "name", types: []string{"string", "null"}, maxLen: 255},
	}},
	patchable: []string{"name", "extra"},
	patchCheck: func(ops []patchOp) error {
		for _, op := range ops {
			if op.Path != "/name" || op.Op == "remove" {
				continue
			}
			var name *string
			if err := json.Unmarshal(op.Value, &name); err == nil && name != nil && *name != "" && validName(*name) != nil {
				return badRequest("Cannot update allocation with invalid name '%s'", *name)
			}
		}
		return nil
	},
	doc: func(a *store.Allocation) map[string]any {
		return map[string]any{"name": sp(a.Name), "extra": orEmpty(a.Extra)}
	},
	apply: func(_ *Server, _ *http.Request, a *store.Allocation, doc map[string]any, changed func(string) bool, _ bool) error {
		if changed("name") {
			if a.Name = optStr(doc, "name"); a.Name != nil && *a.Name == "" {
				a.Name = nil
			}
		}
		if changed("extra") {
			a.Extra = obj(doc, "extra")
		}
		return nil
	},
	update: func(ctx context.Context, st store.Store, a *store.Allocation) error {
		return st.UpdateAllocation(ctx, a)
	},
	touch: func(a *store.Allocation) { a.UpdatedAt = nowp() },
	writeErr: func(a *store.Allocation, err error) error {
		switch {
		case errors.Is(err, store.ErrDuplicateName):
			return conductor.Wrap(conductor.CodeConflict, err, "An allocation with name %s already exists.", deref(a.Name))
		case errors.Is(err, store.ErrNotFound):
			return notFound("Allocation", a.UUID)
		}
		return err
	},
}

// deleteAllocation frees the node of the allocation load finds (the one
// named, or the node's), unless it is deployed or busy.
func (s *Server) deleteAllocation(load func(*http.Request) (*store.Allocation, error)) handler {
	return func(w http.ResponseWriter, r *http.Request) error {
		a, err := load(r)
		if err != nil {
			return err
		}
		if err := s.cond.Deallocate(r.Context(), a); err != nil && !errors.Is(err, store.ErrNotFound) {
			return err
		}
		w.WriteHeader(http.StatusNoContent)
		return nil
	}
}

// nodeAllocation is the allocation of the node the route names; Ironic's
// refusal when it has none.
func (s *Server) nodeAllocation(r *http.Request) (*store.Allocation, error) {
	if err := since(r.Context(), 52); err != nil {
		return nil, err
	}
	n, err := s.loadNode(r)
	if err != nil {
		return nil, err
	}
	list, err := s.st.ListAllocations(r.Context(), store.ResourceFilter{NodeUUID: &n.UUID}, store.Page{Limit: 1})
	if err != nil {
		return nil, err
	}
	if len(list) == 0 {
		return nil, errf(http.StatusNotFound, "Allocation for node %s was not found", mux.Vars(r)["node"])
	}
	return list[0], nil
}
