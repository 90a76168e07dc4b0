package api

import (
	"net/http"

	"github.com/gorilla/mux"
)

func (s *Server) driverView(r *http.Request, name string) map[string]any {
	return map[string]any{"name": name, "hosts": []string{s.cond.Host()}, "type": "dynamic",
		"links": s.links(r, "drivers/"+name), "properties": s.links(r, "drivers/"+name+"/properties")}
}

func (s *Server) listDrivers(w http.ResponseWriter, r *http.Request) error {
	if _, err := parseQuery(r, "type", "detail", "fields"); err != nil {
		return err
	}
	out := []map[string]any{}
	for _, name := range s.cond.DriverNames() {
		out = append(out, s.driverView(r, name))
	}
	writeJSON(w, http.StatusOK, map[string]any{"drivers": out})
	return nil
}

func (s *Server) getDriver(w http.ResponseWriter, r *http.Request) error {
	name := mux.Vars(r)["driver"]
	if _, ok := s.cond.Driver(name); !ok {
		return notFound("Driver", name)
	}
	writeJSON(w, http.StatusOK, s.driverView(r, name))
	return nil
}
