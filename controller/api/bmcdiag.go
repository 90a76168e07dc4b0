package api

import (
	"net/http"
)

// injectNMIVersion is the API version that added inject_nmi (1.29).
const injectNMIVersion = 29

// PUT /v1/nodes/{node}/management/inject_nmi (Ironic, API 1.29): the
// node's BMC sends it a non-maskable interrupt now. 204 once the BMC
// accepted it; NodeLocked while a flow holds the node; 400
// UnsupportedDriverExtension for drivers without it (fake-hardware, as
// Ironic's fake management). Ironic takes no body (the api-ref shows
// "{}"): one is read, bounded, and ignored.
func (s *Server) injectNMI(w http.ResponseWriter, r *http.Request) error {
	if version(r.Context()) < injectNMIVersion {
		return &notFoundKey{msg: "Resource could not be found."}
	}
	if _, err := readBody(r); err != nil {
		return err
	}
	n, err := s.loadNode(r)
	if err != nil {
		return err
	}
	if err := s.cond.InjectNMI(r.Context(), n.UUID); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// GET /v1/nodes/{node}/sel (an anvil extension): the System Event Log
// read live from the node's BMC, oldest first, at most the newest 1000:
// {"node_uuid": ..., "entries": [{"id", "created", "sensor", "message"}]}.
// created is the BMC's own time text (BMC clocks and formats vary).
func (s *Server) getSEL(w http.ResponseWriter, r *http.Request) error {
	if _, err := parseQuery(r); err != nil {
		return err
	}
	n, err := s.loadNode(r)
	if err != nil {
		return err
	}
	entries, err := s.cond.SystemEventLog(r.Context(), n.UUID)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"node_uuid": n.UUID, "entries": entries})
	return nil
}
