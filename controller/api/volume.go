package api

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/gorilla/mux"

	"github.com/anvil-metal/anvil/controller/conductor"
	"github.com/anvil-metal/anvil/controller/store"
)

// Volume connectors and targets (1.32+), as in Ironic 21.4
// (api/controllers/v1/volume*.py): records of how a node reaches remote
// volumes. anvil keeps them and checks them as Ironic does, but does not
// boot from a volume: a node's validation says so while it has targets.

const volumeVersion = 32

// connectorTypes are the connector types Ironic documents. (Ironic 21.4
// itself stores any string; a type outside these cannot be used by any of
// its storage interfaces.)
var connectorTypes = []string{"iqn", "ip", "mac", "wwnn", "wwpn", "port", "portgroup"}

var connectorFieldMin = map[string]int{"uuid": volumeVersion, "node_uuid": volumeVersion, "type": volumeVersion,
	"connector_id": volumeVersion, "extra": volumeVersion, "created_at": volumeVersion, "updated_at": volumeVersion,
	"links": volumeVersion}

var targetFieldMin = map[string]int{"uuid": volumeVersion, "node_uuid": volumeVersion, "volume_type": volumeVersion,
	"properties": volumeVersion, "boot_index": volumeVersion, "volume_id": volumeVersion, "extra": volumeVersion,
	"created_at": volumeVersion, "updated_at": volumeVersion, "links": volumeVersion}

func (s *Server) connectorView(r *http.Request, c *store.VolumeConnector, fields []string) map[string]any {
	all := map[string]any{"uuid": c.UUID, "node_uuid": c.NodeUUID, "type": c.Type, "connector_id": c.ConnectorID,
		"extra": orEmpty(c.Extra), "created_at": fmtTime(c.CreatedAt), "updated_at": ts(c.UpdatedAt)}
	return s.view(r, all, connectorFieldMin, fields, "volume/connectors/"+c.UUID)
}

func (s *Server) targetView(r *http.Request, t *store.VolumeTarget, fields []string) map[string]any {
	all := map[string]any{"uuid": t.UUID, "node_uuid": t.NodeUUID, "volume_type": t.VolumeType, "volume_id": t.VolumeID,
		"boot_index": t.BootIndex, "properties": maskSecrets(orEmpty(t.Properties)), "extra": orEmpty(t.Extra),
		"created_at": fmtTime(t.CreatedAt), "updated_at": ts(t.UpdatedAt)}
	return s.view(r, all, targetFieldMin, fields, "volume/targets/"+t.UUID)
}

var volumeListParams = []string{"node", "fields", "detail", "limit", "marker", "sort_key", "sort_dir"}

var connectorResource = &resource[store.VolumeConnector]{
	plural: "connectors", path: "volume/connectors", title: "Volume connector", minVersion: volumeVersion, muxVar: "connector",
	params: volumeListParams, nodeParams: []string{"node"}, detailParam: true, volumeLists: true,
	fieldMin: connectorFieldMin,
	summary:  []string{"uuid", "node_uuid", "type", "connector_id"}, sortKeys: []string{"uuid"}, noSort: []string{"extra"},
	get: func(ctx context.Context, st store.Store, id string) (*store.VolumeConnector, error) {
		if !isUUIDLike(id) {
			return nil, badRequest("Expected UUID for connector_uuid: %s", id)
		}
		return st.GetVolumeConnector(ctx, id)
	},
	list: func(ctx context.Context, st store.Store, f store.ResourceFilter, p store.Page) ([]*store.VolumeConnector, error) {
		return st.ListVolumeConnectors(ctx, f, p)
	},
	uuid:   func(c *store.VolumeConnector) string { return c.UUID },
	view:   (*Server).connectorView,
	writes: connectorWrites,
}

var targetResource = &resource[store.VolumeTarget]{
	plural: "targets", path: "volume/targets", title: "Volume target", minVersion: volumeVersion, muxVar: "target",
	params: volumeListParams, nodeParams: []string{"node"}, detailParam: true, volumeLists: true,
	fieldMin: targetFieldMin,
	summary:  []string{"uuid", "node_uuid", "volume_type", "boot_index", "volume_id"}, sortKeys: []string{"uuid"},
	noSort: []string{"extra", "properties"},
	get: func(ctx context.Context, st store.Store, id string) (*store.VolumeTarget, error) {
		if !isUUIDLike(id) {
			return nil, badRequest("Expected UUID for target_uuid: %s", id)
		}
		return st.GetVolumeTarget(ctx, id)
	},
	list: func(ctx context.Context, st store.Store, f store.ResourceFilter, p store.Page) ([]*store.VolumeTarget, error) {
		return st.ListVolumeTargets(ctx, f, p)
	},
	uuid:   func(t *store.VolumeTarget) string { return t.UUID },
	view:   (*Server).targetView,
	writes: targetWrites,
}

// volumeNodeUUIDCheck refuses a patched node_uuid that is no UUID before
// anything else, as Ironic's volume controllers do.
func volumeNodeUUIDCheck(ops []patchOp) error {
	for _, op := range ops {
		if op.Path != "/node_uuid" || op.Value == nil {
			continue
		}
		var v any
		if err := json.Unmarshal(op.Value, &v); err != nil {
			continue
		}
		if s, ok := v.(string); !ok || !isUUIDLike(s) {
			return badRequest("Expected a UUID for node_uuid, but received %s.", pyStr(v))
		}
	}
	return nil
}

// volumeChange refuses to change a node's volume records unless the node
// is powered off and not locked, as Ironic's conductor does for updates
// and deletions (creation is not checked, in Ironic either).
func (s *Server) volumeChange(ctx context.Context, nodeUUID, action string) error {
	n, err := s.st.GetNode(ctx, nodeUUID)
	if err != nil {
		return err
	}
	if n.Reservation != nil {
		return conductor.Wrap(conductor.CodeLocked, errors.New("node locked"),
			"Node %s is locked by host %s, please retry after the current operation is completed.", n.UUID, *n.Reservation)
	}
	if n.PowerState == nil || *n.PowerState != "power off" {
		return badRequest("The requested action \"%s\" can not be performed on node \"%s\" while it is in state \"%s\".",
			action, n.UUID, pyStr(sp(n.PowerState)))
	}
	return nil
}

// volumeUpdateCheck is the check of a volume kind's writes: an update
// (not a create) must pass volumeChange on the record's node.
func volumeUpdateCheck[T any](nodeUUID func(*T) string, what string) func(*Server, *http.Request, *T, bool) error {
	return func(s *Server, r *http.Request, v *T, create bool) error {
		if create {
			return nil
		}
		return s.volumeChange(r.Context(), nodeUUID(v), what+" update")
	}
}

var connectorWrites = &writes[store.VolumeConnector]{
	body: "connector",
	schema: schema{props: []prop{
		{name: "connector_id", types: []string{"string"}},
		{name: "extra", types: []string{"object", "null"}},
		{name: "node_uuid", types: []string{"string"}, uuid: true},
		{name: "type", types: []string{"string"}},
		{name: "uuid", types: []string{"string", "null"}, uuid: true},
	}, required: []string{"connector_id", "node_uuid", "type"}},
	patchable:  []string{"connector_id", "extra", "node_uuid", "type"},
	patchCheck: volumeNodeUUIDCheck,
	doc: func(c *store.VolumeConnector) map[string]any {
		return map[string]any{"uuid": c.UUID, "node_uuid": c.NodeUUID, "type": c.Type, "connector_id": c.ConnectorID,
			"extra": orEmpty(c.Extra)}
	},
	fresh: func(id string) *store.VolumeConnector {
		return &store.VolumeConnector{UUID: id, CreatedAt: time.Now().UTC()}
	},
	apply: func(s *Server, r *http.Request, c *store.VolumeConnector, doc map[string]any, changed func(string) bool, create bool) error {
		node, err := s.changedNode(r, doc, changed, c.NodeUUID)
		if err != nil {
			return err
		}
		if changed("type") {
			t := str(doc, "type")
			if !slices.Contains(connectorTypes, t) {
				return badRequest("Invalid input for field/attribute type. Value: '%s'. The type must be one of %s.", t, strings.Join(connectorTypes, ", "))
			}
			c.Type = t
		}
		c.NodeUUID = node
		if changed("connector_id") {
			c.ConnectorID = str(doc, "connector_id")
		}
		if changed("extra") {
			c.Extra = obj(doc, "extra")
		}
		return nil
	},
	check: volumeUpdateCheck(func(c *store.VolumeConnector) string { return c.NodeUUID }, "volume connector"),
	create: func(ctx context.Context, st store.Store, c *store.VolumeConnector) error {
		return st.CreateVolumeConnector(ctx, c)
	},
	update: func(ctx context.Context, st store.Store, c *store.VolumeConnector) error {
		return st.UpdateVolumeConnector(ctx, c)
	},
	touch: func(c *store.VolumeConnector) { c.UpdatedAt = nowp() },
	writeErr: func(c *store.VolumeConnector, err error) error {
		switch {
		case errors.Is(err, store.ErrDuplicateAddr):
			return conductor.Wrap(conductor.CodeConflict, err, "A volume connector with type %s and connector ID %s already exists.", c.Type, c.ConnectorID)
		case errors.Is(err, store.ErrDuplicateUUID):
			return conductor.Wrap(conductor.CodeConflict, err, "A volume connector with UUID %s already exists.", c.UUID)
		case errors.Is(err, store.ErrNotFound):
			return badRequest("Node %s could not be found.", c.NodeUUID)
		}
		return err
	},
}

var targetWrites = &writes[store.VolumeTarget]{
	body: "target",
	schema: schema{props: []prop{
		{name: "boot_index", types: []string{"integer"}},
		{name: "extra", types: []string{"object", "null"}},
		{name: "node_uuid", types: []string{"string"}, uuid: true},
		{name: "properties", types: []string{"object", "null"}},
		{name: "uuid", types: []string{"string", "null"}, uuid: true},
		{name: "volume_id", types: []string{"string"}},
		{name: "volume_type", types: []string{"string"}},
	}, required: []string{"boot_index", "node_uuid", "volume_id", "volume_type"}},
	patchable:  []string{"boot_index", "extra", "node_uuid", "properties", "volume_id", "volume_type"},
	patchCheck: volumeNodeUUIDCheck,
	doc: func(t *store.VolumeTarget) map[string]any {
		return map[string]any{"uuid": t.UUID, "node_uuid": t.NodeUUID, "volume_type": t.VolumeType, "volume_id": t.VolumeID,
			"boot_index": t.BootIndex, "properties": orEmpty(t.Properties), "extra": orEmpty(t.Extra)}
	},
	fresh: func(id string) *store.VolumeTarget {
		return &store.VolumeTarget{UUID: id, CreatedAt: time.Now().UTC()}
	},
	apply: func(s *Server, r *http.Request, t *store.VolumeTarget, doc map[string]any, changed func(string) bool, create bool) error {
		node, err := s.changedNode(r, doc, changed, t.NodeUUID)
		if err != nil {
			return err
		}
		t.NodeUUID = node
		if changed("boot_index") {
			f, _ := doc["boot_index"].(float64)
			if f < -1<<31 || f >= 1<<31 {
				return badRequest("Schema error for %s: %s is out of range", map[bool]string{true: "target", false: "patch"}[create], pyValue(f))
			}
			t.BootIndex = int(f)
		}
		if changed("volume_type") {
			t.VolumeType = str(doc, "volume_type")
		}
		if changed("volume_id") {
			t.VolumeID = str(doc, "volume_id")
		}
		if changed("properties") {
			t.Properties = obj(doc, "properties")
		}
		if changed("extra") {
			t.Extra = obj(doc, "extra")
		}
		return nil
	},
	check: volumeUpdateCheck(func(t *store.VolumeTarget) string { return t.NodeUUID }, "volume target"),
	create: func(ctx context.Context, st store.Store, t *store.VolumeTarget) error {
		return st.CreateVolumeTarget(ctx, t)
	},
	update: func(ctx context.Context, st store.Store, t *store.VolumeTarget) error {
		return st.UpdateVolumeTarget(ctx, t)
	},
	touch: func(t *store.VolumeTarget) { t.UpdatedAt = nowp() },
	writeErr: func(t *store.VolumeTarget, err error) error {
		switch {
		case errors.Is(err, store.ErrDuplicateName):
			return conductor.Wrap(conductor.CodeConflict, err, "A volume target with boot index '%d' for the same node already exists.", t.BootIndex)
		case errors.Is(err, store.ErrDuplicateUUID):
			return conductor.Wrap(conductor.CodeConflict, err, "A volume target with UUID %s already exists.", t.UUID)
		case errors.Is(err, store.ErrNotFound):
			return badRequest("Node %s could not be found.", t.NodeUUID)
		}
		return err
	},
}

// volumeRoutes registers /volume and a node's /volume. Below 1.32 they
// are not there (404), as in Ironic; under a node, only lists are served
// and the rest is "Operation not permitted." (403), as in Ironic.
func (s *Server) volumeRoutes(r *mux.Router, authed func(h handler) http.Handler) {
	gated := func(h handler) http.Handler {
		return authed(func(w http.ResponseWriter, r *http.Request) error {
			if err := since(r.Context(), volumeVersion); err != nil {
				return err
			}
			return h(w, r)
		})
	}
	forbidden := gated(func(http.ResponseWriter, *http.Request) error {
		return errf(http.StatusForbidden, "Operation not permitted.")
	})
	r.Handle("/volume", gated(s.volumeRoot)).Methods(http.MethodGet)
	r.Handle("/volume/", gated(s.volumeRoot)).Methods(http.MethodGet)
	r.Handle("/nodes/{node}/volume", gated(s.volumeRoot)).Methods(http.MethodGet)
	r.Handle("/nodes/{node}/volume/", gated(s.volumeRoot)).Methods(http.MethodGet)
	for _, kind := range []struct {
		name, muxVar string
		collection
	}{
		{"connectors", "connector", volumeCollection(s, connectorResource, func(c *store.VolumeConnector) string { return c.NodeUUID },
			"volume connector", func(ctx context.Context, st store.Store, id string) error { return st.DeleteVolumeConnector(ctx, id) })},
		{"targets", "target", volumeCollection(s, targetResource, func(t *store.VolumeTarget) string { return t.NodeUUID },
			"volume target", func(ctx context.Context, st store.Store, id string) error { return st.DeleteVolumeTarget(ctx, id) })},
	} {
		base := "/volume/" + kind.name
		kind.route(r, gated, base, kind.muxVar)
		nb := "/nodes/{node}" + base
		r.Handle(nb, gated(kind.list)).Methods(http.MethodGet)
		r.Handle(nb, forbidden).Methods(http.MethodPost)
		r.Handle(nb+"/{"+kind.muxVar+"}", forbidden).Methods(http.MethodGet, http.MethodPatch, http.MethodDelete)
	}
}

// volumeCollection is the collection of a volume kind; connectors and
// targets differ only in the resource, its node and its name.
func volumeCollection[T any](s *Server, res *resource[T], nodeUUID func(*T) string, what string,
	del func(ctx context.Context, st store.Store, id string) error) collection {
	return resourceCollection(s, res, func(r *http.Request, v *T) error {
		return s.volumeChange(r.Context(), nodeUUID(v), what+" deletion")
	}, del)
}

// volumeRoot is /v1/volume (or a node's): links to its collections.
func (s *Server) volumeRoot(w http.ResponseWriter, r *http.Request) error {
	base := "volume/"
	if ident := mux.Vars(r)["node"]; ident != "" {
		n, err := s.loadNode(r)
		if err != nil {
			return err
		}
		base = "nodes/" + n.UUID + "/volume/"
	}
	writeJSON(w, http.StatusOK, map[string]any{"links": s.links(r, base), "connectors": s.links(r, base+"connectors"),
		"targets": s.links(r, base+"targets")})
	return nil
}

// nodeOf is the node a node-scoped list names, or "".
func (s *Server) nodeOf(r *http.Request) (string, error) {
	if mux.Vars(r)["node"] == "" {
		return "", nil
	}
	n, err := s.loadNode(r)
	if err != nil {
		return "", err
	}
	return n.UUID, nil
}

// storageValidation is the storage interface's answer to a node's
// validation: anvil does not boot from volumes, so a node with volume
// targets fails it, saying so (Ironic's cinder storage interface would
// attach them).
func (s *Server) storageValidation(ctx context.Context, n *store.Node) (map[string]any, error) {
	targets, err := s.st.ListVolumeTargets(ctx, store.ResourceFilter{NodeUUID: &n.UUID}, store.Page{Limit: 1})
	if err != nil || len(targets) == 0 {
		return nil, err
	}
	return map[string]any{"result": false, "reason": "anvil does not boot from volumes: node " + n.UUID +
		" has volume targets (such as " + targets[0].UUID + "); remove them to deploy to a local disk"}, nil
}

// maskSecrets is m with the values hideSecret names masked (a copy only
// when there is something to mask): volume target properties carry
// credentials (auth_password, ...) as driver_info does.
func maskSecrets(m map[string]any) map[string]any {
	hide := false
	for k, v := range m {
		hide = hide || hideSecret(k, v)
	}
	if !hide {
		return m
	}
	out := make(map[string]any, len(m))
	for k, v := range m {
		if hideSecret(k, v) {
			v = masked
		}
		out[k] = v
	}
	return out
}
