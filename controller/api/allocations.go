package api

import (
	"context"
	"errors"
	"math/rand/v2"
	"net/http"
	"time"

	"github.com/google/uuid"

	"github.com/anvil-metal/anvil/controller/conductor"
	"github.com/anvil-metal/anvil/controller/state"
	"github.com/anvil-metal/anvil/controller/store"
)

var allocationFieldMin = map[string]int{"uuid": 52, "name": 52, "node_uuid": 52, "state": 52, "last_error": 52,
	"resource_class": 52, "candidate_nodes": 52, "traits": 52, "extra": 52, "created_at": 52, "updated_at": 52, "owner": 60}

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

type allocationBody struct {
	UUID           *string        `json:"uuid"`
	Name           *string        `json:"name"`
	ResourceClass  *string        `json:"resource_class"`
	CandidateNodes []string       `json:"candidate_nodes"`
	Traits         []string       `json:"traits"`
	Extra          map[string]any `json:"extra"`
	Owner          *string        `json:"owner"`
}

// createAllocation claims an available node matching resource class, traits
// and candidates, as Ironic's standalone allocation API does. Claiming is a
// compare-and-swap on the node, so two allocations never get the same node.
func (s *Server) createAllocation(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	if err := atLeast(ctx, 52); err != nil {
		return err
	}
	var b allocationBody
	if err := decodeBody(r, &b); err != nil {
		return err
	}
	if b.ResourceClass == nil || *b.ResourceClass == "" {
		return badRequest("Missing mandatory field: resource_class")
	}
	for _, t := range b.Traits {
		if err := s.traitNames.check("allocation", t); err != nil {
			return err
		}
	}
	a := &store.Allocation{UUID: uuid.NewString(), Name: b.Name, State: "allocating", ResourceClass: *b.ResourceClass,
		Traits: b.Traits, Extra: b.Extra, Owner: b.Owner, CreatedAt: time.Now().UTC()}
	if b.UUID != nil {
		u, err := uuid.Parse(*b.UUID)
		if err != nil {
			return badRequest("Invalid value for uuid: %q is not a UUID", *b.UUID)
		}
		a.UUID = u.String()
	}
	if b.Name != nil {
		if err := validName(*b.Name); err != nil {
			return err
		}
	}
	for _, c := range b.CandidateNodes {
		n, err := s.st.GetNode(ctx, c)
		if errors.Is(err, store.ErrNotFound) {
			return badRequest("Candidate node %s could not be found.", c)
		} else if err != nil {
			return err
		}
		a.CandidateNodes = append(a.CandidateNodes, n.UUID)
	}
	if err := s.st.CreateAllocation(ctx, a); err != nil {
		if errors.Is(err, store.ErrDuplicateName) {
			return conductor.Wrap(conductor.CodeConflict, err, "An allocation with name %s already exists.", deref(a.Name))
		}
		return err
	}
	if err := s.allocate(ctx, r, a); err != nil {
		return err
	}
	w.Header().Set("Location", s.baseURL(r)+"/v1/allocations/"+a.UUID)
	writeJSON(w, http.StatusCreated, s.allocationView(r, a, nil))
	return nil
}

func (s *Server) allocate(ctx context.Context, r *http.Request, a *store.Allocation) error {
	avail, no := string(state.Available), false
	cands := map[string]bool{}
	for _, c := range a.CandidateNodes {
		cands[c] = true
	}
	var matches []*store.Node
	page := store.Page{Limit: maxLimit}
	for {
		nodes, err := s.st.ListNodes(ctx, store.NodeFilter{ProvisionState: &avail, Maintenance: &no, Associated: &no,
			ResourceClass: &a.ResourceClass}, page)
		if err != nil {
			return err
		}
		for _, n := range nodes {
			if (len(cands) == 0 || cands[n.UUID]) && hasTraits(n, a.Traits) && (a.Owner == nil || deref(n.Owner) == *a.Owner) {
				matches = append(matches, n)
			}
		}
		if len(nodes) < page.Limit {
			break
		}
		page.Marker = nodes[len(nodes)-1].UUID
	}
	// Random order spreads concurrent allocations over the matches.
	rand.Shuffle(len(matches), func(i, j int) { matches[i], matches[j] = matches[j], matches[i] })
	for _, cand := range matches {
		_, err := store.MutateNode(ctx, s.st, cand.UUID, func(n *store.Node) error {
			if n.ProvisionState != avail || n.InstanceUUID != nil || n.Maintenance || n.Reservation != nil {
				return errTaken
			}
			n.InstanceUUID, n.AllocationUUID = &a.UUID, &a.UUID
			return nil
		})
		if errors.Is(err, errTaken) {
			continue
		}
		if err != nil {
			return err
		}
		a.NodeUUID, a.State = &cand.UUID, "active"
		return s.st.UpdateAllocation(ctx, a)
	}
	a.State = "error"
	msg := "Failed to process allocation " + a.UUID + ": no available nodes match the resource class " + a.ResourceClass
	if len(a.Traits) > 0 || len(cands) > 0 {
		msg += ", traits and candidate nodes requested"
	}
	a.LastError = &msg
	return s.st.UpdateAllocation(ctx, a)
}

var errTaken = errors.New("node taken")

func hasTraits(n *store.Node, want []string) bool {
	have := map[string]bool{}
	for _, t := range n.Traits {
		have[t] = true
	}
	for _, t := range want {
		if !have[t] {
			return false
		}
	}
	return true
}

func (s *Server) listAllocations(w http.ResponseWriter, r *http.Request) error {
	return listResource(s, w, r, allocationResource, false, "")
}

func (s *Server) loadAllocation(r *http.Request) (*store.Allocation, error) {
	return loadResource(s, r, allocationResource)
}

func (s *Server) getAllocation(w http.ResponseWriter, r *http.Request) error {
	return getResource(s, w, r, allocationResource)
}

// deleteAllocation frees the node, unless it is being or has been deployed.
func (s *Server) deleteAllocation(w http.ResponseWriter, r *http.Request) error {
	a, err := s.loadAllocation(r)
	if err != nil {
		return err
	}
	if a.NodeUUID != nil {
		_, err := store.MutateNode(r.Context(), s.st, *a.NodeUUID, func(n *store.Node) error {
			switch state.State(n.ProvisionState) {
			case state.Active, state.Deploying, state.DeployWait:
				return conductor.Conflict("Cannot remove allocation %s: node %s is %s; undeploy it first", a.UUID, n.UUID, n.ProvisionState)
			}
			if n.AllocationUUID != nil && *n.AllocationUUID == a.UUID {
				n.AllocationUUID, n.InstanceUUID = nil, nil
			}
			return nil
		})
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return err
		}
	}
	if err := s.st.DeleteAllocation(r.Context(), a.UUID); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
