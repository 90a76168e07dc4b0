package api

// BIOS settings (GET /v1/nodes/{node}/bios and .../bios/{setting}, 1.40;
// the attribute registry, ?detail and ?fields from 1.74) and firmware
// components (GET /v1/nodes/{node}/firmware, 1.86): the store's cache of
// what a node's BMC last reported, in the shapes of Ironic's
// api/controllers/v1/bios.py and firmware.py. Both are read-only; they
// change through steps (bios.apply_configuration, firmware.update).

import (
	"net/http"
	"net/url"

	"github.com/gorilla/mux"

	"github.com/anvil-metal/anvil/controller/conductor"
	"github.com/anvil-metal/anvil/controller/store"
)

// The microversions of the BIOS and firmware resources.
const (
	biosVersion         = 40 // the bios interface and /bios
	biosRegistryVersion = 74 // registry fields, ?detail and ?fields
	firmwareVersion     = 86 // the firmware interface and /firmware
)

// firmwareInterface is the node's firmware interface. Nodes created before
// anvil knew it (1.86) have none stored and show their hardware type's
// default, as Ironic's conductor gives a node's unset interfaces theirs.
func firmwareInterface(n *store.Node) string {
	if n.Interfaces.Firmware != "" {
		return n.Interfaces.Firmware
	}
	return conductor.DefaultFirmwareInterface(n.Driver)
}

// biosFields are what a setting shows besides created_at, updated_at and
// links, which Ironic's object_to_dict always adds: name and value, and
// from 1.74 (the whole list) the registry's fields.
var biosFields = []string{"name", "value", "attribute_type", "allowable_values", "lower_bound", "max_length",
	"min_length", "read_only", "reset_required", "unique", "upper_bound"}

// biosFieldMin are the fields ?fields may name; all came with ?fields.
var biosFieldMin = func() map[string]int {
	m := map[string]int{"created_at": biosRegistryVersion, "updated_at": biosRegistryVersion, "links": biosRegistryVersion}
	for _, f := range biosFields {
		m[f] = biosRegistryVersion
	}
	return m
}()

// biosView is one setting: fields of it, with its times and links, which
// are at nodes/<nodeIdent>/bios/<name> (Ironic links a list's settings
// under the node as the request named it, a single one under its UUID).
func biosView(base, nodeIdent string, b *store.BIOSSetting, fields []string) map[string]any {
	out := map[string]any{"created_at": fmtTime(b.CreatedAt), "updated_at": ts(b.UpdatedAt),
		"links": linksAt(base, "nodes/"+nodeIdent+"/bios/"+url.PathEscape(b.Name))}
	for _, f := range fields {
		switch f {
		case "name":
			out[f] = b.Name
		case "value":
			out[f] = b.Value
			if b.Value == "" && b.AttributeType == "Password" {
				out[f] = nil // Redfish reads passwords as null, and Ironic keeps the null
			}
		case "attribute_type":
			out[f] = nil
			if b.AttributeType != "" {
				out[f] = b.AttributeType
			}
		case "allowable_values":
			// a list field: Ironic shows none as []
			out[f] = b.AllowableValues
			if b.AllowableValues == nil {
				out[f] = []string{}
			}
		case "lower_bound":
			out[f] = b.LowerBound
		case "upper_bound":
			out[f] = b.UpperBound
		case "min_length":
			out[f] = b.MinLength
		case "max_length":
			out[f] = b.MaxLength
		case "read_only":
			out[f] = b.ReadOnly
		case "reset_required":
			out[f] = b.ResetRequired
		case "unique":
			out[f] = b.Unique
		}
	}
	return out
}

// biosListFields works out what a list shows as Ironic's
// get_request_return_fields does with allow_query_bios: ?detail and
// ?fields are refused below 1.74, and together.
func biosListFields(r *http.Request, q query, detail *bool) ([]string, error) {
	ctx := r.Context()
	if detail != nil && version(ctx) < biosRegistryVersion {
		return nil, badRequest("Invalid query parameter ?detail=%s received.", q.v.Get("detail"))
	}
	if q.has("fields") && version(ctx) < biosRegistryVersion {
		return nil, badRequest("Invalid query parameter ?fields=%s received.", q.v.Get("fields"))
	}
	all := detail != nil && *detail
	fields := fieldsArg(q)
	if q.has("fields") && all {
		return nil, badRequest("Can not specify ?detail=True and fields in the same request.")
	}
	if err := checkFields(ctx, fields, biosFieldMin); err != nil {
		return nil, err
	}
	switch {
	case all:
		return biosFields, nil
	case fields != nil:
		return fields, nil
	}
	return biosFields[:2], nil
}

// nodeListQuery does what both of a node's BIOS and firmware lists check
// first, in Ironic's order: the version, the query's arguments (detail,
// fields) and its boolean, then the node.
func (s *Server) nodeListQuery(r *http.Request, minor int) (query, *bool, *store.Node, error) {
	if err := since(r.Context(), minor); err != nil {
		return query{}, nil, nil, err
	}
	q, err := parseQuery(r, "detail", "fields")
	if err != nil {
		return query{}, nil, nil, err
	}
	detail, err := q.boolean("detail")
	if err != nil {
		return query{}, nil, nil, err
	}
	n, err := s.loadNode(r)
	if err != nil {
		return query{}, nil, nil, err
	}
	return q, detail, n, nil
}

// GET /v1/nodes/{node}/bios
func (s *Server) listBIOS(w http.ResponseWriter, r *http.Request) error {
	q, detail, n, err := s.nodeListQuery(r, biosVersion)
	if err != nil {
		return err
	}
	fields, err := biosListFields(r, q, detail)
	if err != nil {
		return err
	}
	settings, err := s.st.ListBIOSSettings(r.Context(), n.UUID)
	if err != nil {
		return err
	}
	base, ident := baseFromContext(r, s), mux.Vars(r)["node"]
	out := make([]map[string]any, 0, len(settings))
	for i := range settings {
		out = append(out, biosView(base, ident, &settings[i], fields))
	}
	writeJSON(w, http.StatusOK, map[string]any{"bios": out})
	return nil
}

// GET /v1/nodes/{node}/bios/{setting}: {"<name>": setting}, with the
// registry's fields from 1.74.
func (s *Server) getBIOSSetting(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	if err := since(ctx, biosVersion); err != nil {
		return err
	}
	if _, err := parseQuery(r); err != nil {
		return err
	}
	name := mux.Vars(r)["setting"]
	if len(name) > 255 || !nameRE.MatchString(name) {
		return badRequest("Expected name for setting_name: %s", name)
	}
	n, err := s.loadNode(r)
	if err != nil {
		return err
	}
	b, err := s.st.GetBIOSSetting(ctx, n.UUID, name)
	if isNotFound(err) {
		return &notFoundKey{msg: "Node " + n.UUID + " doesn't have a BIOS setting '" + name + "'"}
	}
	if err != nil {
		return err
	}
	fields := biosFields[:2]
	if version(ctx) >= biosRegistryVersion {
		fields = biosFields
	}
	writeJSON(w, http.StatusOK, map[string]any{name: biosView(baseFromContext(r, s), n.UUID, b, fields)})
	return nil
}

// firmwareFields are a component's fields besides created_at and
// updated_at, which Ironic always shows; components have no links.
var firmwareFields = []string{"component", "initial_version", "current_version", "last_version_flashed"}

var firmwareFieldMin = map[string]int{"component": firmwareVersion, "initial_version": firmwareVersion,
	"current_version": firmwareVersion, "last_version_flashed": firmwareVersion,
	"created_at": firmwareVersion, "updated_at": firmwareVersion}

func firmwareView(c *store.FirmwareComponent, fields []string) map[string]any {
	out := map[string]any{"created_at": fmtTime(c.CreatedAt), "updated_at": ts(c.UpdatedAt)}
	for _, f := range fields {
		switch f {
		case "component":
			out[f] = c.Component
		case "initial_version":
			out[f] = c.InitialVersion
		case "current_version":
			out[f] = c.CurrentVersion
		case "last_version_flashed":
			out[f] = sp(c.LastVersionFlashed)
		}
	}
	return out
}

// GET /v1/nodes/{node}/firmware (1.86).
func (s *Server) listFirmware(w http.ResponseWriter, r *http.Request) error {
	q, detail, n, err := s.nodeListQuery(r, firmwareVersion)
	if err != nil {
		return err
	}
	fields := fieldsArg(q)
	if q.has("fields") && detail != nil && *detail {
		return badRequest("Can not specify ?detail=True and fields in the same request.")
	}
	if err := checkFields(r.Context(), fields, firmwareFieldMin); err != nil {
		return err
	}
	if fields == nil {
		fields = firmwareFields
	}
	comps, err := s.st.ListFirmwareComponents(r.Context(), n.UUID)
	if err != nil {
		return err
	}
	out := make([]map[string]any, 0, len(comps))
	for i := range comps {
		out = append(out, firmwareView(&comps[i], fields))
	}
	writeJSON(w, http.StatusOK, map[string]any{"firmware": out})
	return nil
}
