package api

import (
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/google/uuid"

	"github.com/anvil-metal/anvil/controller/conductor"
	"github.com/anvil-metal/anvil/controller/store"
)

func jsonCopy(in any, out any) error {
	b, err := json.Marshal(in)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, out)
}

var portgroupFieldMin = map[string]int{"uuid": 23, "name": 23, "address": 23, "node_uuid": 23, "extra": 23,
	"mode": 26, "properties": 26, "standalone_ports_supported": 23, "created_at": 23, "updated_at": 23,
	"internal_info": 23}

func (s *Server) portgroupView(r *http.Request, p *store.Portgroup, fields []string) map[string]any {
	all := map[string]any{"uuid": p.UUID, "name": sp(p.Name), "address": sp(p.Address), "node_uuid": p.NodeUUID,
		"extra": orEmpty(p.Extra), "mode": sp(p.Mode), "properties": orEmpty(p.Properties),
		"standalone_ports_supported": p.StandalonePortsSupported, "created_at": fmtTime(p.CreatedAt), "updated_at": ts(p.UpdatedAt),
		"internal_info": orEmpty(p.InternalInfo)}
	return s.view(r, all, portgroupFieldMin, fields, "portgroups/"+p.UUID)
}

func (s *Server) listPortgroups(detail bool) handler {
	return func(w http.ResponseWriter, r *http.Request) error { return s.listPortgroupsFor(w, r, detail, "") }
}

func (s *Server) listNodePortgroups(w http.ResponseWriter, r *http.Request) error {
	n, err := s.loadNode(r)
	if err != nil {
		return err
	}
	return s.listPortgroupsFor(w, r, false, n.UUID)
}

func (s *Server) listPortgroupsFor(w http.ResponseWriter, r *http.Request, detail bool, nodeUUID string) error {
	return listResource(s, w, r, portgroupResource, detail, nodeUUID)
}

func portgroupWriteError(pg *store.Portgroup, err error) error {
	switch {
	case errors.Is(err, store.ErrDuplicateName):
		return conductor.Wrap(conductor.CodeConflict, err, "A portgroup with name %s already exists.", deref(pg.Name))
	case errors.Is(err, store.ErrDuplicateAddr):
		return conductor.Wrap(conductor.CodeConflict, err, "A portgroup with MAC address %s already exists.", deref(pg.Address))
	case errors.Is(err, store.ErrConflict):
		return conductor.Wrap(conductor.CodeConflict, err, "Portgroup %s was changed by another request, please retry.", pg.UUID)
	}
	return err
}

type portgroupBody struct {
	UUID                     *string        `json:"uuid"`
	Name                     *string        `json:"name"`
	Address                  *string        `json:"address"`
	NodeUUID                 string         `json:"node_uuid"`
	Mode                     *string        `json:"mode"`
	Properties               map[string]any `json:"properties"`
	StandalonePortsSupported *bool          `json:"standalone_ports_supported"`
	Extra                    map[string]any `json:"extra"`
}

func (s *Server) createPortgroup(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	if err := atLeast(ctx, 23); err != nil {
		return err
	}
	var b portgroupBody
	if err := decodeBody(r, &b); err != nil {
		return err
	}
	n, err := s.st.GetNode(ctx, b.NodeUUID)
	if errors.Is(err, store.ErrNotFound) {
		return badRequest("Node %s could not be found.", b.NodeUUID)
	} else if err != nil {
		return err
	}
	pg := &store.Portgroup{UUID: uuid.NewString(), Name: b.Name, NodeUUID: n.UUID, Mode: b.Mode, Properties: b.Properties,
		StandalonePortsSupported: true, Extra: b.Extra, CreatedAt: time.Now().UTC()}
	if b.UUID != nil {
		u, err := uuid.Parse(*b.UUID)
		if err != nil {
			return badRequest("Invalid value for uuid: %q is not a UUID", *b.UUID)
		}
		pg.UUID = u.String()
	}
	if b.Name != nil {
		if err := validName(*b.Name); err != nil {
			return err
		}
	}
	if b.Address != nil {
		mac, err := normalizeMAC(*b.Address)
		if err != nil {
			return err
		}
		pg.Address = &mac
	}
	if b.StandalonePortsSupported != nil {
		pg.StandalonePortsSupported = *b.StandalonePortsSupported
	}
	if err := s.st.CreatePortgroup(ctx, pg); err != nil {
		return portgroupWriteError(pg, err)
	}
	w.Header().Set("Location", s.baseURL(r)+"/v1/portgroups/"+pg.UUID)
	writeJSON(w, http.StatusCreated, s.portgroupView(r, pg, nil))
	return nil
}

func (s *Server) loadPortgroup(r *http.Request) (*store.Portgroup, error) {
	return loadResource(s, r, portgroupResource)
}

func (s *Server) getPortgroup(w http.ResponseWriter, r *http.Request) error {
	pg, err := s.loadPortgroup(r)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, s.portgroupView(r, pg, nil))
	return nil
}

func (s *Server) deletePortgroup(w http.ResponseWriter, r *http.Request) error {
	pg, err := s.loadPortgroup(r)
	if err != nil {
		return err
	}
	ports, err := s.st.ListPorts(r.Context(), store.ResourceFilter{NodeUUID: &pg.NodeUUID}, store.Page{})
	if err != nil {
		return err
	}
	for _, p := range ports {
		if p.PortgroupUUID != nil && *p.PortgroupUUID == pg.UUID {
			return conductor.Conflict("Portgroup %s still has ports (%s); remove them from it first.", pg.UUID, p.UUID)
		}
	}
	if err := s.st.DeletePortgroup(r.Context(), pg.UUID); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// patchPortgroup applies a JSON patch to the writable portgroup fields.
func (s *Server) patchPortgroup(w http.ResponseWriter, r *http.Request) error {
	ops, err := readPatch(r)
	if err != nil {
		return err
	}
	pg, err := s.loadPortgroup(r)
	if err != nil {
		return err
	}
	cur := map[string]any{"name": sp(pg.Name), "address": sp(pg.Address), "node_uuid": pg.NodeUUID,
		"mode": sp(pg.Mode), "properties": orEmpty(pg.Properties), "extra": orEmpty(pg.Extra),
		"standalone_ports_supported": pg.StandalonePortsSupported}
	changed, err := patchChanges(cur, ops)
	if err != nil {
		return err
	}
	for _, k := range sortedKeys(changed) {
		v := changed[k]
		switch k {
		case "name":
			if pg.Name, err = asOptString(k, v, 255); err == nil && pg.Name != nil {
				err = validName(*pg.Name)
			}
		case "address":
			var a *string
			if a, err = asOptString(k, v, 17); err == nil && a != nil {
				var mac string
				if mac, err = normalizeMAC(*a); err == nil {
					a = &mac
				}
			}
			pg.Address = a
		case "node_uuid":
			id, _ := v.(string)
			n, gerr := s.st.GetNode(r.Context(), id)
			if gerr != nil {
				return badRequest("Node %s could not be found.", id)
			}
			pg.NodeUUID = n.UUID
		case "mode":
			pg.Mode, err = asOptString(k, v, 255)
		case "properties":
			pg.Properties, err = asObject(k, v)
		case "extra":
			pg.Extra, err = asObject(k, v)
		case "standalone_ports_supported":
			pg.StandalonePortsSupported, err = asBool(k, v)
		}
		if err != nil {
			return err
		}
	}
	now := time.Now().UTC()
	pg.UpdatedAt = &now
	if err := s.st.UpdatePortgroup(r.Context(), pg); err != nil {
		return portgroupWriteError(pg, err)
	}
	writeJSON(w, http.StatusOK, s.portgroupView(r, pg, nil))
	return nil
}
