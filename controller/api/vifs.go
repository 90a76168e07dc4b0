package api

import (
	"net/http"

	"github.com/google/uuid"
	"github.com/gorilla/mux"

	"github.com/anvil-metal/anvil/controller/conductor"
	"github.com/anvil-metal/anvil/controller/store"
)

// vifNode is the node of a VIF request; the VIF routes appeared in 1.28.
func (s *Server) vifNode(r *http.Request) (*store.Node, error) {
	if err := since(r.Context(), 28); err != nil {
		return nil, err
	}
	return s.loadNode(r)
}

// uuidOrName is Ironic's args.uuid_or_name check.
func uuidOrName(what, v string) error {
	if _, err := uuid.Parse(v); err == nil && len(v) == 36 {
		return nil
	}
	if v == "" || len(v) > 255 || !nameRE.MatchString(v) {
		return badRequest("Expected UUID or name for %s: %s", what, v)
	}
	return nil
}

// decodeVIF parses a VIF attach body (Ironic's VIF_VALIDATOR: an object
// with a string id naming the VIF, more keys allowed; port_uuid or
// portgroup_uuid, not both, name where to attach it).
func decodeVIF(body []byte) (string, conductor.VIFTarget, error) {
	var to conductor.VIFTarget
	m, err := decodeObject(body)
	if err != nil {
		return "", to, err
	}
	raw, ok := m["id"]
	if !ok {
		return "", to, badRequest("Schema error for vif: 'id' is a required property")
	}
	id, ok := raw.(string)
	if !ok {
		return "", to, badRequest("Schema error for vif: %s is not of type 'string'", pyValue(raw))
	}
	if err := uuidOrName("id", id); err != nil {
		return "", to, err
	}
	_, hasPort := m["port_uuid"]
	_, hasGroup := m["portgroup_uuid"]
	if hasPort && hasGroup {
		return "", to, badRequest("Cannot specify both port_uuid and portgroup_uuid")
	}
	to.PortUUID, _ = m["port_uuid"].(string)
	to.PortgroupUUID, _ = m["portgroup_uuid"].(string)
	return id, to, nil
}

func (s *Server) listVIFs(w http.ResponseWriter, r *http.Request) error {
	n, err := s.vifNode(r)
	if err != nil {
		return err
	}
	ids, err := s.cond.ListVIFs(r.Context(), n.UUID)
	if err != nil {
		return err
	}
	out := make([]map[string]any, len(ids))
	for i, id := range ids {
		out[i] = map[string]any{"id": id}
	}
	writeJSON(w, http.StatusOK, map[string]any{"vifs": out})
	return nil
}

func (s *Server) attachVIF(w http.ResponseWriter, r *http.Request) error {
	n, err := s.vifNode(r)
	if err != nil {
		return err
	}
	body, err := readBody(r)
	if err != nil {
		return err
	}
	id, to, err := decodeVIF(body)
	if err != nil {
		return err
	}
	if err := s.cond.AttachVIF(r.Context(), n, id, to); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *Server) detachVIF(w http.ResponseWriter, r *http.Request) error {
	n, err := s.vifNode(r)
	if err != nil {
		return err
	}
	id := mux.Vars(r)["vif"]
	if err := uuidOrName("vif_id", id); err != nil {
		return err
	}
	if err := s.cond.DetachVIF(r.Context(), n, id); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
