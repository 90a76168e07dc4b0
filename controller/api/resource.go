package api

import (
	"context"
	"errors"
	"net/http"

	"github.com/gorilla/mux"

	"github.com/anvil-metal/anvil/controller/store"
)

// resource declares how one kind of node-owned API resource (ports, port
// groups, allocations) is fetched and listed: the microversion it appeared
// in, the query parameters and filters its list takes, whether the list
// honours fields=, what a plain list shows, and the Ironic message for an
// unknown one. listResource and loadResource serve every kind from it.
type resource[T any] struct {
	plural     string // the list's body key
	title      string // "Port": Ironic's "Port X could not be found."
	minVersion int    // the microversion the resource appeared in (0: always there)
	muxVar     string // the route variable naming one
	// params are the query parameters the list accepts; nodeParams, those
	// of them naming a node (by UUID or name) to filter by.
	params, nodeParams []string
	byAddress          bool           // "address" filters by MAC address
	detailParam        bool           // "detail=true" asks for every field
	fieldMin           map[string]int // fields= is honoured, with these fields' microversions
	summary            []string       // the fields of a plain list
	// keep filters the page in memory by parameters the store does not
	// index; nil keeps everything.
	keep func(q query, v *T) bool

	get  func(ctx context.Context, st store.Store, ident string) (*T, error)
	list func(ctx context.Context, st store.Store, f store.ResourceFilter, p store.Page) ([]*T, error)
	uuid func(v *T) string
	view func(s *Server, r *http.Request, v *T, fields []string) map[string]any
}

// loadResource reads the resource the route names.
func loadResource[T any](s *Server, r *http.Request, res *resource[T]) (*T, error) {
	if err := atLeast(r.Context(), res.minVersion); err != nil {
		return nil, err
	}
	id := mux.Vars(r)[res.muxVar]
	v, err := res.get(r.Context(), s.st, id)
	if errors.Is(err, store.ErrNotFound) {
		return nil, notFound(res.title, id)
	}
	return v, err
}

// listResource serves a list of res, of the node nodeUUID if not "".
func listResource[T any](s *Server, w http.ResponseWriter, r *http.Request, res *resource[T], detail bool, nodeUUID string) error {
	ctx := r.Context()
	if err := atLeast(ctx, res.minVersion); err != nil {
		return err
	}
	q, err := parseQuery(r, res.params...)
	if err != nil {
		return err
	}
	f := store.ResourceFilter{}
	if nodeUUID != "" {
		f.NodeUUID = &nodeUUID
	}
	for _, k := range res.nodeParams {
		if ident := q.str(k); ident != nil {
			n, err := s.st.GetNode(ctx, *ident)
			if errors.Is(err, store.ErrNotFound) {
				return notFound("Node", *ident)
			} else if err != nil {
				return err
			}
			f.NodeUUID = &n.UUID
		}
	}
	if a := q.str("address"); res.byAddress && a != nil {
		mac, err := normalizeMAC(*a)
		if err != nil {
			return err
		}
		f.Address = &mac
	}
	if res.detailParam {
		if d, err := q.boolean("detail"); err != nil {
			return err
		} else if d != nil {
			detail = *d
		}
	}
	var fields []string
	if res.fieldMin != nil {
		fields = fieldsArg(q)
		if err := checkFields(ctx, fields, res.fieldMin); err != nil {
			return err
		}
	}
	p, err := q.page([]string{"id"})
	if err != nil {
		return err
	}
	items, err := res.list(ctx, s.st, f, store.Page{Limit: p.limit, Marker: p.marker, Desc: p.desc})
	if err != nil {
		return markerError(err, p)
	}
	view := res.summary
	if detail {
		view = nil
	} else if fields != nil {
		view = fields
	}
	out := make([]map[string]any, 0, len(items))
	for _, v := range items {
		if res.keep == nil || res.keep(q, v) {
			out = append(out, res.view(s, r, v, view))
		}
	}
	body := map[string]any{res.plural: out}
	if len(items) == p.limit {
		body["next"] = nextURL(s.baseURL(r), r.URL.Path, r.URL.Query(), res.uuid(items[len(items)-1]), p)
	}
	writeJSON(w, http.StatusOK, body)
	return nil
}

func markerError(err error, p pageArgs) error {
	if errors.Is(err, store.ErrNotFound) && p.marker != "" {
		return badRequest("Marker %s could not be found.", p.marker)
	}
	return err
}

var portResource = &resource[store.Port]{
	plural: "ports", title: "Port", muxVar: "port",
	params:     []string{"node", "node_uuid", "address", "portgroup", "fields", "detail", "limit", "marker", "sort_key", "sort_dir"},
	nodeParams: []string{"node", "node_uuid"}, byAddress: true, detailParam: true,
	fieldMin: portFieldMin, summary: []string{"uuid", "address"},
	get: func(ctx context.Context, st store.Store, id string) (*store.Port, error) { return st.GetPort(ctx, id) },
	list: func(ctx context.Context, st store.Store, f store.ResourceFilter, p store.Page) ([]*store.Port, error) {
		return st.ListPorts(ctx, f, p)
	},
	uuid: func(p *store.Port) string { return p.UUID },
	view: (*Server).portView,
}

var portgroupResource = &resource[store.Portgroup]{
	plural: "portgroups", title: "Portgroup", minVersion: 23, muxVar: "pg",
	params:     []string{"node", "address", "fields", "detail", "limit", "marker", "sort_key", "sort_dir"},
	nodeParams: []string{"node"}, byAddress: true, detailParam: true,
	summary: []string{"uuid", "address", "name"},
	get: func(ctx context.Context, st store.Store, id string) (*store.Portgroup, error) {
		return st.GetPortgroup(ctx, id)
	},
	list: func(ctx context.Context, st store.Store, f store.ResourceFilter, p store.Page) ([]*store.Portgroup, error) {
		return st.ListPortgroups(ctx, f, p)
	},
	uuid: func(p *store.Portgroup) string { return p.UUID },
	view: (*Server).portgroupView,
}

var allocationResource = &resource[store.Allocation]{
	plural: "allocations", title: "Allocation", minVersion: 52, muxVar: "alloc",
	params:     []string{"node", "resource_class", "state", "owner", "fields", "limit", "marker", "sort_key", "sort_dir"},
	nodeParams: []string{"node"}, fieldMin: allocationFieldMin,
	keep: func(q query, a *store.Allocation) bool {
		if rc := q.str("resource_class"); rc != nil && a.ResourceClass != *rc {
			return false
		}
		if o := q.str("owner"); o != nil && deref(a.Owner) != *o {
			return false
		}
		st := q.str("state")
		return st == nil || a.State == *st
	},
	get: func(ctx context.Context, st store.Store, id string) (*store.Allocation, error) {
		return st.GetAllocation(ctx, id)
	},
	list: func(ctx context.Context, st store.Store, f store.ResourceFilter, p store.Page) ([]*store.Allocation, error) {
		return st.ListAllocations(ctx, f, p)
	},
	uuid: func(a *store.Allocation) string { return a.UUID },
	view: (*Server).allocationView,
}
