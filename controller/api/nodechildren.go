package api

// Parent and child nodes (1.83): a node's parent_node, the list filters
// include_children and parent_node, and GET /v1/nodes/{node}/children, as
// Ironic 23's api/controllers/v1/node.py and db/sqlalchemy/api.py. A child
// is a device with its own BMC inside its parent (a DPU, a SmartNIC).
//
// Ironic 1.83 also lets a step run on a parent's children
// (execute_on_child_nodes) and adds power_on, power_off and reboot
// pseudo-steps; anvil does not run either (docs/reference/api.md).

import (
	"context"
	"errors"
	"net/http"

	"github.com/anvil-metal/anvil/controller/store"
)

const parentNodeVersion = 83 // parent_node, /children and the list filters

// childParams refuses include_children and parent_node below 1.83 with
// Ironic's check_allow_child_node_params words.
func childParams(ctx context.Context, q query) error {
	if (q.has("include_children") || q.has("parent_node")) && version(ctx) < parentNodeVersion {
		return errf(http.StatusNotAcceptable, "Request not acceptable. The minimal required API version should be 1.%d", parentNodeVersion)
	}
	return nil
}

// childFilter is Ironic's rule for child nodes in a list (at every
// version): unless include_children is true, a list shows the children of
// parent_node if given, else only nodes without a parent. With
// include_children=true parent_node is ignored, as in Ironic.
func childFilter(q query, f *store.NodeFilter) error {
	all, err := q.boolean("include_children")
	if err != nil {
		return err
	}
	if all != nil && *all {
		return nil
	}
	if p := q.str("parent_node"); p != nil {
		f.ParentNode = p
		return nil
	}
	no := false
	f.IsChild = &no
	return nil
}

// resolveParent checks that n's parent_node names another node (a UUID or
// a name) and stores the parent's UUID, as Ironic does since 23.1: the
// children filters match UUIDs. Ironic answers 400 for a parent it cannot
// find; a node cannot be its own parent (Ironic does not check that: the
// node would then hide itself from the lists).
func (s *Server) resolveParent(ctx context.Context, n *store.Node) error {
	if n.ParentNode == nil {
		return nil
	}
	ident := *n.ParentNode
	invalid := badRequest("Unable to apply the requested parent_node '%s'. Requested value was invalid.", ident)
	if ident == "" {
		return invalid
	}
	p, err := s.st.GetNode(ctx, ident)
	if errors.Is(err, store.ErrNotFound) {
		return invalid
	}
	if err != nil {
		return err
	}
	if p.UUID == n.UUID {
		return invalid
	}
	n.ParentNode = &p.UUID
	return nil
}

// GET /v1/nodes/{node}/children: the UUIDs of the node's children, and a
// link to the node list filtered by parent_node (one link object, as
// Ironic's make_link). 404 below 1.83.
func (s *Server) listChildren(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	if err := since(ctx, parentNodeVersion); err != nil {
		return err
	}
	if _, err := parseQuery(r); err != nil {
		return err
	}
	n, err := s.loadNode(r)
	if err != nil {
		return err
	}
	children := []string{}
	err = store.EachPage(ctx, 1000, func(p store.Page) ([]*store.NodeSummary, error) {
		return s.st.ListNodeSummaries(ctx, store.NodeFilter{ParentNode: &n.UUID}, p)
	}, func(c *store.NodeSummary) string { return c.UUID }, func(c *store.NodeSummary) error {
		children = append(children, c.UUID)
		return nil
	})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"children": children,
		"links": link{Href: s.baseURL(r) + "/v1/nodes?parent_node=" + n.UUID, Rel: "children"}})
	return nil
}

// unsetValue: the value a client may send for a field newer than its
// version, which Ironic's reject_fields_in_newer_versions ignores: null,
// and "" for conductor_group.
func unsetValue(field string, v any) bool {
	return v == nil || (field == "conductor_group" && v == "")
}

// patchInNewerVersion refuses (406) a patch that adds or replaces a field
// newer than the request's version, as Ironic's
// reject_patch_in_newer_versions (which looks at exact paths only).
func patchInNewerVersion(ctx context.Context, ops []patchOp) error {
	for _, op := range ops {
		if op.Op == "remove" || len(op.Path) < 2 {
			continue
		}
		if f, ok := writable[op.Path[1:]]; ok && version(ctx) < f.min {
			return notAcceptable()
		}
	}
	return nil
}
