package api

import (
	"net/http"
	"sort"
	"strings"

	"github.com/gorilla/mux"

	"github.com/anvil-metal/anvil/controller/conductor"
)

// driverIfaceMin is the microversion of each interface type's
// default_*_interface and enabled_*_interfaces fields (Ironic's
// hide_fields_in_newer_versions): 1.30 for the dynamic-driver fields,
// later for the interface types added since.
var driverIfaceMin = map[string]int{"storage": 33, "rescue": 38, "bios": biosVersion, "firmware": firmwareVersion}

func driverFieldMin() map[string]int {
	out := map[string]int{"name": 1, "hosts": 1, "links": 1, "properties": 14, "type": 30}
	for _, t := range conductor.InterfaceTypes() {
		m := max(driverIfaceMin[t], 30)
		out["default_"+t+"_interface"], out["enabled_"+t+"_interfaces"] = m, m
	}
	return out
}

// driverView is Ironic's driver document: detail adds the interface fields.
// fields keeps those (and links); asking for one the document lacks (an
// interface field of a plain list) is refused, as Ironic's driver_sanitize
// does.
func (s *Server) driverView(r *http.Request, name string, hosts []string, detail bool, fields []string) (map[string]any, error) {
	all := map[string]any{"name": name, "hosts": hosts, "links": s.links(r, "drivers/"+name),
		"properties": s.links(r, "drivers/"+name+"/properties"), "type": "dynamic"}
	if detail {
		for t, c := range conductor.HardwareInterfaces(name) {
			all["default_"+t+"_interface"], all["enabled_"+t+"_interfaces"] = c.Default, c.Enabled
		}
	}
	ver, fieldMin := version(r.Context()), driverFieldMin()
	out := map[string]any{}
	for k, v := range all {
		if min := fieldMin[k]; min <= ver {
			out[k] = v
		}
	}
	if fields == nil {
		return out, nil
	}
	kept := map[string]any{"links": out["links"]}
	var invalid []string
	for _, f := range fields {
		if v, ok := out[f]; ok {
			kept[f] = v
		} else {
			invalid = append(invalid, f)
		}
	}
	if invalid != nil {
		return nil, badRequest("Field(s) \"%s\" are not valid", strings.Join(invalid, ", "))
	}
	return kept, nil
}

// driverFields reads fields= of the driver list and of one driver (1.77).
func driverFields(r *http.Request, q query) ([]string, error) {
	if q.has("fields") && version(r.Context()) < 77 {
		return nil, notAcceptable()
	}
	return fieldsArg(q), nil
}

func (s *Server) listDrivers(w http.ResponseWriter, r *http.Request) error {
	q, err := parseQuery(r, "type", "detail", "fields")
	if err != nil {
		return err
	}
	detail, err := q.boolean("detail")
	if err != nil {
		return err
	}
	if detail != nil && *detail && q.has("fields") {
		return badRequest("Can not specify ?detail=True and fields in the same request.")
	}
	ver := version(r.Context())
	if (detail != nil || q.has("type")) && ver < 30 {
		return errf(http.StatusNotAcceptable, "Request not acceptable. The minimal required API version should be 1.30")
	}
	fields, err := driverFields(r, q)
	if err != nil {
		return err
	}
	typ := q.str("type")
	if typ != nil && *typ != "classic" && *typ != "dynamic" {
		return badRequest(`"type" filter must be one of "classic" or "dynamic", if specified.`)
	}
	hosts, err := s.driverHosts(r)
	if err != nil {
		return err
	}
	out := []map[string]any{}
	if typ == nil || *typ == "dynamic" { // no classic drivers since Rocky
		for _, name := range s.cond.DriverNames() {
			d, err := s.driverView(r, name, hosts[name], detail != nil && *detail, fields)
			if err != nil {
				return err
			}
			out = append(out, d)
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"drivers": out})
	return nil
}

func (s *Server) loadDriver(r *http.Request) (string, error) {
	name := mux.Vars(r)["driver"]
	if _, ok := s.cond.Driver(name); !ok {
		return "", &notFoundKey{msg: "Could not find the following driver(s) or hardware type(s): " + name + "."}
	}
	return name, nil
}

func (s *Server) getDriver(w http.ResponseWriter, r *http.Request) error {
	q, err := parseQuery(r, "fields")
	if err != nil {
		return err
	}
	fields, err := driverFields(r, q)
	if err != nil {
		return err
	}
	name, err := s.loadDriver(r)
	if err != nil {
		return err
	}
	hosts, err := s.driverHosts(r)
	if err != nil {
		return err
	}
	d, err := s.driverView(r, name, hosts[name], true, fields)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, d)
	return nil
}

// getDriverProperties lists the driver_info keys of a hardware type.
func (s *Server) getDriverProperties(w http.ResponseWriter, r *http.Request) error {
	if _, err := parseQuery(r); err != nil {
		return err
	}
	name, err := s.loadDriver(r)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, conductor.DriverProperties(name))
	return nil
}

// getRAIDProperties describes the keys of a logical disk (1.12).
func (s *Server) getRAIDProperties(w http.ResponseWriter, r *http.Request) error {
	if err := atLeast(r.Context(), 12); err != nil {
		return err
	}
	if _, err := parseQuery(r); err != nil {
		return err
	}
	name, err := s.loadDriver(r)
	if err != nil {
		return err
	}
	props := conductor.RAIDLogicalDiskProperties(name)
	if props == nil {
		return &notFoundKey{msg: "Driver " + name + " does not support raid (disabled or not implemented)."}
	}
	writeJSON(w, http.StatusOK, props)
	return nil
}

// driverHosts maps each hardware type to the live conductors running it
// (Ironic's get_active_hardware_type_dict), sorted.
func (s *Server) driverHosts(r *http.Request) (map[string][]string, error) {
	cs, err := s.cond.Conductors(r.Context())
	if err != nil {
		return nil, err
	}
	out := map[string][]string{}
	for _, c := range cs {
		if !c.Alive {
			continue
		}
		for _, d := range c.Drivers {
			out[d] = append(out[d], c.Hostname)
		}
	}
	for _, hosts := range out {
		sort.Strings(hosts)
	}
	return out, nil
}
