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
	"physical_network": 34, "is_smartnic": 53, "name": portNameVersion, "internal_info": 18,
	"description": portDescriptionVersion, "vendor": portVendorVersion, "category": portCategoryVersion}

// ovnVTEPKeys are the local_link_connection keys of an OVN VTEP switch
// (Ironic's LOCAL_LINK_OVN_90_FIELDS), which only 1.90 to 1.104 know.
var ovnVTEPKeys = []string{"vtep-logical-switch", "vtep-physical-switch"}

// ovnVTEPAllowed is Ironic's allow_ovn_vtep_version.
func ovnVTEPAllowed(ctx context.Context) bool {
	v := version(ctx)
	return v >= ovnVTEPVersion && v < ovnVTEPRemovedVersion
}

func hasOVNVTEP(llc map[string]any) bool {
	for _, k := range ovnVTEPKeys {
		if _, ok := llc[k]; ok {
			return true
		}
	}
	return false
}

func (s *Server) portView(r *http.Request, p *store.Port, fields []string) map[string]any {
	llc := orEmpty(p.LocalLinkConnection)
	if hasOVNVTEP(llc) && !ovnVTEPAllowed(r.Context()) {
		// Ironic's hide_fields_in_newer_versions: a version that does not
		// know VTEP connections sees the connection empty, not absent
		llc = map[string]any{}
	}
	all := map[string]any{"uuid": p.UUID, "address": p.Address, "node_uuid": p.NodeUUID, "extra": orEmpty(p.Extra),
		"created_at": fmtTime(p.CreatedAt), "updated_at": ts(p.UpdatedAt),
		"local_link_connection": llc, "pxe_enabled": p.PXEEnabled,
		"portgroup_uuid": sp(p.PortgroupUUID), "physical_network": sp(p.PhysicalNetwork), "is_smartnic": p.IsSmartNIC,
		"internal_info": orEmpty(p.InternalInfo), "name": sp(p.Name), "description": sp(p.Description),
		"vendor": sp(p.Vendor), "category": sp(p.Category)}
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

// portWrites are Ironic's PORT_SCHEMA (to 1.110), its validators and
// PATCH_ALLOWED_FIELDS, in Ironic's order.
var portWrites = &writes[store.Port]{
	body: "port",
	schema: schema{props: []prop{
		{name: "address", types: []string{"string"}, mac: true},
		{name: "category", types: []string{"string", "null"}, maxLen: 80},
		{name: "description", types: []string{"string", "null"}, maxLen: 255},
		{name: "extra", types: []string{"object", "null"}},
		{name: "is_smartnic", types: []string{"string", "boolean", "null"}, boolean: true},
		{name: "local_link_connection", types: []string{"null", "object"}},
		// Ironic checks no characters in a port's name; its column holds 255
		{name: "name", types: []string{"string", "null"}, maxLen: 255},
		// the node by UUID or name (1.94)
		{name: "node_ident", types: []string{"string"}},
		// a node name is taken too (anvil's extension, which the
		// README's "baremetal port create ... --node NAME" relies on)
		{name: "node_uuid", types: []string{"string"}},
		{name: "physical_network", types: []string{"string", "null"}, maxLen: 64},
		{name: "portgroup_uuid", types: []string{"string", "null"}, uuid: true},
		{name: "pxe_enabled", types: []string{"string", "boolean", "null"}, boolean: true},
		{name: "uuid", types: []string{"string", "null"}, uuid: true},
		{name: "vendor", types: []string{"string", "null"}, maxLen: 32},
	}, required: []string{"address"}, oneOf: [][]string{{"node_ident"}, {"node_uuid"}}},
	patchable: []string{"address", "extra", "is_smartnic", "local_link_connection", "node_ident", "node_uuid",
		"physical_network", "portgroup_uuid", "pxe_enabled", "name", "description", "vendor", "category"},
	createCheck: func(ctx context.Context, doc map[string]any) error {
		// node_ident is no field of a port (fields= does not know it):
		// create takes it for node_uuid from 1.94
		if _, ok := doc["node_ident"]; ok && version(ctx) < portNodeIdentVersion {
			return notAcceptable()
		}
		// Ironic's _check_allowed_port_fields on the created port: VTEP
		// keys outside 1.90..1.104 are refused (a PATCH is not checked)
		if llc, ok := doc["local_link_connection"].(map[string]any); ok && hasOVNVTEP(llc) && !ovnVTEPAllowed(ctx) {
			return notAcceptable()
		}
		return nil
	},
	doc: func(p *store.Port) map[string]any {
		return map[string]any{"uuid": p.UUID, "address": p.Address, "node_uuid": p.NodeUUID, "extra": orEmpty(p.Extra),
			"local_link_connection": orEmpty(p.LocalLinkConnection), "pxe_enabled": p.PXEEnabled,
			"portgroup_uuid": sp(p.PortgroupUUID), "physical_network": sp(p.PhysicalNetwork), "is_smartnic": p.IsSmartNIC,
			"name": sp(p.Name), "description": sp(p.Description), "vendor": sp(p.Vendor), "category": sp(p.Category)}
	},
	fresh: func(id string) *store.Port {
		return &store.Port{UUID: id, PXEEnabled: true, CreatedAt: time.Now().UTC()}
	},
	apply: func(s *Server, r *http.Request, p *store.Port, doc map[string]any, changed func(string) bool, create bool) error {
		if changed("address") {
			p.Address, _ = normalizeMAC(str(doc, "address"))
		}
		if changed("node_ident") {
			given := changed
			doc["node_uuid"], changed = doc["node_ident"], func(k string) bool { return k == "node_uuid" || given(k) }
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
		if changed("name") {
			p.Name = optStr(doc, "name")
		}
		if changed("description") {
			p.Description = optStr(doc, "description")
		}
		if changed("vendor") {
			p.Vendor = optStr(doc, "vendor")
		}
		if changed("category") {
			p.Category = optStr(doc, "category")
		}
		if !create && changed("physical_network") && p.PortgroupUUID != nil && version(r.Context()) >= portgroupPhysnetVersion {
			// from 1.102 the group's physical network is its ports'
			return badRequest("physical_network cannot be changed while the port belongs to a portgroup.")
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
		if errors.Is(err, store.ErrDuplicateName) {
			// Ironic's PortDuplicateName (its create reports the UUID
			// instead, a slip this does not copy)
			return conductor.Wrap(conductor.CodeConflict, err, "A port with name %s already exists.", deref(p.Name))
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

// checkPortIdent is Ironic's validation of the port a route names: GET
// and PATCH take a UUID or a logical name (ports have names from 1.88,
// found by name at any version, as Ironic's Port.get does); DELETE only
// a UUID.
func checkPortIdent(method, ident string) error {
	if method == http.MethodDelete {
		if !isUUIDLike(ident) {
			return badRequest("Expected UUID for port_uuid: %s", ident)
		}
		return nil
	}
	if !isUUIDLike(ident) && !isLogicalName(ident) {
		return badRequest("Expected UUID or name for port_ident: %s", ident)
	}
	return nil
}

// isLogicalName is Ironic's utils.is_valid_logical_name: 1 to 255 of
// RFC 3986's unreserved characters.
func isLogicalName(s string) bool { return len(s) <= 255 && nameRE.MatchString(s) }

// minVersionFilter refuses a list filter below its microversion in the
// words of Ironic's check_allow_filter_by_shard.
func minVersionFilter(ctx context.Context, given bool, minor int) error {
	if given && version(ctx) < minor {
		return errf(http.StatusNotAcceptable, "Request not acceptable. The minimal required API version should be 1.%d", minor)
	}
	return nil
}

// portFilters reads a port list's portgroup (1.24), shard (1.82) and
// conductor_groups (1.99) filters: by shard, node or port group only one at a time
// (Ironic's OperationNotPermitted), and conductor groups with none of
// node, port group or address.
func portFilters(ctx context.Context, st store.Store, q query, f *store.ResourceFilter) error {
	f.Shards, f.ConductorGroups = q.stringList("shard"), q.stringList("conductor_groups")
	if err := minVersionFilter(ctx, f.Shards != nil, 82); err != nil {
		return err
	}
	if err := minVersionFilter(ctx, f.ConductorGroups != nil, conductorGroupsFilterVersion); err != nil {
		return err
	}
	if err := minVersionFilter(ctx, q.has("description_contains"), portDescriptionVersion); err != nil {
		return err
	}
	pg := q.str("portgroup") != nil && *q.str("portgroup") != ""
	if pg {
		// 1.24, by the group's UUID or name, as Ironic's get_rpc_portgroup
		if err := atLeast(ctx, 24); err != nil {
			return err
		}
		ident := *q.str("portgroup")
		if !isUUIDLike(ident) && !isLogicalName(ident) {
			return badRequest("Expected UUID or name for portgroup: %s", ident)
		}
		g, err := portgroupResource.get(ctx, st, ident)
		if isNotFound(err) {
			return notFound("Portgroup", ident)
		} else if err != nil {
			return err
		}
		f.PortgroupUUID = &g.UUID
	}
	n := 0
	for _, given := range []bool{f.NodeUUID != nil, pg, len(f.Shards) > 0} {
		if given {
			n++
		}
	}
	if n > 1 {
		return errf(http.StatusForbidden, "Operation not permitted.")
	}
	if len(f.ConductorGroups) > 0 && (f.NodeUUID != nil || pg || f.Address != nil) {
		return badRequest("Filtering by conductor_groups cannot be combined with node_ident, portgroup_ident, or node address filters.")
	}
	return nil
}

// keepPort keeps the ports whose description contains ?description_contains=.
func keepPort(q query, p *store.Port) bool {
	d := q.str("description_contains")
	return d == nil || *d == "" || (p.Description != nil && strings.Contains(*p.Description, *d))
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
