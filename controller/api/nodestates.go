// Node state changes and per-node sub-resources: states, provision,
// power, maintenance, validation, history and RAID configuration.

package api

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/google/uuid"
	"github.com/gorilla/mux"

	"github.com/anvil-metal/anvil/controller/conductor"
	"github.com/anvil-metal/anvil/controller/configdrive"
	"github.com/anvil-metal/anvil/controller/state"
	"github.com/anvil-metal/anvil/controller/store"
)

// The provision API's later versions (Ironic's webapi-version-history).
// Abort in wait call-back, Ironic's since 1.110, needs no gate: anvil had
// it before as a documented extension and keeps it at every version.
const (
	serviceVersion               = 87  // the service verb, service_steps and the node's service_step
	serviceDisableRamdiskVersion = 108 // disable_ramdisk with service
)

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
	ServiceSteps   []map[string]any `json:"service_steps"`
	RescuePassword *string          `json:"rescue_password"`
	DisableRamdisk *bool            `json:"disable_ramdisk"`
	Runbook        *string          `json:"runbook"`
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
	if err := checkConfigDrive(ctx, b.ConfigDrive); err != nil {
		return err
	}
	if b.Runbook == nil || *b.Runbook == "" {
		// Ironic's secondary RBAC checks, before the request's content
		if err := s.checkProvisionSteps(ctx, n, &b); err != nil {
			return err
		}
	}
	var rb *runbookRun
	if b.Runbook != nil && *b.Runbook != "" { // Ironic ignores an empty one
		// the runbook's steps and disable_ramdisk are the request's
		stepsField := map[string]string{"clean": "clean_steps", "service": "service_steps"}[target]
		given := map[string]bool{"clean": len(b.CleanSteps) > 0, "service": len(b.ServiceSteps) > 0}[target]
		if rb, err = s.runbookSteps(ctx, n, *b.Runbook, stepsField, given); err != nil {
			return err
		}
		b.DisableRamdisk = &rb.disableRamdisk
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
		// Ironic's check_allow_disable_ramdisk
		switch target {
		case "clean":
			if version(ctx) < 70 {
				return errf(http.StatusNotAcceptable, "disable_ramdisk is not acceptable in this API version")
			}
		case "service":
			if version(ctx) < serviceDisableRamdiskVersion {
				return errf(http.StatusNotAcceptable, "disable_ramdisk is not acceptable in this API version")
			}
		default:
			return badRequest("disable_ramdisk is supported only with manual cleaning or servicing")
		}
	}
	if b.ServiceSteps != nil && target != "service" {
		return badRequest("\"service_steps\" is only valid when setting target provision state to service")
	}
	req := conductor.ProvisionRequest{Target: target, ConfigDrive: b.ConfigDrive, RequestedBy: s.requester(r), User: callerCreds(ctx).User}
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
	if req.ServiceSteps, err = parseStepsOf("service", b.ServiceSteps); err != nil {
		return err
	}
	if rb != nil {
		switch target {
		case "clean":
			req.CleanSteps, req.Runbook = rb.steps, rb.label
		case "service":
			req.ServiceSteps, req.Runbook = rb.steps, rb.label
		}
	}
	if target == "service" && len(req.ServiceSteps) == 0 {
		return badRequest("\"service_steps\" is required when setting target provision state to service")
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
	return s.setMaintenance(w, r, n, func(m *store.Node) { m.Maintenance, m.MaintenanceReason = true, b.Reason })
}

func (s *Server) deleteMaintenance(w http.ResponseWriter, r *http.Request) error {
	n, err := s.loadNode(r)
	if err != nil {
		return err
	}
	return s.setMaintenance(w, r, n, func(m *store.Node) { m.Maintenance, m.MaintenanceReason, m.Fault = false, nil, nil })
}

// setMaintenance writes n's maintenance fields by set and answers 202, for
// the maintenance PUT and DELETE alike.
func (s *Server) setMaintenance(w http.ResponseWriter, r *http.Request, n *store.Node, set func(m *store.Node)) error {
	_, err := store.MutateNode(r.Context(), s.st, n.UUID, func(m *store.Node) error {
		set(m)
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
		for _, k := range []string{"boot", "deploy", "management", "power", "console", "inspect", "network", "raid", "rescue", "storage", "bios", "firmware"} {
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
	if version(r.Context()) < firmwareVersion {
		delete(out, "firmware") // the interface came with 1.86
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) getHistory(w http.ResponseWriter, r *http.Request) error {
	if err := since(r.Context(), 78); err != nil {
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
	cfg, err := readObject(r)
	if err != nil {
		return err
	}
	if err := validateRAIDConfig(cfg); err != nil {
		return err
	}
	if err := boundField("node", "target_raid_config", cfg, maxFieldJSON); err != nil {
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

// checkConfigDrive is the rest of Ironic's check_allow_configdrive: the
// value's shape (configdrive.Validate) and the versions of its object
// form (1.56) and of vendor_data (1.59).
func checkConfigDrive(ctx context.Context, cd any) error {
	if err := configdrive.Validate(cd); err != nil {
		return badRequest("%s", err.Error())
	}
	obj, ok := cd.(map[string]any)
	if !ok {
		return nil
	}
	if version(ctx) < 56 {
		return badRequest("Providing a JSON object for configdrive is only supported starting with API version 1.56")
	}
	if _, ok := obj["vendor_data"]; ok && version(ctx) < 59 {
		return badRequest("Providing vendor_data in configdrive is only supported starting with API version 1.59")
	}
	return nil
}
