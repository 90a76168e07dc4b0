package api

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strings"
	"time"

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

// portWrites are Ironic 21.4's PORT_SCHEMA, its validators and
// PATCH_ALLOWED_FIELDS.
var portWrites = &writes[store.Port]{
	body: "port",
	schema: schema{props: []prop{
		{name: "address", types: []string{"string"}, mac: true},
		{name: "extra", types: []string{"object", "null"}},
		{name: "is_smartnic", types: []string{"string", "boolean", "null"}, boolean: true},
		{name: "local_link_connection", types: []string{"null", "object"}},
		// a node name is taken too (anvil's extension, which the
		// README's "baremetal port create ... --node NAME" relies on)
		{name: "node_uuid", types: []string{"string"}},
		{name: "physical_network", types: []string{"string", "null"}, maxLen: 64},
		{name: "portgroup_uuid", types: []string{"string", "null"}, uuid: true},
		{name: "pxe_enabled", types: []string{"string", "boolean", "null"}, boolean: true},
		{name: "uuid", types: []string{"string", "null"}, uuid: true},
	}, required: []string{"address", "node_uuid"}},
	patchable: []string{"address", "extra", "is_smartnic", "local_link_connection", "node_uuid", "physical_network",
		"portgroup_uuid", "pxe_enabled"},
	doc: func(p *store.Port) map[string]any {
		return map[string]any{"uuid": p.UUID, "address": p.Address, "node_uuid": p.NodeUUID, "extra": orEmpty(p.Extra),
			"local_link_connection": orEmpty(p.LocalLinkConnection), "pxe_enabled": p.PXEEnabled,
			"portgroup_uuid": sp(p.PortgroupUUID), "physical_network": sp(p.PhysicalNetwork), "is_smartnic": p.IsSmartNIC}
	},
	fresh: func(id string) *store.Port {
		return &store.Port{UUID: id, PXEEnabled: true, CreatedAt: time.Now().UTC()}
	},
	apply: func(s *Server, r *http.Request, p *store.Port, doc map[string]any, changed func(string) bool, create bool) error {
		if changed("address") {
			p.Address, _ = normalizeMAC(str(doc, "address"))
		}
		node, err := s.changedNode(r, doc, changed, p.NodeUUID)
		if err != nil {
			return err
		}
		p.NodeUUID = node
		if changed("extra") {
			p.Extra = obj(doc, "extra")
		}
		if changed("local_link_connection") {
			p.LocalLinkConnection = obj(doc, "local_link_connection")
		}
		if changed("pxe_enabled") {
			p.PXEEnabled = boolOr(doc, "pxe_enabled", true)
		}
		if changed("is_smartnic") {
			p.IsSmartNIC = boolOr(doc, "is_smartnic", false)
		}
		if changed("portgroup_uuid") {
			p.PortgroupUUID = optStr(doc, "portgroup_uuid")
			if p.PortgroupUUID != nil {
				pg, err := s.st.GetPortgroup(r.Context(), *p.PortgroupUUID)
				if isNotFound(err) {
					return badRequest("Portgroup %s could not be found.", *p.PortgroupUUID)
				} else if err != nil {
					return err
				}
				p.PortgroupUUID = &pg.UUID
			}
		}
		if changed("physical_network") {
			p.PhysicalNetwork = optStr(doc, "physical_network")
		}
		return nil
	},
	create: func(ctx context.Context, st store.Store, p *store.Port) error { return st.CreatePort(ctx, p) },
	update: func(ctx context.Context, st store.Store, p *store.Port) error { return st.UpdatePort(ctx, p) },
	touch:  func(p *store.Port) { p.UpdatedAt = nowp() },
	writeErr: func(p *store.Port, err error) error {
		if errors.Is(err, store.ErrDuplicateAddr) {
			return conductor.Wrap(conductor.CodeConflict, err, "A port with MAC address %s already exists.", p.Address)
		}
		if errors.Is(err, store.ErrDuplicateUUID) {
			return conductor.Wrap(conductor.CodeConflict, err, "A port with UUID %s already exists.", p.UUID)
		}
		if errors.Is(err, store.ErrConflict) {
			// patchResource retries a lost race patchAttempts times; a
			// port still rewritten meanwhile is refused as a locked node is.
			return conductor.Wrap(conductor.CodeConflict, err, "Port %s was changed by another request, please retry.", p.UUID)
		}
		return err
	},
}

func nowp() *time.Time {
	now := time.Now().UTC()
	return &now
}

// ports is the port collection.
func (s *Server) ports() collection {
	return resourceCollection(s, portResource, nil, func(ctx context.Context, st store.Store, id string) error {
		return st.DeletePort(ctx, id)
	})
}
