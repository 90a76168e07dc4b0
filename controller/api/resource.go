package api

import (
	"context"
	"errors"
	"net/http"
	"slices"

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
	path       string // the collection's path under /v1 ("volume/connectors")
	title      string // "Port": Ironic's "Port X could not be found."
	minVersion int    // the microversion the resource appeared in (0: always there)
	muxVar     string // the route variable naming one
	// params are the query parameters the list accepts; nodeParams, those
	// of them naming a node (by UUID or name) to filter by.
	params, nodeParams []string
	byAddress          bool // "address" filters by MAC address
	detailParam        bool // "detail=true" asks for every field
	// volumeLists: the list is one of Ironic's volume controllers', which
	// take detail= at any version and refuse it with fields= in their own
	// words (the others, get_request_return_fields: detail= from 1.43).
	volumeLists bool
	fieldMin    map[string]int // fields= is honoured, with these fields' microversions
	summary     []string       // the fields of a plain list
	// sortKeys are the sort_key values the list takes besides "id"
	// (they must be keys the store sorts this kind by).
	sortKeys []string
	// noSort are Ironic's invalid_sort_key_list: refused before the
	// database is asked, in the controller's words (no quotes).
	noSort []string
	// checkIdent, if set, refuses the route's identifier for the method
	// before any lookup, as Ironic's argument validators do.
	checkIdent func(method, ident string) error
	// jsonSuffix: a GET below 1.91 whose ".json" suffix was stripped
	// also finds the one named with it (Ironic's get_rpc_*_with_suffix).
	jsonSuffix bool
	// writes says how clients create and patch one (nil: they cannot).
	writes *writes[T]
	// filters, if set, reads the kind's own filter parameters into f
	// (after the node's), with their versions and exclusions.
	filters func(ctx context.Context, st store.Store, q query, f *store.ResourceFilter) error
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
	if res.checkIdent != nil {
		if err := res.checkIdent(r.Method, id); err != nil {
			return nil, err
		}
	}
	get := func(ident string) (*T, error) { return res.get(r.Context(), s.st, ident) }
	var v *T
	var err error
	if res.jsonSuffix && r.Method == http.MethodGet {
		v, err = withJSONSuffix(r.Context(), id, get)
	} else {
		v, err = get(id)
	}
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
	if own := listProject(ctx); own != "" && res.plural != "allocations" {
		// ports and port groups of the nodes a project's caller may see
		// (policy.go); allocations are its own (listAllocations)
		f.NodeProject = &own
	}
	if res.filters != nil {
		if err := res.filters(ctx, s.st, q, &f); err != nil {
			return err
		}
	}
	if res.detailParam {
		if d, err := q.boolean("detail"); err != nil {
			return err
		} else if d != nil {
			if !res.volumeLists && version(ctx) < 43 {
				return badRequest("Invalid query parameter ?detail=%s received.", pyValue(*d))
			}
			detail = *d
		}
	}
	var fields []string
	if res.fieldMin != nil {
		fields = fieldsArg(q)
		if err := checkFieldsArg(ctx, fields, res.fieldMin); err != nil {
			return err
		}
		if fields != nil && detail && q.has("detail") {
			if res.volumeLists {
				return badRequest("Can't fetch a subset of fields with 'detail' set")
			}
			return badRequest("Can not specify ?detail=True and fields in the same request.")
		}
	}
	if k := q.str("sort_key"); k != nil && slices.Contains(res.noSort, *k) {
		return badRequest("The sort_key value %s is an invalid field for sorting", *k)
	}
	p, err := q.page(append([]string{"id"}, res.sortKeys...))
	if err != nil {
		return err
	}
	sortKey := p.sortKey
	if sortKey == "id" {
		sortKey = ""
	}
	items, err := res.list(ctx, s.st, f, store.Page{Limit: p.limit, Marker: p.marker, SortKey: sortKey, Desc: p.desc})
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

// getResource serves GET of one resource, with fields= when the kind
// honours it.
func getResource[T any](s *Server, w http.ResponseWriter, r *http.Request, res *resource[T]) error {
	if err := atLeast(r.Context(), res.minVersion); err != nil {
		return err
	}
	var fields []string
	if res.fieldMin != nil {
		q, err := parseQuery(r, "fields")
		if err != nil {
			return err
		}
		fields = fieldsArg(q)
		if err := checkFieldsArg(r.Context(), fields, res.fieldMin); err != nil {
			return err
		}
	}
	v, err := loadResource(s, r, res)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, res.view(s, r, v, fields))
	return nil
}

// resourceCollection is the collection of the kind res defines, every
// handler the generic one: its list lists the node's resources when the
// route names a node (/nodes/{node}/ports), else all; its delete deletes
// by del after check, if set, lets the resource go.
func resourceCollection[T any](s *Server, res *resource[T], check func(r *http.Request, v *T) error,
	del func(ctx context.Context, st store.Store, uuid string) error) collection {
	list := func(detail bool) handler {
		return func(w http.ResponseWriter, r *http.Request) error {
			node, err := s.nodeOf(r)
			if err != nil {
				return err
			}
			return listResource(s, w, r, res, detail, node)
		}
	}
	return collection{
		list:   list(false),
		detail: list(true),
		get:    func(w http.ResponseWriter, r *http.Request) error { return getResource(s, w, r, res) },
		create: func(w http.ResponseWriter, r *http.Request) error { return createResource(s, w, r, res) },
		patch:  func(w http.ResponseWriter, r *http.Request) error { return patchResource(s, w, r, res) },
		del: func(w http.ResponseWriter, r *http.Request) error {
			var guard func(v *T) error
			if check != nil {
				guard = func(v *T) error { return check(r, v) }
			}
			return deleteResource(s, w, r, res, guard, del)
		},
	}
}

// deleteResource serves DELETE: check, if set, may refuse first.
func deleteResource[T any](s *Server, w http.ResponseWriter, r *http.Request, res *resource[T],
	check func(v *T) error, del func(ctx context.Context, st store.Store, uuid string) error) error {
	v, err := loadResource(s, r, res)
	if err != nil {
		return err
	}
	if check != nil {
		if err := check(v); err != nil {
			return err
		}
	}
	if err := del(r.Context(), s.st, res.uuid(v)); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// checkFieldsArg checks fields= (1.8+) against a resource's fields.
func checkFieldsArg(ctx context.Context, fields []string, known map[string]int) error {
	if fields == nil {
		return nil
	}
	if err := atLeast(ctx, 8); err != nil {
		return err
	}
	return checkFields(ctx, fields, known)
}

func isNotFound(err error) bool { return errors.Is(err, store.ErrNotFound) }

func markerError(err error, p pageArgs) error {
	if errors.Is(err, store.ErrNotFound) && p.marker != "" {
		return badRequest("Marker %s could not be found.", p.marker)
	}
	return err
}

var portResource = &resource[store.Port]{
	plural: "ports", path: "ports", title: "Port", muxVar: "port", writes: portWrites,
	params: []string{"node", "node_uuid", "address", "portgroup", "fields", "detail", "limit", "marker", "sort_key", "sort_dir",
		"shard", "conductor_groups", "description_contains"},
	filters: portFilters, keep: keepPort,
	nodeParams: []string{"node", "node_uuid"}, byAddress: true, detailParam: true,
	fieldMin: portFieldMin, summary: []string{"uuid", "address"},
	noSort:     []string{"extra", "internal_info", "local_link_connection"},
	checkIdent: checkPortIdent,
	get:        func(ctx context.Context, st store.Store, id string) (*store.Port, error) { return st.GetPort(ctx, id) },
	list: func(ctx context.Context, st store.Store, f store.ResourceFilter, p store.Page) ([]*store.Port, error) {
		return st.ListPorts(ctx, f, p)
	},
	uuid: func(p *store.Port) string { return p.UUID },
	view: (*Server).portView,
}

var portgroupResource = &resource[store.Portgroup]{
	plural: "portgroups", path: "portgroups", title: "Portgroup", minVersion: 23, muxVar: "pg", writes: portgroupWrites,
	params: []string{"node", "address", "fields", "detail", "limit", "marker", "sort_key", "sort_dir",
		"shard", "conductor_groups"},
	nodeParams: []string{"node"}, byAddress: true, detailParam: true, filters: portgroupFilters,
	fieldMin: portgroupFieldMin, summary: []string{"uuid", "address", "name"}, jsonSuffix: true,
	noSort: []string{"extra", "internal_info", "properties"},
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
	plural: "allocations", path: "allocations", title: "Allocation", minVersion: 52, muxVar: "alloc",
	params:     []string{"node", "resource_class", "state", "owner", "fields", "limit", "marker", "sort_key", "sort_dir"},
	nodeParams: []string{"node"}, fieldMin: allocationFieldMin, noSort: []string{"extra", "candidate_nodes", "traits"},
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
	uuid:   func(a *store.Allocation) string { return a.UUID },
	view:   (*Server).allocationView,
	writes: allocationWrites,
}
