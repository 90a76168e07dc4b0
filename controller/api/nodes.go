package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/gorilla/mux"

	"github.com/anvil-metal/anvil/controller/conductor"
	"github.com/anvil-metal/anvil/controller/state"
	"github.com/anvil-metal/anvil/controller/store"
)

var nodeListParams = []string{"fields", "detail", "limit", "marker", "sort_key", "sort_dir", "provision_state",
	"maintenance", "retired", "driver", "associated", "fault", "resource_class", "owner", "lessee",
	"conductor_group", "conductor", "chassis_uuid", "instance_uuid", "description_contains", "shard", "project",
	"name_contains", "text_contains", "include_children", "parent_node", "instance_name"}

// filterGates are the microversions that introduced each list filter.
var filterGates = map[string]int{"provision_state": 9, "driver": 16, "resource_class": 21, "fault": 42,
	"conductor_group": 46, "conductor": 49, "owner": 50, "description_contains": 51, "lessee": 65, "shard": 82, "project": 50}

// nodeIdent is the node named in the path: a UUID, or from 1.5 a name.
func nodeIdent(r *http.Request) (string, error) {
	ident := mux.Vars(r)["node"]
	if _, err := uuid.Parse(ident); err != nil && version(r.Context()) < 5 {
		return "", notFound("Node", ident)
	}
	return ident, nil
}

func (s *Server) loadNode(r *http.Request) (*store.Node, error) {
	ident, err := nodeIdent(r)
	if err != nil {
		return nil, err
	}
	n, err := withJSONSuffix(r.Context(), ident, func(id string) (*store.Node, error) { return s.st.GetNode(r.Context(), id) })
	if errors.Is(err, store.ErrNotFound) {
		return nil, notFound("Node", ident)
	}
	return n, err
}

func (s *Server) listNodes(detailPath bool) handler {
	return func(w http.ResponseWriter, r *http.Request) error { return s.listNodesIn(w, r, detailPath, "") }
}

// listNodesIn lists nodes, those of the chassis chassisUUID if not "".
func (s *Server) listNodesIn(w http.ResponseWriter, r *http.Request, detailPath bool, chassisUUID string) error {
	ctx := r.Context()
	q, err := parseQuery(r, nodeListParams...)
	if err != nil {
		return err
	}
	for k, min := range filterGates {
		if q.has(k) {
			if err := atLeast(ctx, min); err != nil {
				return err
			}
		}
	}
	if q.has("instance_name") && version(ctx) < instanceNameVersion {
		return errf(http.StatusNotAcceptable, "instance_name is not acceptable in this API version")
	}
	detail := detailPath
	if q.has("detail") {
		if err := atLeast(ctx, 43); err != nil {
			return err
		}
		b, err := q.boolean("detail")
		if err != nil {
			return err
		}
		if detailPath {
			return badRequest("Can not specify ?detail=True on /nodes/detail")
		}
		detail = *b
	}
	fields := fieldsArg(q)
	if fields != nil {
		if err := atLeast(ctx, 8); err != nil {
			return err
		}
		if detail {
			return badRequest("Can not specify ?detail=True and fields in the same request.")
		}
		if err := checkFields(ctx, fields, nodeFieldMin); err != nil {
			return err
		}
	}
	if err := childParams(ctx, q); err != nil {
		return err
	}
	f := store.NodeFilter{Driver: q.str("driver"), ResourceClass: q.str("resource_class"), Fault: q.str("fault"),
		Owner: q.str("owner"), Lessee: q.str("lessee"), ConductorGroup: q.str("conductor_group"),
		ChassisUUID: q.str("chassis_uuid"), InstanceUUID: q.str("instance_uuid"),
		DescriptionContains: q.str("description_contains"), Shard: q.str("shard"), NameContains: q.str("name_contains"),
		TextContains: q.str("text_contains"), InstanceName: q.str("instance_name")}
	if c := f.ChassisUUID; c != nil && !isUUIDLike(*c) {
		return badRequest("Expected UUID for chassis_uuid: %s", *c)
	}
	if chassisUUID != "" {
		f.ChassisUUID = &chassisUUID
	}
	if own := listProject(ctx); own != "" {
		f.Project = &own // what a project's caller may see (policy.go)
	}
	if ps := q.str("provision_state"); ps != nil {
		if !state.Valid(state.State(*ps)) {
			return badRequest("Invalid provision_state %q", *ps)
		}
		f.ProvisionState = ps
	}
	if c := q.str("conductor"); c != nil {
		// a node's conductor is its reservation's, else this one
		f.Conductor = &store.ConductorFilter{Host: *c, Free: *c == s.cond.Host()}
	}
	if err := childFilter(q, &f); err != nil {
		return err
	}
	for k, dst := range map[string]**bool{"maintenance": &f.Maintenance, "retired": &f.Retired, "associated": &f.Associated} {
		if *dst, err = q.boolean(k); err != nil {
			return err
		}
	}
	p, err := q.page(store.SortKeys)
	if err != nil {
		return err
	}
	view := listFields
	if detail {
		view = nil
	} else if fields != nil {
		view = fields
	}
	path := "/v1/nodes"
	if chassisUUID != "" {
		path = "/v1/chassis/" + chassisUUID + "/nodes"
	}
	if detailPath {
		path += "/detail"
	}
	pw := &nodePageWriter{s: s, w: w, view: s.newNodeRenderer(r, view)}
	defer pw.release()
	count, last := 0, ""
	err = s.readNodePages(r, f, store.Page{Limit: p.limit, Marker: p.marker, SortKey: p.sortKey, Desc: p.desc}, view,
		func(nodes []*store.Node) error {
			count += len(nodes)
			last = nodes[len(nodes)-1].UUID
			return pw.write(nodes)
		})
	if errors.Is(err, store.ErrNotFound) && p.marker != "" && !pw.started {
		return badRequest("Marker %s could not be found.", p.marker)
	}
	if err != nil {
		return pw.fail(err)
	}
	next := ""
	if count == p.limit && f.InstanceUUID == nil {
		next = nextURL(s.baseURL(r), path, r.URL.Query(), last, p)
	}
	return pw.finish(next)
}

// listNodeViews reads a page of nodes for the view; when every requested
// field is an indexed column the node documents are not read at all.
func listNodeViews(ctx context.Context, st store.Store, f store.NodeFilter, p store.Page, view []string) ([]*store.Node, error) {
	light := view != nil
	for _, k := range view {
		light = light && summaryFields[k]
	}
	if light {
		sums, err := st.ListNodeSummaries(ctx, f, p)
		if err != nil {
			return nil, err
		}
		nodes := make([]*store.Node, len(sums))
		for i, sum := range sums {
			nodes[i] = summaryNode(sum)
		}
		return nodes, nil
	}
	nodes, err := st.ListNodes(ctx, f, p)
	if err != nil {
		return nil, err
	}
	if loader, ok := st.(agentStateLoader); ok && (view == nil || slices.Contains(view, "driver_internal_info")) {
		// driver_internal_info shows the agent's step cache and command
		// status, which lists do not read: one query for the page.
		if err := loader.LoadAgentState(ctx, nodes); err != nil {
			return nil, err
		}
	}
	return nodes, nil
}

// agentStateLoader is a store whose node lists leave out the agent's state
// (store.Node.Partial) and that reads it for a page on request.
type agentStateLoader interface {
	LoadAgentState(ctx context.Context, nodes []*store.Node) error
}

func (s *Server) getNode(w http.ResponseWriter, r *http.Request) error {
	q, err := parseQuery(r, "fields")
	if err != nil {
		return err
	}
	fields := fieldsArg(q)
	if fields != nil {
		if err := atLeast(r.Context(), 8); err != nil {
			return err
		}
		if err := checkFields(r.Context(), fields, nodeFieldMin); err != nil {
			return err
		}
	}
	n, err := s.loadNode(r)
	if err != nil {
		return err
	}
	return s.writeNode(w, r, http.StatusOK, n, fields)
}

// writeNode answers with one node's view (fields nil: all of it).
func (s *Server) writeNode(w http.ResponseWriter, r *http.Request, status int, n *store.Node, fields []string) error {
	view, err := s.nodeView(r, n, fields)
	if err != nil {
		return err
	}
	writeJSON(w, status, view)
	return nil
}

// readBody reads a request body (bounded by requestMiddleware) and checks
// it is JSON the store can keep (checkBody): every JSON body the API reads
// comes through here.
func readBody(r *http.Request) ([]byte, error) {
	b, err := io.ReadAll(r.Body)
	if err != nil {
		return nil, bodyError(err)
	}
	if err := checkBody(b); err != nil {
		return nil, err
	}
	return b, nil
}

// readObject reads the request's body as a JSON object: the body of every
// create and of the other JSON-object requests.
func readObject(r *http.Request) (map[string]any, error) {
	body, err := readBody(r)
	if err != nil {
		return nil, err
	}
	return decodeObject(body)
}

// decodeObject decodes a JSON object body into a generic map.
func decodeObject(body []byte) (map[string]any, error) {
	var m map[string]any
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(&m); err != nil {
		return nil, badRequest("Malformed JSON body: %v", err)
	}
	if dec.More() {
		return nil, badRequest("Malformed JSON body: trailing data after the JSON document")
	}
	if m == nil {
		return nil, badRequest("Malformed JSON body: expected a JSON object")
	}
	return m, nil
}

func (s *Server) createNode(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	if _, err := parseQuery(r); err != nil {
		return err
	}
	m, err := readObject(r)
	if err != nil {
		return err
	}
	now := time.Now().UTC()
	n := &store.Node{UUID: uuid.NewString(), CreatedAt: now, ProvisionState: string(state.Enroll)}
	if version(ctx) < 11 {
		n.ProvisionState = string(state.Available)
	}
	n.Normalize()
	for _, k := range sortedKeys(m) {
		f, ok := writable[k]
		if !ok {
			f, ok = createOnly[k]
		}
		if !ok || k == "protected" || k == "protected_reason" {
			return badRequest("Unexpected arguments: %s", k)
		}
		if version(ctx) < f.min && unsetValue(k, m[k]) {
			continue // Ironic's reject_fields_in_newer_versions lets "no value" through
		}
		if err := atLeast(ctx, f.min); err != nil {
			return err
		}
		if err := f.set(n, m[k]); err != nil {
			return err
		}
	}
	if n.Driver == "" {
		return badRequest("Missing mandatory field: driver")
	}
	if _, ok := s.cond.Driver(n.Driver); !ok {
		return badRequest("No valid host was found. Reason: No conductor service registered which supports driver %s for conductor group \"%s\".", n.Driver, n.ConductorGroup)
	}
	if n.RetiredReason != nil && !n.Retired {
		return badRequest("Cannot set retired_reason on node %s: the node is not retired", n.UUID)
	}
	if err := s.nodeChassis(ctx, nil, n); err != nil {
		return err
	}
	if err := s.resolveParent(ctx, n); err != nil {
		return err
	}
	s.defaultInterfaces(n)
	if err := s.st.CreateNode(ctx, n); err != nil {
		return nodeWriteError(n, err)
	}
	w.Header().Set("Location", s.baseURL(r)+"/v1/nodes/"+n.UUID)
	return s.writeNode(w, r, http.StatusCreated, n, nil)
}

// defaultInterfaces fills unset interfaces with the hardware type's defaults.
func (s *Server) defaultInterfaces(n *store.Node) {
	defaults := conductor.HardwareInterfaces(n.Driver)
	i := &n.Interfaces
	for k, p := range map[string]*string{"bios": &i.BIOS, "boot": &i.Boot, "console": &i.Console, "deploy": &i.Deploy,
		"firmware": &i.Firmware, "inspect": &i.Inspect, "management": &i.Management, "network": &i.Network, "power": &i.Power, "raid": &i.RAID,
		"rescue": &i.Rescue, "storage": &i.Storage, "vendor": &i.Vendor} {
		if *p == "" {
			*p = defaults[k].Default
		}
	}
}

func nodeWriteError(n *store.Node, err error) error {
	switch {
	case errors.Is(err, store.ErrDuplicateName):
		return conductor.Wrap(conductor.CodeConflict, err, "A node with name %s already exists.", deref(n.Name))
	case errors.Is(err, store.ErrDuplicateUUID):
		return conductor.Wrap(conductor.CodeConflict, err, "A node with UUID %s already exists.", n.UUID)
	}
	return err
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// patchDoc is the node as a PATCH document: every writable field the
// version allows, deep-copied so patching cannot alias the node's maps.
func patchDoc(n *store.Node, ver int) (map[string]any, error) {
	doc := map[string]any{}
	for k, f := range writable {
		if f.min <= ver {
			doc[k] = f.get(n)
		}
	}
	var out map[string]any
	err := jsonCopy(doc, &out)
	return out, err
}

func (s *Server) patchNode(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	if _, err := parseQuery(r); err != nil {
		return err
	}
	ops, err := readPatch(r)
	if err != nil {
		return err
	}
	if err := patchInNewerVersion(ctx, ops); err != nil {
		return err
	}
	cur, err := s.loadNode(r)
	if err != nil {
		return err
	}
	if err := s.checkPatchPolicy(ctx, cur, ops); err != nil {
		return err
	}
	var alloc *string
	n, err := store.MutateNode(ctx, s.st, cur.UUID, func(n *store.Node) error {
		alloc = n.AllocationUUID
		return s.applyNodePatch(r, n, ops)
	})
	if err != nil {
		return nodeWriteError(cur, err)
	}
	if alloc != nil && n.AllocationUUID == nil {
		if err := s.st.DeleteAllocation(ctx, *alloc); err != nil && !errors.Is(err, store.ErrNotFound) {
			return err
		}
	}
	return s.writeNode(w, r, http.StatusOK, n, nil)
}

// applyNodePatch applies ops to n and enforces Ironic's update rules.
func (s *Server) applyNodePatch(r *http.Request, n *store.Node, ops []patchOp) error {
	st := state.State(n.ProvisionState)
	if err := conductor.CheckUpdatable(n); err != nil {
		return err
	}
	before, err := patchDoc(n, version(r.Context()))
	if err != nil {
		return err
	}
	after, err := patchDoc(n, version(r.Context()))
	if err != nil {
		return err
	}
	if err := applyPatch(after, ops); err != nil {
		return err
	}
	old := *n
	changed := map[string]bool{}
	for _, k := range sortedKeys(after) {
		if mustJSON(before[k]) == mustJSON(after[k]) {
			continue
		}
		changed[k] = true
		if err := writable[k].set(n, after[k]); err != nil {
			return err
		}
	}
	if changed["instance_info"] && deref(n.InstanceName) == "" {
		// Ironic's forward compatibility with Nova, at any version: an
		// instance_info display_name names an unnamed instance
		if dn, ok := n.InstanceInfo["display_name"].(string); ok && dn != "" {
			n.InstanceName = &dn
		}
	}
	if changed["chassis_uuid"] {
		if err := s.nodeChassis(r.Context(), &old, n); err != nil {
			return err
		}
	}
	if changed["parent_node"] {
		if err := s.resolveParent(r.Context(), n); err != nil {
			return err
		}
	}
	if changed["driver"] {
		if _, ok := s.cond.Driver(n.Driver); !ok {
			return badRequest("No valid host was found. Reason: No conductor service registered which supports driver %s.", n.Driver)
		}
	}
	for k := range changed {
		if len(k) > 10 && k[len(k)-10:] == "_interface" && !n.Maintenance {
			switch st {
			case state.Enroll, state.Inspecting, state.InspectWait, state.Manageable, state.Available:
			default:
				return conductor.Conflict("Node %s: %s can only be changed in enroll, inspecting, manageable or available states, or in maintenance (now %s)", n.UUID, k, st)
			}
		}
	}
	if changed["retired"] {
		if n.Retired && st == state.Available {
			return conductor.Conflict("Node %s can not have 'retired' set in provision state 'available'", n.UUID)
		}
		if !n.Retired {
			n.RetiredReason = nil
		}
	}
	if n.RetiredReason != nil && !n.Retired && changed["retired_reason"] {
		return badRequest("Node %s: retired_reason can only be set when the node is retired", n.UUID)
	}
	if changed["maintenance"] && !n.Maintenance {
		n.MaintenanceReason, n.Fault = nil, nil
	}
	if changed["protected"] {
		if n.Protected && st != state.Active && st != state.Rescue {
			return conductor.Conflict("Node %s can only be made protected in provision states 'active' or 'rescue', not %q", n.UUID, st)
		}
		if !n.Protected {
			n.ProtectedReason = nil
		}
	}
	if n.ProtectedReason != nil && !n.Protected && changed["protected_reason"] {
		return badRequest("Node %s: protected_reason can only be set when the node is protected", n.UUID)
	}
	if changed["instance_uuid"] && old.InstanceUUID != nil && n.InstanceUUID != nil {
		return conductor.Conflict("Node %s is associated with instance %s.", n.UUID, *old.InstanceUUID)
	}
	if changed["instance_uuid"] && n.InstanceUUID == nil && old.AllocationUUID != nil {
		// Removing the instance removes its allocation (patchNode deletes
		// it once the node is written), as Ironic's update_node does.
		switch {
		case n.Maintenance, st == state.Enroll, st == state.Inspecting, st == state.InspectWait, st == state.Manageable, st == state.Available:
		default:
			return conductor.Conflict("Node %s with an allocation can not have instance_uuid removed unless it is in one of "+
				"allowed (enroll, inspecting, inspect wait, manageable, available) states or in maintenance mode.", n.UUID)
		}
		n.AllocationUUID = nil
	}
	return nil
}

func (s *Server) deleteNode(w http.ResponseWriter, r *http.Request) error {
	if _, err := parseQuery(r); err != nil {
		return err
	}
	ident, err := nodeIdent(r)
	if err != nil {
		return err
	}
	// The checks hold at the revision deleted: a verb racing this DELETE
	// either lands first and is refused here, or finds the node gone.
	if r.Context().Value(ctxJSONSuffix) == true {
		if n, err := withJSONSuffix(r.Context(), ident, func(id string) (*store.Node, error) { return s.st.GetNode(r.Context(), id) }); err == nil {
			ident = n.UUID // the node a stripped ".json" suffix names
		}
	}
	var deleted string
	err = store.DeleteNodeIf(r.Context(), s.st, ident, func(n *store.Node) error {
		deleted = n.UUID
		return conductor.CheckDeletable(n)
	})
	if errors.Is(err, store.ErrNotFound) {
		return notFound("Node", ident)
	}
	if err != nil {
		return err
	}
	if s.dataImages != nil { // the vmedia API's downloads are served no more
		s.dataImages.RemoveNode(deleted)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
