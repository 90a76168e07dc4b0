package vbmc

import (
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"
)

// maxBody bounds request bodies: Redfish requests here are tiny.
const maxBody = 64 << 10

// maxSessions bounds the session table; the oldest session is dropped.
const maxSessions = 64

// Faults make the virtual BMC misbehave like real ones, for tests.
type Faults struct {
	// BusyAfterPowerOff answers 409 Conflict to Reset actions for this long
	// after a node was powered off (Dell iDRAC refuses "On" for up to ~60 s).
	BusyAfterPowerOff time.Duration
	// IgnoreBootPatch answers 200 to a Boot PATCH without applying it
	// (Supermicro, bmclib#459).
	IgnoreBootPatch bool
	// RejectAuth fails every login and request as if the password were
	// wrong.
	RejectAuth bool
	// IgnoreMediaInsert answers 204 to InsertMedia and mounts nothing.
	IgnoreMediaInsert bool
	// MediaInsertedWithoutImage answers 204 to InsertMedia, mounts
	// nothing, and then reports the slot Inserted with no Image (BMCs
	// whose web server lost the URL).
	MediaInsertedWithoutImage bool
	// SessionLimit refuses new Redfish sessions with 503 while this many
	// are open (iDRAC: "RAC0218: The maximum number of user sessions is
	// reached"); 0: no limit but the table's size.
	SessionLimit int
}

// Server is the virtual BMC's HTTP side: Redfish under /redfish/v1 and the
// chassis-control endpoint under /control/{node}/{param}.
type Server struct {
	log      *slog.Logger
	username string
	password string
	nodes    []*Node

	mu        sync.Mutex
	faults    Faults
	sessions  map[string]string // token -> session id
	order     []string          // tokens, oldest first
	offAt     map[string]time.Time
	nextID    int
	requestsN int
	peak      int // most sessions open at once (PeakSessions)
	// emptyInserted: nodes whose CD reports Inserted without an Image
	// (the MediaInsertedWithoutImage fault)
	emptyInserted map[string]bool
	sel           map[string][]SELEntry // node -> its SEL (sel.go)
	nmis          map[string]int        // node -> NMIs sent
	fw            *firmware             // UpdateService and TaskService (firmware.go)
	events        *events               // EventService (events.go)
}

// NewServer returns a Server for nodes. Empty credentials disable
// authentication.
func NewServer(log *slog.Logger, username, password string, nodes ...*Node) *Server {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Server{log: log, username: username, password: password, nodes: nodes,
		sessions: map[string]string{}, offAt: map[string]time.Time{}, emptyInserted: map[string]bool{}, sel: map[string][]SELEntry{}, nmis: map[string]int{}, fw: newFirmware(log, nodes), events: newEvents()}
}

// SetFaults replaces the fault knobs.
func (s *Server) SetFaults(f Faults) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = f
}

func (s *Server) getFaults() Faults {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.faults
}

// Requests counts the Redfish requests served, for tests.
func (s *Server) Requests() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.requestsN
}

// Node returns the node named name, or nil.
func (s *Server) Node(name string) *Node {
	for _, n := range s.nodes {
		if n.Name == name {
			return n
		}
	}
	return nil
}

// Handler returns the HTTP handler.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /redfish", s.redirectRoot)
	mux.HandleFunc("GET /redfish/v1", s.serviceRoot)
	mux.HandleFunc("GET /redfish/v1/{$}", s.serviceRoot)
	mux.HandleFunc("GET /redfish/v1/SessionService", s.auth(s.sessionService))
	mux.HandleFunc("GET /redfish/v1/SessionService/Sessions", s.auth(s.listSessions))
	mux.HandleFunc("POST /redfish/v1/SessionService/Sessions", s.createSession)
	mux.HandleFunc("GET /redfish/v1/SessionService/Sessions/{id}", s.auth(s.getSession))
	mux.HandleFunc("DELETE /redfish/v1/SessionService/Sessions/{id}", s.auth(s.deleteSession))
	mux.HandleFunc("GET /redfish/v1/Systems", s.auth(s.listSystems))
	mux.HandleFunc("GET /redfish/v1/Systems/{id}", s.auth(s.withNode(s.getSystem)))
	mux.HandleFunc("PATCH /redfish/v1/Systems/{id}", s.auth(s.withNode(s.patchSystem)))
	mux.HandleFunc("POST /redfish/v1/Systems/{id}/Actions/ComputerSystem.Reset", s.auth(s.withNode(s.resetSystem)))
	mux.HandleFunc("GET /redfish/v1/Managers", s.auth(s.listManagers))
	mux.HandleFunc("GET /redfish/v1/Managers/{id}", s.auth(s.withNode(s.getManager)))
	mux.HandleFunc("GET /redfish/v1/Managers/{id}/LogServices", s.auth(s.withNode(s.listLogServices)))
	mux.HandleFunc("GET /redfish/v1/Managers/{id}/LogServices/SEL", s.auth(s.withNode(s.getSELService)))
	mux.HandleFunc("GET /redfish/v1/Managers/{id}/LogServices/SEL/Entries", s.auth(s.withNode(s.listSELEntries)))
	mux.HandleFunc("GET /redfish/v1/Managers/{id}/LogServices/SEL/Entries/{entry}", s.auth(s.withNode(s.getSELEntry)))
	mux.HandleFunc("GET /redfish/v1/Managers/{id}/VirtualMedia", s.auth(s.withNode(s.listVirtualMedia)))
	mux.HandleFunc("GET /redfish/v1/Managers/{id}/VirtualMedia/{media}", s.auth(s.withNode(s.withMedia(s.getVirtualMedia))))
	mux.HandleFunc("POST /redfish/v1/Managers/{id}/VirtualMedia/{media}/Actions/VirtualMedia.InsertMedia", s.auth(s.withNode(s.withMedia(s.insertMedia))))
	mux.HandleFunc("POST /redfish/v1/Managers/{id}/VirtualMedia/{media}/Actions/VirtualMedia.EjectMedia", s.auth(s.withNode(s.withMedia(s.ejectMedia))))
	mux.HandleFunc("GET /control/{id}/{param}", s.auth(s.withNode(s.controlGet)))
	mux.HandleFunc("POST /control/{id}/{param}", s.auth(s.withNode(s.controlSet)))
	s.biosRoutes(mux)
	s.firmwareRoutes(mux)
	s.eventRoutes(mux)
	s.inventoryRoutes(mux)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.requestsN++
		s.mu.Unlock()
		if r.URL.Path != pushPath { // an uploaded image has its own bound
			r.Body = http.MaxBytesReader(w, r.Body, maxBody)
		}
		s.log.Debug("vbmc: request", "method", r.Method, "path", r.URL.Path)
		if s.fw.offline(w) {
			return
		}
		mux.ServeHTTP(w, r)
	})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("OData-Version", "4.0")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// redfishError writes a Redfish error body.
func redfishError(w http.ResponseWriter, status int, id, msg string) {
	writeJSON(w, status, map[string]any{"error": map[string]any{
		"code":    "Base.1.8.GeneralError",
		"message": msg,
		"@Message.ExtendedInfo": []any{map[string]any{
			"@odata.type": "#Message.v1_1_1.Message",
			"MessageId":   "Base.1.8." + id,
			"Message":     msg,
			"Severity":    "Critical",
		}},
	}})
}

func odata(id, typ string) map[string]any {
	return map[string]any{"@odata.id": id, "@odata.type": typ}
}

func link(id string) map[string]any { return map[string]any{"@odata.id": id} }

func (s *Server) redirectRoot(w http.ResponseWriter, r *http.Request) {
	http.Redirect(w, r, "/redfish/v1/", http.StatusMovedPermanently)
}

// serviceRoot is unauthenticated, as Redfish requires: clients read it to
// find where to log in.
func (s *Server) serviceRoot(w http.ResponseWriter, _ *http.Request) {
	root := odata("/redfish/v1/", "#ServiceRoot.v1_5_0.ServiceRoot")
	root["Id"] = "RootService"
	root["Name"] = "anvil-vbmc"
	root["RedfishVersion"] = "1.6.0"
	root["Systems"] = link("/redfish/v1/Systems")
	root["Managers"] = link("/redfish/v1/Managers")
	root["SessionService"] = link("/redfish/v1/SessionService")
	root["Registries"] = link("/redfish/v1/Registries")
	root["UpdateService"], root["TaskService"] = link("/redfish/v1/UpdateService"), link("/redfish/v1/TaskService")
	root["EventService"] = link(eventServicePath)
	root["Links"] = map[string]any{"Sessions": link("/redfish/v1/SessionService/Sessions")}
	writeJSON(w, http.StatusOK, root)
}

func (s *Server) credentialsOK(user, pass string) bool {
	if s.getFaults().RejectAuth {
		return false
	}
	u := subtle.ConstantTimeCompare([]byte(user), []byte(s.username))
	p := subtle.ConstantTimeCompare([]byte(pass), []byte(s.password))
	return u&p == 1
}

// auth accepts a session token or HTTP basic credentials.
func (s *Server) auth(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if s.username == "" && s.password == "" && !s.getFaults().RejectAuth {
			h(w, r)
			return
		}
		if tok := r.Header.Get("X-Auth-Token"); tok != "" {
			s.mu.Lock()
			_, ok := s.sessions[tok]
			reject := s.faults.RejectAuth
			s.mu.Unlock()
			if ok && !reject {
				h(w, r)
				return
			}
		} else if u, p, ok := r.BasicAuth(); ok && s.credentialsOK(u, p) {
			h(w, r)
			return
		}
		w.Header().Set("WWW-Authenticate", `Basic realm="anvil-vbmc"`)
		redfishError(w, http.StatusUnauthorized, "NoValidSession", "There is no valid session established with the implementation.")
	}
}

// collection is a Redfish collection resource: id, type and name, and a
// link to each member's path.
func collection(id, typ, name string, members []string) map[string]any {
	c := odata(id, typ)
	c["Name"] = name
	links := make([]any, 0, len(members))
	for _, m := range members {
		links = append(links, link(m))
	}
	c["Members"], c["Members@odata.count"] = links, len(links)
	return c
}

func (s *Server) listSystems(w http.ResponseWriter, _ *http.Request) {
	var members []string
	for _, n := range s.nodes {
		members = append(members, "/redfish/v1/Systems/"+n.SystemID())
	}
	writeJSON(w, http.StatusOK, collection("/redfish/v1/Systems", "#ComputerSystemCollection.ComputerSystemCollection", "Computer System Collection", members))
}

func (s *Server) withNode(h func(http.ResponseWriter, *http.Request, *Node)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		n := s.lookupNode(r)
		if n == nil {
			redfishError(w, http.StatusNotFound, "ResourceMissingAtURI", fmt.Sprintf("The resource at the URI %s was not found.", r.URL.Path))
			return
		}
		h(w, r, n)
	}
}

// systemETag identifies the system's mutable state. Clients (gofish) send
// it back in If-Match; a stale one is refused with 412 like real BMCs do.
func systemETag(on bool, b BootOverride) string {
	h := fnv.New32a()
	fmt.Fprintf(h, "%t|%s|%s|%s", on, b.Target, b.Enabled, b.Mode)
	return fmt.Sprintf(`W/"%08x"`, h.Sum32())
}

// checkIfMatch answers 412 and returns false when If-Match is stale.
func checkIfMatch(w http.ResponseWriter, r *http.Request, n *Node) bool {
	want := r.Header.Get("If-Match")
	if want == "" || want == "*" {
		return true
	}
	on, err := n.On(r.Context())
	if err != nil {
		redfishError(w, http.StatusInternalServerError, "InternalError", err.Error())
		return false
	}
	if want != systemETag(on, n.Boot()) {
		redfishError(w, http.StatusPreconditionFailed, "PreconditionFailed", "The ETag supplied did not match the ETag required to change this resource.")
		return false
	}
	return true
}

func (s *Server) getSystem(w http.ResponseWriter, r *http.Request, n *Node) {
	on, err := n.On(r.Context())
	if err != nil {
		redfishError(w, http.StatusInternalServerError, "InternalError", err.Error())
		return
	}
	power := "Off"
	if on {
		power = "On"
	}
	b := n.Boot()
	etag := systemETag(on, b)
	w.Header().Set("ETag", etag)
	id := "/redfish/v1/Systems/" + n.SystemID()
	sys := odata(id, "#ComputerSystem.v1_13_0.ComputerSystem")
	sys["@odata.etag"] = etag
	sys["Id"] = n.SystemID()
	sys["UUID"] = n.UUID()
	sys["Bios"] = link(id + "/Bios")
	sys["Name"] = n.Name
	sys["Manufacturer"] = "anvil"
	sys["Model"] = "anvil-vbmc virtual node"
	sys["SystemType"] = "Virtual"
	sys["PowerState"] = power
	sys["BiosVersion"] = s.fw.version(n.Name, FirmwareBIOS)
	health := n.Health()
	sys["Status"] = map[string]any{"State": "Enabled", "Health": health, "HealthRollup": health}
	s.systemInventory(sys, id, n)
	sys["Links"] = map[string]any{"ManagedBy": []any{link("/redfish/v1/Managers/" + n.Name)}}
	sys["Boot"] = map[string]any{
		"BootSourceOverrideTarget":                         b.Target,
		"BootSourceOverrideEnabled":                        b.Enabled,
		"BootSourceOverrideMode":                           b.Mode,
		"BootSourceOverrideTarget@Redfish.AllowableValues": []string{"None", "Pxe", "Hdd", "Cd", "BiosSetup"},
	}
	sys["Actions"] = map[string]any{"#ComputerSystem.Reset": map[string]any{
		"target":                            id + "/Actions/ComputerSystem.Reset",
		"ResetType@Redfish.AllowableValues": ResetTypes(),
	}}
	writeJSON(w, http.StatusOK, sys)
}

func (s *Server) patchSystem(w http.ResponseWriter, r *http.Request, n *Node) {
	var body struct {
		Boot *struct {
			BootSourceOverrideTarget  string
			BootSourceOverrideEnabled string
			BootSourceOverrideMode    string
		}
	}
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		redfishError(w, http.StatusBadRequest, "MalformedJSON", "The request body submitted was malformed JSON: "+err.Error())
		return
	}
	if body.Boot == nil {
		redfishError(w, http.StatusBadRequest, "PropertyNotWritable", "Only Boot can be patched.")
		return
	}
	if !checkIfMatch(w, r, n) {
		return
	}
	if s.getFaults().IgnoreBootPatch {
		s.log.Info("vbmc: fault: ignoring boot override", "node", n.Name)
		w.WriteHeader(http.StatusNoContent)
		return
	}
	err := n.SetBoot(BootOverride{Target: body.Boot.BootSourceOverrideTarget, Enabled: body.Boot.BootSourceOverrideEnabled, Mode: body.Boot.BootSourceOverrideMode})
	if err != nil {
		redfishError(w, http.StatusBadRequest, "PropertyValueNotInList", err.Error())
		return
	}
	s.log.Info("vbmc: boot override", "node", n.Name, "boot", fmt.Sprintf("%+v", n.Boot()))
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) resetSystem(w http.ResponseWriter, r *http.Request, n *Node) {
	var body struct{ ResetType string }
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		redfishError(w, http.StatusBadRequest, "MalformedJSON", "The request body submitted was malformed JSON.")
		return
	}
	if !slices.Contains(ResetTypes(), body.ResetType) {
		redfishError(w, http.StatusBadRequest, "ActionParameterValueNotInList", fmt.Sprintf("ResetType %q is not supported.", body.ResetType))
		return
	}
	if !checkIfMatch(w, r, n) {
		return
	}
	if d := s.getFaults().BusyAfterPowerOff; d > 0 {
		s.mu.Lock()
		off, ok := s.offAt[n.Name]
		s.mu.Unlock()
		if ok && time.Since(off) < d {
			redfishError(w, http.StatusConflict, "ResourceInUse", "The change could not be made because the resource is busy.")
			return
		}
	}
	if err := s.reset(r, n, body.ResetType); err != nil {
		redfishError(w, http.StatusInternalServerError, "InternalError", err.Error())
		return
	}
	if body.ResetType == ResetNmi {
		s.noteNMI(n)
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) reset(r *http.Request, n *Node, resetType string) error {
	wasOn, _ := n.On(r.Context())
	if err := n.Reset(r.Context(), resetType); err != nil {
		return err
	}
	s.log.Info("vbmc: reset", "node", n.Name, "reset_type", resetType)
	on, _ := n.On(r.Context())
	s.fw.afterReset(n.Name, resetType, wasOn, on)
	if wasOn && !on {
		s.mu.Lock()
		s.offAt[n.Name] = time.Now()
		s.mu.Unlock()
	}
	s.biosAtReset(n, resetType, wasOn, on)
	if on != wasOn {
		s.powerEvent(n, on)
	}
	return nil
}

// ipmiToRedfish maps ipmi_sim's chassis-control boot names to Redfish
// targets. ipmitool's "bootdev disk" arrives as "default".
func ipmiToRedfish(dev string) (string, bool) {
	switch dev {
	case "pxe":
		return "Pxe", true
	case "default", "disk":
		return "Hdd", true
	case "cdrom":
		return "Cd", true
	case "bios":
		return "BiosSetup", true
	case "none":
		return "None", true
	}
	return "", false
}

// redfishToIPMI is the reverse, for `get boot`.
func redfishToIPMI(target string) string {
	switch target {
	case "Pxe":
		return "pxe"
	case "Cd":
		return "cdrom"
	case "BiosSetup":
		return "bios"
	case "None":
		return "none"
	}
	return "default"
}

// controlGet answers ipmi_sim's `get power|boot` as "param:value".
func (s *Server) controlGet(w http.ResponseWriter, r *http.Request, n *Node) {
	w.Header().Set("Content-Type", "text/plain")
	switch p := r.PathValue("param"); p {
	case "power":
		on, err := n.On(r.Context())
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		v := 0
		if on {
			v = 1
		}
		fmt.Fprintf(w, "power:%d\n", v)
	case "health":
		fmt.Fprintf(w, "health:%s\n", n.Health())
	case "boot":
		b := n.Boot()
		dev := "default"
		if b.Enabled != OverrideDisabled {
			dev = redfishToIPMI(b.Target)
		}
		fmt.Fprintf(w, "boot:%s\n", dev)
	default:
		http.Error(w, "unknown parameter "+p, http.StatusNotFound)
	}
}

// controlSet applies ipmi_sim's `set power|reset|shutdown|boot|identify
// <value>`. The value is the request body.
func (s *Server) controlSet(w http.ResponseWriter, r *http.Request, n *Node) {
	raw, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusRequestEntityTooLarge)
		return
	}
	val := strings.TrimSpace(string(raw))
	p := r.PathValue("param")
	switch p {
	case "power":
		rt := ResetOn
		if val == "0" {
			rt = ResetForceOff
		}
		err = s.reset(r, n, rt)
	case "reset", "shutdown":
		if val == "0" {
			break
		}
		if n.dedupe(p, 1500*time.Millisecond) {
			s.log.Info("vbmc: ignoring repeated chassis control (ipmitool retransmit)", "node", n.Name, "param", p)
			break
		}
		rt := ResetForceRestart
		if p == "shutdown" {
			rt = ResetGracefulShutdown
		}
		err = s.reset(r, n, rt)
	case "boot":
		target, ok := ipmiToRedfish(val)
		if !ok {
			http.Error(w, "unknown boot device "+val, http.StatusBadRequest)
			return
		}
		enabled := OverrideOnce
		if target == "None" {
			enabled = OverrideDisabled
		}
		err = n.SetBoot(BootOverride{Target: target, Enabled: enabled, Mode: ModeLegacy})
	case "identify":
	case "health":
		if err := n.SetHealth(val); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
	default:
		http.Error(w, "unknown parameter "+p, http.StatusNotFound)
		return
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// ErrControl is returned by ChassisControl for a failed request.
var ErrControl = errors.New("vbmc: chassis control failed")
