package api

import (
	"net/http"
	"slices"
	"sort"
	"strings"

	"github.com/gorilla/mux"

	"github.com/anvil-metal/anvil/controller/store"
)

// Conductors (API 1.49): this controller and its peers on a shared store,
// from their registrations (Ironic's conductor.py).

var conductorFieldMin = map[string]int{"hostname": 49, "conductor_group": 49, "alive": 49, "drivers": 49,
	"created_at": 49, "updated_at": 49, "links": 49}

func (s *Server) conductorView(r *http.Request, c store.Controller, fields []string) map[string]any {
	drivers := c.Drivers
	if drivers == nil {
		drivers = []string{}
	}
	all := map[string]any{"hostname": c.Hostname, "conductor_group": c.ConductorGroup, "alive": c.Alive, "drivers": drivers,
		"created_at": fmtTime(c.CreatedAt), "updated_at": ts(c.UpdatedAt)}
	return s.view(r, all, conductorFieldMin, fields, "conductors/"+c.Hostname)
}

// conductorsGate: below 1.49 the resource does not exist (Ironic's NotFound).
func conductorsGate(r *http.Request) error {
	if version(r.Context()) < 49 {
		return &notFoundKey{msg: "Resource could not be found."}
	}
	return nil
}

func (s *Server) listConductors(w http.ResponseWriter, r *http.Request) error {
	if err := conductorsGate(r); err != nil {
		return err
	}
	fields, p, err := collectionArgs(r, conductorFieldMin, []string{"hostname", "conductor_group", "alive"},
		[]string{"id", "hostname", "conductor_group", "created_at", "updated_at"}, []string{"alive", "drivers"})
	if err != nil {
		return err
	}
	all, err := s.cond.Conductors(r.Context())
	if err != nil {
		return err
	}
	sortConductors(all, p.sortKey, p.desc)
	if p.marker != "" {
		i := slices.IndexFunc(all, func(c store.Controller) bool { return c.Hostname == p.marker })
		if i < 0 {
			return notFound("Conductor", p.marker)
		}
		all = all[i+1:]
	}
	page := all[:min(len(all), p.limit)]
	out := make([]map[string]any, 0, len(page))
	for _, c := range page {
		out = append(out, s.conductorView(r, c, fields))
	}
	body := map[string]any{"conductors": out}
	if len(page) == p.limit && len(all) > p.limit {
		body["next"] = nextURL(s.baseURL(r), r.URL.Path, r.URL.Query(), page[len(page)-1].Hostname, p)
	}
	writeJSON(w, http.StatusOK, body)
	return nil
}

// sortConductors orders by key; "id" is registration order (as listed).
func sortConductors(cs []store.Controller, key string, desc bool) {
	cmp := map[string]func(a, b store.Controller) int{
		"hostname":        func(a, b store.Controller) int { return strings.Compare(a.Hostname, b.Hostname) },
		"conductor_group": func(a, b store.Controller) int { return strings.Compare(a.ConductorGroup, b.ConductorGroup) },
		"created_at":      func(a, b store.Controller) int { return a.CreatedAt.Compare(b.CreatedAt) },
		"updated_at": func(a, b store.Controller) int {
			return strings.Compare(fmtTimeOrEmpty(a), fmtTimeOrEmpty(b))
		},
	}[key]
	if cmp == nil { // id: registration order
		if desc {
			for i, j := 0, len(cs)-1; i < j; i, j = i+1, j-1 {
				cs[i], cs[j] = cs[j], cs[i]
			}
		}
		return
	}
	sort.SliceStable(cs, func(i, j int) bool {
		if desc {
			return cmp(cs[j], cs[i]) < 0
		}
		return cmp(cs[i], cs[j]) < 0
	})
}

func fmtTimeOrEmpty(c store.Controller) string {
	if c.UpdatedAt == nil {
		return ""
	}
	return fmtTime(*c.UpdatedAt)
}

func (s *Server) getConductor(w http.ResponseWriter, r *http.Request) error {
	if err := conductorsGate(r); err != nil {
		return err
	}
	q, err := parseQuery(r, "fields")
	if err != nil {
		return err
	}
	fields := fieldsArg(q)
	if err := checkFields(r.Context(), fields, conductorFieldMin); err != nil {
		return err
	}
	host := mux.Vars(r)["hostname"]
	all, err := s.cond.Conductors(r.Context())
	if err != nil {
		return err
	}
	for _, c := range all {
		if c.Hostname == host {
			writeJSON(w, http.StatusOK, s.conductorView(r, c, fields))
			return nil
		}
	}
	return notFound("Conductor", host)
}
