package api

import (
	"errors"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/anvil-metal/anvil/controller/conductor"
	"github.com/anvil-metal/anvil/controller/store"
)

// normalizeMAC accepts the usual MAC spellings and returns lower-case
// colon form, which is how ports are stored and looked up.
func normalizeMAC(s string) (string, error) {
	hw, err := net.ParseMAC(strings.TrimSpace(s))
	if err != nil || len(hw) != 6 {
		return "", badRequest("Expected a MAC address but received %s.", s)
	}
	return hw.String(), nil
}

var portFieldMin = map[string]int{"uuid": 1, "address": 1, "node_uuid": 1, "extra": 1, "created_at": 1,
	"updated_at": 1, "local_link_connection": 19, "pxe_enabled": 19, "portgroup_uuid": 24,
	"physical_network": 34, "is_smartnic": 53, "name": 88, "internal_info": 18}

func (s *Server) portView(r *http.Request, p *store.Port, fields []string) map[string]any {
	all := map[string]any{"uuid": p.UUID, "address": p.Address, "node_uuid": p.NodeUUID, "extra": orEmpty(p.Extra),
		"created_at": fmtTime(p.CreatedAt), "updated_at": ts(p.UpdatedAt),
		"local_link_connection": orEmpty(p.LocalLinkConnection), "pxe_enabled": p.PXEEnabled,
		"portgroup_uuid": sp(p.PortgroupUUID), "physical_network": sp(p.PhysicalNetwork), "is_smartnic": p.IsSmartNIC,
		"internal_info": orEmpty(p.InternalInfo)}
	return s.view(r, all, portFieldMin, fields, "ports/"+p.UUID)
}

// view keeps the fields the version allows (and the request asked for).
func (s *Server) view(r *http.Request, all map[string]any, mins map[string]int, fields []string, self string) map[string]any {
	ver := version(r.Context())
	out := map[string]any{}
	if fields == nil {
		for k, v := range all {
			if mins[k] <= ver {
				out[k] = v
			}
		}
	} else {
		for _, k := range fields {
			if v, ok := all[k]; ok && mins[k] <= ver {
				out[k] = v
			}
		}
	}
	out["links"] = s.links(r, self)
	return out
}

func orEmpty(m map[string]any) map[string]any {
	if m == nil {
		return map[string]any{}
	}
	return m
}

func (s *Server) listPorts(detailPath bool) handler {
	return func(w http.ResponseWriter, r *http.Request) error {
		return s.listPortsFor(w, r, detailPath, "")
	}
}

func (s *Server) listNodePorts(w http.ResponseWriter, r *http.Request) error {
	n, err := s.loadNode(r)
	if err != nil {
		return err
	}
	return s.listPortsFor(w, r, false, n.UUID)
}

func (s *Server) listPortsFor(w http.ResponseWriter, r *http.Request, detail bool, nodeUUID string) error {
	return listResource(s, w, r, portResource, detail, nodeUUID)
}

func (s *Server) loadPort(r *http.Request) (*store.Port, error) {
	return loadResource(s, r, portResource)
}

func (s *Server) getPort(w http.ResponseWriter, r *http.Request) error {
	q, err := parseQuery(r, "fields")
	if err != nil {
		return err
	}
	fields := fieldsArg(q)
	if err := checkFields(r.Context(), fields, portFieldMin); err != nil {
		return err
	}
	p, err := s.loadPort(r)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, s.portView(r, p, fields))
	return nil
}

// portWritable are the settable port fields with their version gates.
var portWritable = map[string]int{"address": 1, "node_uuid": 1, "extra": 1, "local_link_connection": 19,
	"pxe_enabled": 19, "portgroup_uuid": 24, "physical_network": 34, "is_smartnic": 53}

// setPortFields applies a decoded document to p with type checks.
func (s *Server) setPortFields(r *http.Request, p *store.Port, m map[string]any) error {
	ctx := r.Context()
	for _, k := range sortedKeys(m) {
		v := m[k]
		if k == "uuid" {
			continue
		}
		min, ok := portWritable[k]
		if !ok {
			return badRequest("Unexpected arguments: %s", k)
		}
		if err := atLeast(ctx, min); err != nil {
			return err
		}
		var err error
		switch k {
		case "address":
			a, _ := v.(string)
			p.Address, err = normalizeMAC(a)
		case "node_uuid":
			id, _ := v.(string)
			n, gerr := s.st.GetNode(ctx, id)
			if errors.Is(gerr, store.ErrNotFound) {
				return badRequest("Node %s could not be found.", id)
			} else if gerr != nil {
				return gerr
			}
			p.NodeUUID = n.UUID
		case "extra":
			p.Extra, err = asObject(k, v)
		case "local_link_connection":
			p.LocalLinkConnection, err = asObject(k, v)
		case "pxe_enabled":
			p.PXEEnabled, err = asBool(k, v)
		case "is_smartnic":
			p.IsSmartNIC, err = asBool(k, v)
		case "portgroup_uuid":
			p.PortgroupUUID, err = asOptString(k, v, 36)
		case "physical_network":
			p.PhysicalNetwork, err = asOptString(k, v, 64)
		}
		if err != nil {
			return err
		}
	}
	if p.Address == "" {
		return badRequest("Missing mandatory field: address")
	}
	if p.NodeUUID == "" {
		return badRequest("Missing mandatory field: node_uuid")
	}
	return nil
}

func portWriteError(p *store.Port, err error) error {
	if errors.Is(err, store.ErrDuplicateAddr) {
		return conductor.Wrap(conductor.CodeConflict, err, "A port with MAC address %s already exists.", p.Address)
	}
	if errors.Is(err, store.ErrDuplicateUUID) {
		return conductor.Wrap(conductor.CodeConflict, err, "A port with UUID %s already exists.", p.UUID)
	}
	if errors.Is(err, store.ErrConflict) {
		// Ironic serializes writes under the node's lock; a write that
		// lost a race is refused as a locked node is.
		return conductor.Wrap(conductor.CodeConflict, err, "Port %s was changed by another request, please retry.", p.UUID)
	}
	return err
}

func (s *Server) createPort(w http.ResponseWriter, r *http.Request) error {
	body, err := readBody(r)
	if err != nil {
		return err
	}
	m, err := decodeObject(body)
	if err != nil {
		return err
	}
	p := &store.Port{UUID: uuid.NewString(), PXEEnabled: true, CreatedAt: time.Now().UTC()}
	if v, ok := m["uuid"].(string); ok {
		u, err := uuid.Parse(v)
		if err != nil {
			return badRequest("Invalid value for uuid: %q is not a UUID", v)
		}
		p.UUID = u.String()
	}
	if err := s.setPortFields(r, p, m); err != nil {
		return err
	}
	if err := s.st.CreatePort(r.Context(), p); err != nil {
		return portWriteError(p, err)
	}
	w.Header().Set("Location", s.baseURL(r)+"/v1/ports/"+p.UUID)
	writeJSON(w, http.StatusCreated, s.portView(r, p, nil))
	return nil
}

func (s *Server) patchPort(w http.ResponseWriter, r *http.Request) error {
	ops, err := readPatch(r)
	if err != nil {
		return err
	}
	p, err := s.loadPort(r)
	if err != nil {
		return err
	}
	all := map[string]any{"address": p.Address, "node_uuid": p.NodeUUID, "extra": orEmpty(p.Extra),
		"local_link_connection": orEmpty(p.LocalLinkConnection), "pxe_enabled": p.PXEEnabled,
		"portgroup_uuid": sp(p.PortgroupUUID), "physical_network": sp(p.PhysicalNetwork), "is_smartnic": p.IsSmartNIC,
		"internal_info": orEmpty(p.InternalInfo)}
	changed, err := patchChanges(all, ops)
	if err != nil {
		return err
	}
	if err := s.setPortFields(r, p, changed); err != nil {
		return err
	}
	now := time.Now().UTC()
	p.UpdatedAt = &now
	if err := s.st.UpdatePort(r.Context(), p); err != nil {
		return portWriteError(p, err)
	}
	writeJSON(w, http.StatusOK, s.portView(r, p, nil))
	return nil
}

func (s *Server) deletePort(w http.ResponseWriter, r *http.Request) error {
	p, err := s.loadPort(r)
	if err != nil {
		return err
	}
	if err := s.st.DeletePort(r.Context(), p.UUID); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
