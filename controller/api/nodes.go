package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
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
	"name_contains", "text_contains"}

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
	n, err := s.st.GetNode(r.Context(), ident)
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
	f := store.NodeFilter{Driver: q.str("driver"), ResourceClass: q.str("resource_class"), Fault: q.str("fault"),
		Owner: q.str("owner"), Lessee: q.str("lessee"), ConductorGroup: q.str("conductor_group"),
		ChassisUUID: q.str("chassis_uuid"), InstanceUUID: q.str("instance_uuid"),
		DescriptionContains: q.str("description_contains"), Shard: q.str("shard"), NameContains: q.str("name_contains"),
		TextContains: q.str("text_contains")}
	if c := f.ChassisUUID; c != nil && !isUUIDLike(*c) {
		return badRequest("Expected UUID for chassis_uuid: %s", *c)
	}
	if chassisUUID != "" {
		f.ChassisUUID = &chassisUUID
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
	nodes, err := s.listNodeViews(r, f, store.Page{Limit: p.limit, Marker: p.marker, SortKey: p.sortKey, Desc: p.desc}, view)
	if errors.Is(err, store.ErrNotFound) && p.marker != "" {
		return badRequest("Marker %s could not be found.", p.marker)
	}
	if err != nil {
		return err
	}
	next := ""
	if len(nodes) == p.limit && f.InstanceUUID == nil {
		path := "/v1/nodes"
		if chassisUUID != "" {
			path = "/v1/chassis/" + chassisUUID + "/nodes"
		}
		if detailPath {
			path += "/detail"
		}
		next = nextURL(s.baseURL(r), path, r.URL.Query(), nodes[len(nodes)-1].UUID, p)
	}
	return s.writeNodePage(w, s.newNodeRenderer(r, view), nodes, next)
}

// listNodeViews reads a page of nodes for the view; when every requested
// field is an indexed column the node documents are not read at all.
func (s *Server) listNodeViews(r *http.Request, f store.NodeFilter, p store.Page, view []string) ([]*store.Node, error) {
	light := view != nil
	for _, k := range view {
		light = light && summaryFields[k]
	}
	if light {
		sums, err := s.st.ListNodeSummaries(r.Context(), f, p)
		if err != nil {
			return nil, err
		}
		nodes := make([]*store.Node, len(sums))
		for i, sum := range sums {
			nodes[i] = summaryNode(sum)
		}
		return nodes, nil
	}
	nodes, err := s.st.ListNodes(r.Context(), f, p)
	if err != nil {
		return nil, err
	}
	if loader, ok := s.st.(agentStateLoader); ok && (view == nil || slices.Contains(view, "driver_internal_info")) {
		// driver_internal_info shows the agent's step cache and command
		// status, which lists do not read: one query for the page.
		if err := loader.LoadAgentState(r.Context(), nodes); err != nil {
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

// pageChunk is how much of a node page is written to the connection at a
// time.
const pageChunk = 64 << 10

// writeNodePage streams {"nodes": [...], "next": ...} to the client in
// chunks through one pooled buffer. A detailed page of 1000 nodes is
// megabytes: built whole, its buffer was allocated (and cleared) afresh
// most of the time, because a sync.Pool loses its contents at every other
// GC, and it pushed the controller's RSS. The first node is rendered
// before the status is sent, so an unrenderable node (only a bug could
// make one: every value came from JSON) fails the request cleanly; a later
// one aborts the connection, never ending a truncated body as if complete.
func (s *Server) writeNodePage(w http.ResponseWriter, view *nodeRenderer, nodes []*store.Node, next string) error {
	b, _ := s.bufs.Get().(*bytes.Buffer)
	if b == nil {
		b = new(bytes.Buffer)
	}
	b.Reset()
	defer s.bufs.Put(b)
	b.WriteString(`{"nodes":[`)
	started := false
	for i, n := range nodes {
		if i > 0 {
			b.WriteByte(',')
		}
		if err := view.appendNode(b, n); err != nil {
			if !started {
				return err
			}
			s.log.Error("rendering a node page failed mid-stream; aborting the response", "node", n.UUID, "err", err)
			panic(http.ErrAbortHandler)
		}
		if b.Len() >= pageChunk {
			if !started {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusOK)
				started = true
			}
			if _, err := w.Write(b.Bytes()); err != nil {
				return err
			}
			b.Reset()
		}
	}
	b.WriteByte(']')
	if next != "" {
		b.WriteString(`,"next":`)
		appendString(b, next)
	}
	b.WriteString("}\n")
	if !started {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
	}
	_, err := w.Write(b.Bytes())
	return err
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

func readBody(r *http.Request) ([]byte, error) {
	b, err := io.ReadAll(r.Body)
	if err != nil {
		return nil, bodyError(err)
	}
	return b, nil
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
	body, err := readBody(r)
	if err != nil {
		return err
	}
	m, err := decodeObject(body)
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
		"inspect": &i.Inspect, "management": &i.Management, "network": &i.Network, "power": &i.Power, "raid": &i.RAID,
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
	b, err := json.Marshal(doc)
	if err != nil {
		return nil, err
	}
	var out map[string]any
	err = json.Unmarshal(b, &out)
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
	cur, err := s.loadNode(r)
	if err != nil {
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
	if changed["chassis_uuid"] {
		if err := s.nodeChassis(r.Context(), &old, n); err != nil {
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
	err = store.DeleteNodeIf(r.Context(), s.st, ident, conductor.CheckDeletable)
	if errors.Is(err, store.ErrNotFound) {
		return notFound("Node", ident)
	}
	if err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *Server) getStates(w http.ResponseWriter, r *http.Request) error {
	n, err := s.loadNode(r)
	if err != nil {
		return err
	}
	v := s.newNodeRenderer(r, []string{"console_enabled", "last_error", "power_state", "provision_state",
		"target_power_state", "target_provision_state", "provision_updated_at", "raid_config", "target_raid_config",
		"boot_mode", "secure_boot"})
	v.links = false
	view, err := v.render(n)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, view)
	return nil
}

type provisionBody struct {
	Target         *string          `json:"target"`
	ConfigDrive    any              `json:"configdrive"`
	CleanSteps     []map[string]any `json:"clean_steps"`
	DeploySteps    []map[string]any `json:"deploy_steps"`
	RescuePassword *string          `json:"rescue_password"`
	DisableRamdisk *bool            `json:"disable_ramdisk"`
}

func (s *Server) putProvision(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	if _, err := parseQuery(r); err != nil {
		return err
	}
	n, err := s.loadNode(r)
	if err != nil {
		return err
	}
	var b provisionBody
	if err := decodeBody(r, &b); err != nil {
		return err
	}
	if b.Target == nil || *b.Target == "" {
		return badRequest("Missing argument: target")
	}
	target := *b.Target
	verb, known := state.LookupVerb(target)
	if known {
		if err := atLeast(ctx, verb.MinVersion); err != nil {
			return err
		}
		if verb.Event == state.EvAbort && n.ProvisionState == string(state.InspectWait) {
			if err := atLeast(ctx, 41); err != nil {
				return err
			}
		}
	}
	isDeploy := known && (verb.Event == state.EvDeploy || verb.Event == state.EvRebuild)
	if b.ConfigDrive != nil && !isDeploy {
		return badRequest("Adding a config drive is only supported when setting provision state to active or rebuild")
	}
	if b.CleanSteps != nil && target != "clean" {
		return badRequest("\"clean_steps\" is only valid when setting target provision state to clean")
	}
	if b.DeploySteps != nil {
		if err := atLeast(ctx, 69); err != nil {
			return err
		}
		if !isDeploy {
			return badRequest("\"deploy_steps\" is only valid when setting target provision state to active or rebuild")
		}
	}
	if b.RescuePassword != nil && target != "rescue" {
		return badRequest("\"rescue_password\" is only valid when setting target provision state to rescue")
	}
	if b.DisableRamdisk != nil {
		if err := atLeast(ctx, 70); err != nil {
			return err
		}
		if target != "clean" {
			return badRequest("\"disable_ramdisk\" is only valid when setting target provision state to clean")
		}
	}
	req := conductor.ProvisionRequest{Target: target, ConfigDrive: b.ConfigDrive, RequestedBy: s.requester(r)}
	if b.RescuePassword != nil {
		req.RescuePassword = *b.RescuePassword
	}
	if b.DisableRamdisk != nil {
		req.DisableRamdisk = *b.DisableRamdisk
	}
	if req.CleanSteps, err = parseSteps(b.CleanSteps, false); err != nil {
		return err
	}
	if req.DeploySteps, err = parseSteps(b.DeploySteps, true); err != nil {
		return err
	}
	if target == "clean" && len(req.CleanSteps) == 0 {
		return badRequest("\"clean_steps\" is required when setting target provision state to clean")
	}
	if err := s.cond.Provision(ctx, n.UUID, req); err != nil {
		return err
	}
	w.Header().Set("Location", s.baseURL(r)+"/v1/nodes/"+mux.Vars(r)["node"]+"/states")
	w.WriteHeader(http.StatusAccepted)
	return nil
}

type powerBody struct {
	Target  *string `json:"target"`
	Timeout *int    `json:"timeout"`
}

func (s *Server) putPower(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	n, err := s.loadNode(r)
	if err != nil {
		return err
	}
	var b powerBody
	if err := decodeBody(r, &b); err != nil {
		return err
	}
	if b.Target == nil {
		return badRequest("Missing argument: target")
	}
	if *b.Target == conductor.SoftPowerOff || *b.Target == conductor.SoftRebooting || b.Timeout != nil {
		if err := atLeast(ctx, 27); err != nil {
			return err
		}
	}
	if b.Timeout != nil && *b.Timeout < 1 {
		return badRequest("Invalid timeout value %d: it must be a positive integer", *b.Timeout)
	}
	if err := s.cond.SetPower(ctx, n.UUID, *b.Target); err != nil {
		return err
	}
	w.Header().Set("Location", s.baseURL(r)+"/v1/nodes/"+mux.Vars(r)["node"]+"/states")
	w.WriteHeader(http.StatusAccepted)
	return nil
}

func (s *Server) putMaintenance(w http.ResponseWriter, r *http.Request) error {
	n, err := s.loadNode(r)
	if err != nil {
		return err
	}
	var b struct {
		Reason *string `json:"reason"`
	}
	body, err := readBody(r)
	if err != nil {
		return err
	}
	if len(bytes.TrimSpace(body)) > 0 {
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&b); err != nil {
			return bodyError(err)
		}
	}
	_, err = store.MutateNode(r.Context(), s.st, n.UUID, func(m *store.Node) error {
		m.Maintenance, m.MaintenanceReason = true, b.Reason
		return nil
	})
	if err != nil {
		return err
	}
	w.WriteHeader(http.StatusAccepted)
	return nil
}

func (s *Server) deleteMaintenance(w http.ResponseWriter, r *http.Request) error {
	n, err := s.loadNode(r)
	if err != nil {
		return err
	}
	_, err = store.MutateNode(r.Context(), s.st, n.UUID, func(m *store.Node) error {
		m.Maintenance, m.MaintenanceReason, m.Fault = false, nil, nil
		return nil
	})
	if err != nil {
		return err
	}
	w.WriteHeader(http.StatusAccepted)
	return nil
}

func (s *Server) validateNode(w http.ResponseWriter, r *http.Request) error {
	n, err := s.loadNode(r)
	if err != nil {
		return err
	}
	d, ok := s.cond.Driver(n.Driver)
	out := map[string]any{}
	if !ok {
		for _, k := range []string{"boot", "deploy", "management", "power", "console", "inspect", "network", "raid", "rescue", "storage", "bios"} {
			out[k] = map[string]any{"result": false, "reason": fmt.Sprintf("hardware type %q is not enabled", n.Driver)}
		}
	} else {
		for k, verr := range d.Validate(n) {
			if verr != nil {
				out[k] = map[string]any{"result": false, "reason": verr.Error()}
			} else {
				out[k] = map[string]any{"result": true}
			}
		}
		storage, err := s.storageValidation(r.Context(), n)
		if err != nil {
			return err
		}
		if storage != nil {
			out["storage"] = storage
		}
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) getHistory(w http.ResponseWriter, r *http.Request) error {
	if err := atLeast(r.Context(), 78); err != nil {
		return err
	}
	q, err := parseQuery(r, "detail", "limit", "marker")
	if err != nil {
		return err
	}
	n, err := s.loadNode(r)
	if err != nil {
		return err
	}
	limit := 0
	if q.has("limit") {
		p, err := q.page(nil)
		if err != nil {
			return err
		}
		limit = p.limit
	}
	marker := q.v.Get("marker")
	if marker != "" {
		// Ironic validates the marker as a UUID (args.uuid) before it
		// looks for the record.
		u, err := uuid.Parse(marker)
		if err != nil {
			return badRequest("Expected UUID for marker: %s", marker)
		}
		marker = u.String()
	}
	fetch := limit
	if marker != "" {
		fetch = 0 // the page starts after the marker, wherever it is
	}
	events, err := s.st.ListEvents(r.Context(), n.UUID, fetch)
	if err != nil {
		return err
	}
	if marker != "" {
		if events, err = eventsAfter(events, marker); err != nil {
			return err
		}
		if limit > 0 && len(events) > limit {
			events = events[:limit]
		}
	}
	out := make([]map[string]any, 0, len(events))
	for _, e := range events {
		out = append(out, map[string]any{"uuid": e.UUID, "created_at": fmtTime(e.CreatedAt), "severity": e.Severity,
			"event": e.Event, "event_type": e.EventType, "conductor": e.Conductor, "user": sp(e.User),
			"links": s.links(r, "nodes/"+n.UUID+"/history/"+e.UUID)})
	}
	writeJSON(w, http.StatusOK, map[string]any{"history": out})
	return nil
}

// eventsAfter is the part of a node's history after the event marker.
func eventsAfter(events []*store.Event, marker string) ([]*store.Event, error) {
	for i, e := range events {
		if e.UUID == marker {
			return events[i+1:], nil
		}
	}
	return nil, errf(http.StatusNotFound, "Node history record %s could not be found.", marker)
}

var raidLevels = map[string]bool{"0": true, "1": true, "2": true, "5": true, "6": true, "1+0": true, "5+0": true, "6+0": true}

func (s *Server) putRAID(w http.ResponseWriter, r *http.Request) error {
	if err := atLeast(r.Context(), 12); err != nil {
		return err
	}
	n, err := s.loadNode(r)
	if err != nil {
		return err
	}
	body, err := readBody(r)
	if err != nil {
		return err
	}
	cfg, err := decodeObject(body)
	if err != nil {
		return err
	}
	if err := validateRAIDConfig(cfg); err != nil {
		return err
	}
	_, err = store.MutateNode(r.Context(), s.st, n.UUID, func(m *store.Node) error {
		m.TargetRAIDConfig = cfg
		return nil
	})
	if err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func validateRAIDConfig(cfg map[string]any) error {
	for k := range cfg {
		if k != "logical_disks" {
			return badRequest("Invalid RAID configuration: unexpected key %q", k)
		}
	}
	disks, ok := cfg["logical_disks"].([]any)
	if !ok {
		return badRequest("Invalid RAID configuration: logical_disks must be a list")
	}
	for i, d := range disks {
		ld, ok := d.(map[string]any)
		if !ok {
			return badRequest("Invalid RAID configuration: logical disk %d is not an object", i)
		}
		level, _ := ld["raid_level"].(string)
		if !raidLevels[level] {
			return badRequest("Invalid RAID configuration: logical disk %d has raid_level %v; want one of 0, 1, 2, 5, 6, 1+0, 5+0, 6+0", i, ld["raid_level"])
		}
		switch sz := ld["size_gb"].(type) {
		case float64:
			if sz <= 0 || sz != float64(int64(sz)) {
				return badRequest("Invalid RAID configuration: logical disk %d size_gb must be a positive integer or \"MAX\"", i)
			}
		case string:
			if sz != "MAX" {
				return badRequest("Invalid RAID configuration: logical disk %d size_gb must be a positive integer or \"MAX\"", i)
			}
		default:
			return badRequest("Invalid RAID configuration: logical disk %d needs size_gb", i)
		}
	}
	return nil
}
