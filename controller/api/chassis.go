package api

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/anvil-metal/anvil/controller/conductor"
	"github.com/anvil-metal/anvil/controller/store"
)

// Chassis group nodes, as in Ironic 21.4 (api/controllers/v1/chassis.py):
// a chassis has a description and extra, lists its nodes at
// /v1/chassis/{uuid}/nodes, and cannot be deleted while it has nodes.

var chassisFieldMin = map[string]int{"uuid": 1, "description": 1, "extra": 1, "created_at": 1, "updated_at": 1,
	"nodes": 1, "links": 1}

func (s *Server) chassisView(r *http.Request, c *store.Chassis, fields []string) map[string]any {
	all := map[string]any{"uuid": c.UUID, "description": sp(c.Description), "extra": orEmpty(c.Extra),
		"created_at": fmtTime(c.CreatedAt), "updated_at": ts(c.UpdatedAt), "nodes": s.links(r, "chassis/"+c.UUID+"/nodes")}
	return s.view(r, all, chassisFieldMin, fields, "chassis/"+c.UUID)
}

var chassisResource = &resource[store.Chassis]{
	plural: "chassis", path: "chassis", title: "Chassis", muxVar: "chassis",
	params:      []string{"fields", "detail", "limit", "marker", "sort_key", "sort_dir"},
	detailParam: true, fieldMin: chassisFieldMin, summary: []string{"uuid", "description"},
	sortKeys: []string{"uuid", "created_at"}, noSort: []string{"extra"},
	get: func(ctx context.Context, st store.Store, id string) (*store.Chassis, error) {
		if !isUUIDLike(id) {
			return nil, badRequest("Expected UUID for chassis_uuid: %s", id)
		}
		return st.GetChassis(ctx, id)
	},
	list: func(ctx context.Context, st store.Store, _ store.ResourceFilter, p store.Page) ([]*store.Chassis, error) {
		return st.ListChassis(ctx, p)
	},
	uuid:   func(c *store.Chassis) string { return c.UUID },
	view:   (*Server).chassisView,
	writes: chassisWrites,
}

// chassisWrites are Ironic's CHASSIS_SCHEMA and its validators. Every
// schema field is patchable, as in Ironic, but a changed uuid is refused
// as its database layer refuses it.
var chassisWrites = &writes[store.Chassis]{
	body: "chassis",
	schema: schema{props: []prop{
		{name: "description", types: []string{"string", "null"}, maxLen: 255},
		{name: "extra", types: []string{"object", "null"}},
		{name: "uuid", types: []string{"string", "null"}, uuid: true},
	}},
	patchable: []string{"uuid", "extra", "description"},
	doc: func(c *store.Chassis) map[string]any {
		return map[string]any{"uuid": c.UUID, "description": sp(c.Description), "extra": orEmpty(c.Extra)}
	},
	fresh: func(id string) *store.Chassis { return &store.Chassis{UUID: id, CreatedAt: time.Now().UTC()} },
	apply: func(_ *Server, _ *http.Request, c *store.Chassis, doc map[string]any, changed func(string) bool, create bool) error {
		if changed("uuid") && !create {
			return badRequest("Cannot overwrite UUID for an existing Chassis.")
		}
		if changed("description") {
			c.Description = optStr(doc, "description")
		}
		if changed("extra") {
			c.Extra = obj(doc, "extra")
		}
		return nil
	},
	create: func(ctx context.Context, st store.Store, c *store.Chassis) error { return st.CreateChassis(ctx, c) },
	update: func(ctx context.Context, st store.Store, c *store.Chassis) error { return st.UpdateChassis(ctx, c) },
	touch:  func(c *store.Chassis) { c.UpdatedAt = nowp() },
	writeErr: func(c *store.Chassis, err error) error {
		if errors.Is(err, store.ErrDuplicateUUID) {
			return conductor.Wrap(conductor.CodeConflict, err, "A chassis with UUID %s already exists.", c.UUID)
		}
		return err
	},
}

// chassis is the chassis collection. The store refuses to delete a
// chassis with nodes at the moment of the delete, so a node added
// meanwhile keeps its chassis.
func (s *Server) chassis() collection {
	return resourceCollection(s, chassisResource, nil, func(ctx context.Context, st store.Store, id string) error {
		err := st.DeleteChassis(ctx, id)
		if errors.Is(err, store.ErrNotEmpty) {
			return badRequest("Cannot complete the requested action because chassis %s contains nodes.", id)
		}
		return err
	})
}

// listChassisNodes serves /v1/chassis/{uuid}/nodes: the node list
// filtered by the chassis, which must exist.
func (s *Server) listChassisNodes(detail bool) handler {
	return func(w http.ResponseWriter, r *http.Request) error {
		c, err := loadResource(s, r, chassisResource)
		if err != nil {
			return err
		}
		return s.listNodesIn(w, r, detail, c.UUID)
	}
}

// nodeChassis checks a node's chassis_uuid as Ironic's
// _replace_chassis_uuid_with_id does: the chassis must exist (else 400),
// and removing it needs 1.25.
func (s *Server) nodeChassis(ctx context.Context, old, n *store.Node) error {
	if n.ChassisUUID == nil || *n.ChassisUUID == "" {
		n.ChassisUUID = nil
		if old != nil && old.ChassisUUID != nil {
			return atLeast(ctx, 25)
		}
		return nil
	}
	if old != nil && old.ChassisUUID != nil && *old.ChassisUUID == *n.ChassisUUID {
		return nil
	}
	if !isUUIDLike(*n.ChassisUUID) {
		return badRequest("Expected UUID for chassis_uuid: %s", *n.ChassisUUID)
	}
	c, err := s.st.GetChassis(ctx, *n.ChassisUUID)
	if isNotFound(err) {
		return badRequest("Chassis %s could not be found.", *n.ChassisUUID)
	} else if err != nil {
		return err
	}
	n.ChassisUUID = &c.UUID
	return nil
}
