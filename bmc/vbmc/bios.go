package vbmc

import (
	"bytes"
	"crypto/sha1"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"
)

// Quirks make a node's BMC copy a vendor's behaviour, so that clients are
// tested against it. The zero value is a well-behaved BMC.
type Quirks struct {
	// SystemIDIsUUID serves the system at /redfish/v1/Systems/<uuid>
	// instead of /redfish/v1/Systems/<name> (HPE, Lenovo and others use
	// opaque ids); clients that only know "System.Embedded.1"-style ids
	// (bmclib's generic BIOS calls) find no system.
	SystemIDIsUUID bool `json:"system_id_is_uuid,omitempty"`
	// BiosApplyTimeRequired accepts a Bios/Settings PATCH without
	// @Redfish.SettingsApplyTime but never applies it, like iDRAC without a
	// configuration job: the values stay pending until a PATCH with an
	// apply time commits them all. Without the quirk a missing apply time
	// means OnReset.
	BiosApplyTimeRequired bool `json:"bios_apply_time_required,omitempty"`
}

// biosState is the BIOS as the BMC holds it: the BMC's own state, not the
// VM's, so it lives with the node for every backend. It has its own lock
// because Node.mu is held across slow backend calls (QEMU starts).
type biosState struct {
	mu      sync.Mutex
	quirks  Quirks
	current map[string]any // nil until first use: factory defaults
	pending map[string]any // Bios/Settings
	// committed: the pending values apply at the next boot.
	committed bool
	// toDefaults: ResetBios was requested; defaults apply at the next boot.
	toDefaults bool
	applied    time.Time
}

// SetQuirks replaces the node's quirks.
func (n *Node) SetQuirks(q Quirks) {
	n.bios.mu.Lock()
	defer n.bios.mu.Unlock()
	n.bios.quirks = q
}

// Quirks returns the node's quirks.
func (n *Node) Quirks() Quirks {
	n.bios.mu.Lock()
	defer n.bios.mu.Unlock()
	return n.bios.quirks
}

// UUID is the system's UUID, stable per node name (a name-based, version
// 5 style UUID) so that a restarted vbmc serves the same one.
func (n *Node) UUID() string {
	h := sha1.Sum([]byte("anvil-vbmc system " + n.Name))
	h[6] = (h[6] & 0x0f) | 0x50
	h[8] = (h[8] & 0x3f) | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", h[0:4], h[4:6], h[6:8], h[8:10], h[10:16])
}

// SystemID is the id in the system's Redfish path: the name, or the UUID
// with Quirks.SystemIDIsUUID.
func (n *Node) SystemID() string {
	if n.Quirks().SystemIDIsUUID {
		return n.UUID()
	}
	return n.Name
}

// lookupNode finds the node a request names: by system id under
// /redfish/v1/Systems/ (only the UUID with the quirk, as on the real
// thing), by name elsewhere (managers, the control endpoint).
func (s *Server) lookupNode(r *http.Request) *Node {
	id := r.PathValue("id")
	if strings.HasPrefix(r.URL.Path, "/redfish/v1/Systems/") {
		for _, n := range s.nodes {
			if n.SystemID() == id {
				return n
			}
		}
		return nil
	}
	return s.Node(id)
}

// BiosSettings is a snapshot of a node's BIOS, for tests and logs.
type BiosSettings struct {
	Current, Pending map[string]any
	// Committed: Pending applies at the next boot.
	Committed bool
	// ToDefaults: ResetBios was requested and applies at the next boot.
	ToDefaults bool
	// Applied is when settings last took effect (zero: never).
	Applied time.Time
}

// Bios returns a copy of the node's BIOS state. Passwords are included.
func (n *Node) Bios() BiosSettings {
	n.bios.mu.Lock()
	defer n.bios.mu.Unlock()
	n.biosInitLocked()
	return BiosSettings{Current: maps.Clone(n.bios.current), Pending: maps.Clone(n.bios.pending),
		Committed: n.bios.committed, ToDefaults: n.bios.toDefaults, Applied: n.bios.applied}
}

func (n *Node) biosInitLocked() {
	if n.bios.current == nil {
		n.bios.current = biosDefaults(n.Name)
		n.bios.pending = map[string]any{}
	}
}

// biosBoot applies what is due at a boot (POST): defaults after ResetBios,
// then committed pending values. Uncommitted ones (the apply-time quirk)
// stay pending.
func (n *Node) biosBoot(log *slog.Logger) {
	n.bios.mu.Lock()
	defer n.bios.mu.Unlock()
	n.biosInitLocked()
	if !n.bios.toDefaults && !n.bios.committed {
		if len(n.bios.pending) > 0 {
			log.Info("vbmc: bios settings left pending: no apply time was given", "node", n.Name, "attributes", slices.Sorted(maps.Keys(n.bios.pending)))
		}
		return
	}
	if n.bios.toDefaults {
		n.bios.current = biosDefaults(n.Name)
		log.Info("vbmc: bios reset to defaults", "node", n.Name)
	}
	if n.bios.committed {
		maps.Copy(n.bios.current, n.bios.pending)
		log.Info("vbmc: bios settings applied", "node", n.Name, "attributes", slices.Sorted(maps.Keys(n.bios.pending)))
		n.bios.pending = map[string]any{}
	}
	n.bios.committed, n.bios.toDefaults = false, false
	n.bios.applied = time.Now().UTC()
}

// biosAtReset runs the BIOS's boot work when a reset booted the system:
// on from off, or a restart or cycle of a running one.
func (s *Server) biosAtReset(n *Node, resetType string, wasOn, on bool) {
	restart := resetType == ResetForceRestart || resetType == ResetGracefulRestart || resetType == ResetPowerCycle
	if (!wasOn && on) || (wasOn && on && restart) {
		n.biosBoot(s.log)
	}
}

// biosRoutes registers the BIOS and registry resources.
func (s *Server) biosRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /redfish/v1/Registries", s.auth(s.listRegistries))
	mux.HandleFunc("GET /redfish/v1/Registries/{reg}", s.auth(s.getRegistryFile))
	mux.HandleFunc("GET /redfish/v1/Registries/{reg}/{doc}", s.auth(s.getRegistry))
	mux.HandleFunc("GET /redfish/v1/Systems/{id}/Bios", s.auth(s.withNode(s.getBios)))
	mux.HandleFunc("GET /redfish/v1/Systems/{id}/Bios/Settings", s.auth(s.withNode(s.getBiosSettings)))
	mux.HandleFunc("PATCH /redfish/v1/Systems/{id}/Bios/Settings", s.auth(s.withNode(s.patchBiosSettings)))
	mux.HandleFunc("POST /redfish/v1/Systems/{id}/Bios/Actions/Bios.ResetBios", s.auth(s.withNode(s.resetBios)))
}

const registriesPath = "/redfish/v1/Registries"

func registryFilePath() string { return registriesPath + "/" + BiosRegistryID }
func registryDocPath() string  { return registryFilePath() + "/" + BiosRegistryID }

func (s *Server) listRegistries(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, collection(registriesPath, "#MessageRegistryFileCollection.MessageRegistryFileCollection",
		"Registry File Collection", []string{registryFilePath()}))
}

func notFound(w http.ResponseWriter, r *http.Request) {
	redfishError(w, http.StatusNotFound, "ResourceMissingAtURI", fmt.Sprintf("The resource at the URI %s was not found.", r.URL.Path))
}

func (s *Server) getRegistryFile(w http.ResponseWriter, r *http.Request) {
	if r.PathValue("reg") != BiosRegistryID {
		notFound(w, r)
		return
	}
	f := odata(registryFilePath(), "#MessageRegistryFile.v1_1_0.MessageRegistryFile")
	f["Id"] = BiosRegistryID
	f["Name"] = "BIOS Attribute Registry File"
	f["Description"] = "BIOS Attribute Registry File locations"
	f["Registry"] = "BiosAttributeRegistry.1.0"
	f["Languages"] = []string{"en"}
	f["Location"] = []any{map[string]any{"Language": "en", "Uri": registryDocPath()}}
	writeJSON(w, http.StatusOK, f)
}

func (s *Server) getRegistry(w http.ResponseWriter, r *http.Request) {
	if r.PathValue("reg") != BiosRegistryID || r.PathValue("doc") != BiosRegistryID {
		notFound(w, r)
		return
	}
	writeJSON(w, http.StatusOK, biosRegistryDocument(registryDocPath()))
}

// shown is the attribute map as Redfish shows it: passwords are null.
func shown(vals map[string]any) map[string]any {
	out := maps.Clone(vals)
	for _, a := range biosRegistry() {
		if _, ok := out[a.Name]; ok && a.Type == AttrPassword {
			out[a.Name] = nil
		}
	}
	return out
}

func biosPath(n *Node) string { return "/redfish/v1/Systems/" + n.SystemID() + "/Bios" }

func (s *Server) getBios(w http.ResponseWriter, _ *http.Request, n *Node) {
	st := n.Bios()
	id := biosPath(n)
	settings := map[string]any{
		"@odata.type":         "#Settings.v1_3_0.Settings",
		"SettingsObject":      link(id + "/Settings"),
		"SupportedApplyTimes": []string{"OnReset"},
	}
	if !st.Applied.IsZero() {
		settings["Time"] = st.Applied.Format(time.RFC3339)
	}
	b := odata(id, "#Bios.v1_1_0.Bios")
	b["Id"] = "Bios"
	b["Name"] = "BIOS Configuration Current Settings"
	b["Description"] = "BIOS Configuration Current Settings"
	b["AttributeRegistry"] = BiosRegistryID
	attrs := shown(st.Current)
	// The BIOS version is the firmware's, which an update changes.
	attrs["SystemBiosVersion"] = s.fw.version(n.Name, FirmwareBIOS)
	b["Attributes"] = attrs
	b["@Redfish.Settings"] = settings
	b["Actions"] = map[string]any{"#Bios.ResetBios": map[string]any{"target": id + "/Actions/Bios.ResetBios"}}
	writeJSON(w, http.StatusOK, b)
}

// biosETag identifies the pending settings; gofish sends the Settings ETag
// back in If-Match.
func biosETag(st BiosSettings) string {
	raw, _ := json.Marshal(st.Pending) // map keys are sorted: stable
	h := fnv.New32a()
	fmt.Fprintf(h, "%s|%t|%t", raw, st.Committed, st.ToDefaults)
	return fmt.Sprintf(`W/"%08x"`, h.Sum32())
}

func (s *Server) getBiosSettings(w http.ResponseWriter, _ *http.Request, n *Node) {
	st := n.Bios()
	id := biosPath(n) + "/Settings"
	etag := biosETag(st)
	w.Header().Set("ETag", etag)
	b := odata(id, "#Bios.v1_1_0.Bios")
	b["@odata.etag"] = etag
	b["Id"] = "Settings"
	b["Name"] = "BIOS Configuration Pending Settings"
	b["AttributeRegistry"] = BiosRegistryID
	b["Attributes"] = shown(st.Pending)
	if st.Committed || st.ToDefaults {
		b["@Redfish.SettingsApplyTime"] = map[string]any{"@odata.type": "#Settings.v1_3_0.PreferredApplyTime", "ApplyTime": "OnReset"}
	}
	writeJSON(w, http.StatusOK, b)
}

// biosPatchErrors writes a 400 naming every rejected attribute.
func biosPatchErrors(w http.ResponseWriter, errs []attrError) {
	msgs := make([]any, 0, len(errs))
	for _, e := range errs {
		msgs = append(msgs, e.message())
	}
	writeJSON(w, http.StatusBadRequest, map[string]any{"error": map[string]any{
		"code":                  "Base.1.8.GeneralError",
		"message":               "A general error has occurred. See ExtendedInfo for more information.",
		"@Message.ExtendedInfo": msgs,
	}})
}

func (s *Server) patchBiosSettings(w http.ResponseWriter, r *http.Request, n *Node) {
	var body map[string]json.RawMessage
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		redfishError(w, http.StatusBadRequest, "MalformedJSON", "The request body submitted was malformed JSON: "+err.Error())
		return
	}
	var errs []attrError
	for k := range body {
		if k != "Attributes" && k != "@Redfish.SettingsApplyTime" {
			errs = append(errs, attrError{id: "PropertyUnknown", attr: k, args: []any{k},
				msg: fmt.Sprintf("The property %s is not in the list of valid properties for the resource.", k)})
		}
	}
	rawAttrs, ok := body["Attributes"]
	if !ok {
		redfishError(w, http.StatusBadRequest, "PropertyMissing", "The property Attributes is a required property and must be included in the request.")
		return
	}
	var attrs map[string]any
	dec := json.NewDecoder(bytes.NewReader(rawAttrs))
	dec.UseNumber() // integers must stay exact to be checked against bounds
	if err := dec.Decode(&attrs); err != nil || attrs == nil {
		redfishError(w, http.StatusBadRequest, "PropertyValueTypeError", "The property Attributes must be an object.")
		return
	}
	applyTime := ""
	if raw, ok := body["@Redfish.SettingsApplyTime"]; ok {
		var at struct{ ApplyTime string }
		if err := json.Unmarshal(raw, &at); err != nil || at.ApplyTime != "OnReset" {
			// Immediate and the maintenance windows are not supported, as
			// on most vendors' BIOS.
			redfishError(w, http.StatusBadRequest, "PropertyValueNotInList",
				fmt.Sprintf("The value %q for the property @Redfish.SettingsApplyTime/ApplyTime is not in the list of acceptable values (OnReset).", at.ApplyTime))
			return
		}
		applyTime = at.ApplyTime
	}

	reg := map[string]biosAttr{}
	for _, a := range biosRegistry() {
		reg[a.Name] = a
	}
	valid := map[string]any{}
	for _, name := range slices.Sorted(maps.Keys(attrs)) {
		a, ok := reg[name]
		switch {
		case !ok:
			errs = append(errs, attrError{id: "PropertyUnknown", attr: name, args: []any{name},
				msg: fmt.Sprintf("The property %s is not in the list of valid properties for the resource.", name)})
		case !a.writable():
			errs = append(errs, attrError{id: "PropertyNotWritable", attr: name, args: []any{name},
				msg: fmt.Sprintf("The property %s is a read only property and cannot be assigned a value.", name)})
		default:
			v, e := a.validate(attrs[name])
			if e != nil {
				errs = append(errs, *e)
				continue
			}
			valid[name] = v
		}
	}
	if len(errs) > 0 {
		// All or nothing, as real BMCs: one bad attribute rejects the PATCH.
		biosPatchErrors(w, errs)
		return
	}

	n.bios.mu.Lock()
	n.biosInitLocked()
	st := BiosSettings{Pending: n.bios.pending, Committed: n.bios.committed, ToDefaults: n.bios.toDefaults}
	if want := r.Header.Get("If-Match"); want != "" && want != "*" && want != biosETag(st) {
		n.bios.mu.Unlock()
		redfishError(w, http.StatusPreconditionFailed, "PreconditionFailed", "The ETag supplied did not match the ETag required to change this resource.")
		return
	}
	maps.Copy(n.bios.pending, valid)
	if applyTime != "" || !n.bios.quirks.BiosApplyTimeRequired {
		n.bios.committed = true
	}
	committed := n.bios.committed
	n.bios.mu.Unlock()

	names := slices.Sorted(maps.Keys(valid))
	s.log.Info("vbmc: bios settings pending", "node", n.Name, "attributes", names, "apply_time", applyTime, "committed", committed)
	writeJSON(w, http.StatusOK, map[string]any{"@Message.ExtendedInfo": []any{map[string]any{
		"@odata.type": "#Message.v1_1_1.Message",
		"MessageId":   "Base.1.8.Success",
		"Message":     "Successfully Completed Request",
		"Severity":    "OK",
		"Resolution":  "None",
	}}})
}

func (s *Server) resetBios(w http.ResponseWriter, _ *http.Request, n *Node) {
	n.bios.mu.Lock()
	n.biosInitLocked()
	// Defaults win over settings pending now; settings PATCHed after this
	// apply on top of the defaults at the same boot.
	n.bios.toDefaults = true
	n.bios.pending, n.bios.committed = map[string]any{}, false
	n.bios.mu.Unlock()
	s.log.Info("vbmc: bios reset to defaults requested", "node", n.Name)
	w.WriteHeader(http.StatusNoContent)
}
