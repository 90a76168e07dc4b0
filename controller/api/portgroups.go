package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/gorilla/mux"

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
	"internal_info": 23, "physical_network": portgroupPhysnetVersion, "category": portgroupCategoryVersion}

func (s *Server) portgroupView(r *http.Request, p *store.Portgroup, fields []string) map[string]any {
	all := map[string]any{"uuid": p.UUID, "name": sp(p.Name), "address": sp(p.Address), "node_uuid": p.NodeUUID,
		"extra": orEmpty(p.Extra), "mode": sp(p.Mode), "properties": orEmpty(p.Properties),
		"standalone_ports_supported": p.StandalonePortsSupported, "created_at": fmtTime(p.CreatedAt), "updated_at": ts(p.UpdatedAt),
		"internal_info": orEmpty(p.InternalInfo), "physical_network": sp(p.PhysicalNetwork), "category": sp(p.Category)}
	return s.view(r, all, portgroupFieldMin, fields, "portgroups/"+p.UUID)
}

// portgroupWrites are Ironic's PORTGROUP_SCHEMA (to 1.110), its
// validators and PATCH_ALLOWED_FIELDS; a name must be a logical name.
var portgroupWrites = &writes[store.Portgroup]{
	body: "portgroup",
	schema: schema{props: []prop{
		{name: "address", types: []string{"string", "null"}, mac: true},
		{name: "category", types: []string{"string", "null"}, maxLen: 80},
		{name: "extra", types: []string{"object", "null"}},
		{name: "mode", types: []string{"string", "null"}},
		{name: "name", types: []string{"string", "null"}},
		{name: "node_uuid", types: []string{"string"}}, // or a node name, as for ports
		{name: "physical_network", types: []string{"string", "null"}, maxLen: 64},
		{name: "properties", types: []string{"object", "null"}},
		{name: "standalone_ports_supported", types: []string{"string", "boolean", "null"}, boolean: true},
		{name: "uuid", types: []string{"string", "null"}, uuid: true},
	}, required: []string{"node_uuid"}},
	patchable: []string{"address", "extra", "mode", "name", "node_uuid", "properties", "standalone_ports_supported",
		"physical_network", "category"},
	doc: func(pg *store.Portgroup) map[string]any {
		return map[string]any{"uuid": pg.UUID, "name": sp(pg.Name), "address": sp(pg.Address), "node_uuid": pg.NodeUUID,
			"mode": sp(pg.Mode), "properties": orEmpty(pg.Properties), "extra": orEmpty(pg.Extra),
			"standalone_ports_supported": pg.StandalonePortsSupported, "physical_network": sp(pg.PhysicalNetwork),
			"category": sp(pg.Category)}
	},
	// a group's new physical network is its ports' too, as Ironic's
	// update_portgroup_physical_network makes it
	afterPatch: func(s *Server, r *http.Request, pg *store.Portgroup, changed func(string) bool) error {
		if !changed("physical_network") {
			return nil
		}
		return s.setPortsPhysnet(r.Context(), pg)
	},
	fresh: func(id string) *store.Portgroup {
		return &store.Portgroup{UUID: id, StandalonePortsSupported: true, CreatedAt: time.Now().UTC()}
	},
	apply: func(s *Server, r *http.Request, pg *store.Portgroup, doc map[string]any, changed func(string) bool, create bool) error {
		if changed("name") {
			if name := optStr(doc, "name"); name != nil && *name != "" && validName(*name) != nil {
				if create {
					return badRequest("Cannot create portgroup with invalid name '%s'", *name)
				}
				return badRequest("Portgroup %s: Cannot change name to invalid name '%s'", mux.Vars(r)["pg"], *name)
			}
			pg.Name = optStr(doc, "name")
		}
		if changed("address") {
			pg.Address = nil
			if a := optStr(doc, "address"); a != nil {
				mac, _ := normalizeMAC(*a)
				pg.Address = &mac
			}
		}
		node, err := s.changedNode(r, doc, changed, pg.NodeUUID)
		if err != nil {
			return err
		}
		pg.NodeUUID = node
		if changed("mode") {
			pg.Mode = optStr(doc, "mode")
		}
		if changed("properties") {
			pg.Properties = obj(doc, "properties")
		}
		if changed("extra") {
			pg.Extra = obj(doc, "extra")
		}
		if changed("standalone_ports_supported") {
			pg.StandalonePortsSupported = boolOr(doc, "standalone_ports_supported", true)
		}
		if changed("physical_network") {
			pg.PhysicalNetwork = optStr(doc, "physical_network")
		}
		if changed("category") {
			pg.Category = optStr(doc, "category")
		}
		return nil
	},
	create: func(ctx context.Context, st store.Store, pg *store.Portgroup) error {
		return st.CreatePortgroup(ctx, pg)
	},
	update: func(ctx context.Context, st store.Store, pg *store.Portgroup) error {
		return st.UpdatePortgroup(ctx, pg)
	},
	touch: func(pg *store.Portgroup) { pg.UpdatedAt = nowp() },
	writeErr: func(pg *store.Portgroup, err error) error {
		switch {
		case errors.Is(err, store.ErrDuplicateName):
			return conductor.Wrap(conductor.CodeConflict, err, "A portgroup with name %s already exists.", deref(pg.Name))
		case errors.Is(err, store.ErrDuplicateAddr):
			return conductor.Wrap(conductor.CodeConflict, err, "A portgroup with MAC address %s already exists.", deref(pg.Address))
		case errors.Is(err, store.ErrDuplicateUUID):
			return conductor.Wrap(conductor.CodeConflict, err, "A portgroup with UUID %s already exists.", pg.UUID)
		case errors.Is(err, store.ErrConflict):
			return conductor.Wrap(conductor.CodeConflict, err, "Portgroup %s was changed by another request, please retry.", pg.UUID)
		}
		return err
	},
}

// setPortsPhysnet gives the ports of pg its physical network, each
// written at the revision read (re-read if a write raced it).
func (s *Server) setPortsPhysnet(ctx context.Context, pg *store.Portgroup) error {
	ports, err := s.st.ListPorts(ctx, store.ResourceFilter{NodeUUID: &pg.NodeUUID}, store.Page{})
	if err != nil {
		return err
	}
	for _, p := range ports {
		for attempt := 1; p.PortgroupUUID != nil && *p.PortgroupUUID == pg.UUID && deref(p.PhysicalNetwork) != deref(pg.PhysicalNetwork); attempt++ {
			p.PhysicalNetwork = pg.PhysicalNetwork
			p.UpdatedAt = nowp()
			err := s.st.UpdatePort(ctx, p)
			if !errors.Is(err, store.ErrConflict) || attempt == patchAttempts {
				if err != nil {
					return fmt.Errorf("port %s of port group %s: %w", p.UUID, pg.UUID, err)
				}
				break
			}
			if p, err = s.st.GetPort(ctx, p.UUID); err != nil {
				return err
			}
		}
	}
	return nil
}

// portgroupFilters reads a port group list's shard (1.106) and
// conductor_groups (1.99) filters; node, address, shard and conductor
// groups filter one at a time, as Ironic's do.
func portgroupFilters(ctx context.Context, _ store.Store, q query, f *store.ResourceFilter) error {
	f.Shards, f.ConductorGroups = q.stringList("shard"), q.stringList("conductor_groups")
	if err := minVersionFilter(ctx, f.Shards != nil, portgroupShardVersion); err != nil {
		return err
	}
	if err := minVersionFilter(ctx, f.ConductorGroups != nil, conductorGroupsFilterVersion); err != nil {
		return err
	}
	n := 0
	for _, given := range []bool{f.NodeUUID != nil, f.Address != nil, len(f.Shards) > 0, len(f.ConductorGroups) > 0} {
		if given {
			n++
		}
	}
	if n > 1 {
		return badRequest("Filtering by node, address, or shard simultaneously is not supported.")
	}
	return nil
}

// portgroups is the port group collection; a delete is refused while
// ports are in the group, as Ironic does.
func (s *Server) portgroups() collection {
	return resourceCollection(s, portgroupResource, func(r *http.Request, pg *store.Portgroup) error {
		ports, err := s.st.ListPorts(r.Context(), store.ResourceFilter{NodeUUID: &pg.NodeUUID}, store.Page{})
		if err != nil {
			return err
		}
		for _, p := range ports {
			if p.PortgroupUUID != nil && *p.PortgroupUUID == pg.UUID {
				return badRequest("Cannot complete the requested action because portgroup %s contains ports.", pg.UUID)
			}
		}
		return nil
	}, func(ctx context.Context, st store.Store, id string) error { return st.DeletePortgroup(ctx, id) })
}
