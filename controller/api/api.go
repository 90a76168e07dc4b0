// Package api serves the OpenStack Ironic v1 REST API (nodes, ports,
// portgroups, allocations, drivers) over gorilla/mux, so that existing
// clients — the baremetal CLI, gophercloud, Metal3 — work unchanged.
package api

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/gorilla/mux"

	"github.com/anvil-metal/anvil/controller/conductor"
	"github.com/anvil-metal/anvil/controller/store"
)

// maxBody bounds request bodies; node documents are small.
const maxBody = 1 << 20

// Server is the HTTP API.
type Server struct {
	st        store.Store
	cond      *conductor.Conductor
	log       *slog.Logger
	publicURL string // base URL for links; "" = derived from each request
	auth      Authenticator
	metrics   *Metrics
	metricsAt MetricsRoute
	bootDir   string // kernel and initramfs served to nodes ("" = none)
	// firmwareDir holds firmware images served to BMCs ("" = none)
	firmwareDir string
	media       VirtualMedia
	dataImages  DataImages // images of the vmedia API's "local" attaches (vmediaapi.go)
	// tlsPin is the fingerprint of the controller's TLS certificate
	// ("sha256:<hex>"), put on the agent's kernel command line; "" when
	// the controller serves plain HTTP.
	tlsPin    string
	discovery *discoverer
	limiter   *limiter
	router    *mux.Router
	// traitNames are the trait names Ironic accepts.
	traitNames traitNames
	// bufs recycles list response buffers: a detail list of 1000 nodes is
	// ~1.5 MiB, and zeroing a fresh one per request cost ~20% of the time.
	bufs sync.Pool
	// recordsKey verifies the sanitization records (nil: none signed).
	recordsKey ed25519.PublicKey
	timeline   BootTimeline // nil: boots are not recorded
	authz      authzHolder  // policy and identities in force (policy.go)
	// routeRules is the policy rule of every route (policy.go)
	routeRules map[string]routeRule

	consoles       Consoles     // nil: no node has a console
	consoleOwnerOf ConsoleOwner // nil: this controller holds every console
	consoleTCP     string       // host:port of the TCP console port ("": none)
}

// Config wires the server.
type Config struct {
	Store     store.Store
	Conductor *conductor.Conductor
	Logger    *slog.Logger
	PublicURL string
	Auth      Authenticator // nil = noauth
	Metrics   *Metrics      // nil = no /metrics
	BootDir   string        // directory with vmlinuz and initramfs.cpio.gz
	// FirmwareDir holds the firmware images BMCs pull during
	// firmware.update, served at /v1/boot/firmware/{file} ("" = none).
	FirmwareDir string
	// Media serves the per-node ISOs of virtual-media boots (nil: none).
	Media VirtualMedia
	// DataImages serves what the vmedia API downloaded (nil: none).
	DataImages DataImages
	// PublicLimit bounds the unauthenticated endpoints per source; the zero
	// value is no limit (DefaultPublicLimit is a production controller's).
	PublicLimit PublicLimit
	// MetricsRoute says how the API serves /metrics: behind its auth
	// (default), to anyone, or not (served on a listener of its own).
	MetricsRoute MetricsRoute
	// RecordsKey verifies the controller's sanitization records (served
	// at /v1/erase-records/public-key); nil: the controller signs none.
	RecordsKey ed25519.PublicKey
	// TLSFingerprint is the SHA-256 fingerprint ("sha256:<hex>") of the
	// certificate the controller serves HTTPS with; "" = plain HTTP. Boot
	// configurations then send agents to https:// and pin it.
	TLSFingerprint string
	// Discovery enrols unknown machines that boot the ramdisk (off unless
	// Enabled).
	Discovery DiscoveryConfig
	// Timeline records the boot downloads the API serves (nil: none).
	Timeline BootTimeline
	// Authz is the policy and the accounts' roles (zero: Ironic's default
	// policy, every account a system admin).
	Authz Authz
	// Consoles holds the nodes' serial consoles (nil: console_interface
	// ipmitool-socat is refused as unsupported); ConsoleOwner and
	// ConsoleTCP: see console.go.
	Consoles     Consoles
	ConsoleOwner ConsoleOwner
	ConsoleTCP   string
}

// New builds the API handler.
func New(cfg Config) *Server {
	s := &Server{st: cfg.Store, cond: cfg.Conductor, log: cfg.Logger, publicURL: strings.TrimRight(cfg.PublicURL, "/"),
		auth: cfg.Auth, metrics: cfg.Metrics, metricsAt: cfg.MetricsRoute, bootDir: cfg.BootDir, firmwareDir: cfg.FirmwareDir, media: cfg.Media, dataImages: cfg.DataImages, tlsPin: cfg.TLSFingerprint,
		limiter: newLimiter(cfg.PublicLimit, time.Now), traitNames: newTraitNames(),
		discovery: newDiscoverer(cfg.Discovery), recordsKey: cfg.RecordsKey, timeline: cfg.Timeline,
		consoles: cfg.Consoles, consoleOwnerOf: cfg.ConsoleOwner, consoleTCP: cfg.ConsoleTCP}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	s.SetAuthz(cfg.Authz)
	s.routeRules = routeRules()
	s.router = s.routes()
	return s
}

// ServeHTTP implements http.Handler. The query string is read as Ironic
// reads it (webobQuery) and handed on re-encoded, so every handler, and
// every "next" link, sees the same parameters. AllowQuerySemicolons only
// tells net/http that ';' is handled here (it would log each such request).
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	http.AllowQuerySemicolons(http.HandlerFunc(s.serve)).ServeHTTP(w, r)
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	if r.URL.RawQuery != "" {
		v, err := webobQuery(r.URL.RawQuery)
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		r2, u := *r, *r.URL
		u.RawQuery = v.Encode()
		r2.URL = &u
		r = &r2
	}
	s.router.ServeHTTP(w, stripJSONSuffix(r))
}

// handler adapts handlers that return errors.
type handler func(w http.ResponseWriter, r *http.Request) error

func (s *Server) wrap(h handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := h(w, r); err != nil {
			s.writeError(w, r, err)
		}
	})
}

func (s *Server) routes() *mux.Router {
	root := mux.NewRouter()
	root.StrictSlash(false)
	root.Use(s.requestMiddleware)
	root.Handle("/", s.wrap(s.getRoot)).Methods(http.MethodGet)
	if s.metrics != nil {
		switch s.metricsAt {
		case MetricsAuthed:
			root.Handle("/metrics", s.requireAuth(s.metrics.Handler())).Methods(http.MethodGet)
		case MetricsPublic:
			root.Handle("/metrics", s.metrics.Handler()).Methods(http.MethodGet)
		case MetricsElsewhere:
		}
	}
	// Ironic routes requests without the /v1 prefix to v1 as well.
	for _, prefix := range []string{"/v1", ""} {
		sub := root.PathPrefix(prefix).Subrouter()
		sub.Use(s.versionMiddleware)
		s.v1Routes(sub, prefix == "/v1")
	}
	// gorilla/mux reports a method mismatch only when no other route
	// matches, and the unprefixed copy of the v1 routes always does; so an
	// unmatched request is a 405 when the path takes another method.
	notFound := s.wrap(func(http.ResponseWriter, *http.Request) error {
		return errf(http.StatusNotFound, "The resource could not be found.")
	})
	root.NotFoundHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if allow := allowedMethods(root, r); len(allow) > 0 {
			methodNotAllowed(w, r, allow)
			return
		}
		notFound.ServeHTTP(w, r)
	})
	return root
}

// allowedMethods lists the methods root routes for r's path.
func allowedMethods(root *mux.Router, r *http.Request) []string {
	var allow []string
	for _, m := range []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete} {
		if m == r.Method {
			continue
		}
		probe := r.Clone(r.Context())
		probe.Method = m
		var match mux.RouteMatch
		if root.Match(probe, &match) && match.MatchErr == nil && match.Route != nil {
			allow = append(allow, m)
		}
	}
	return allow
}

// methodNotAllowed answers 405 as Ironic (pecan) does, in webob's error
// shape (code, title, description), with the Allow header pecan adds.
func methodNotAllowed(w http.ResponseWriter, r *http.Request, allow []string) {
	w.Header().Set("Allow", strings.Join(allow, ", "))
	writeJSON(w, http.StatusMethodNotAllowed, map[string]any{"error_message": mustJSON(map[string]any{
		"code": http.StatusMethodNotAllowed, "title": "Method Not Allowed",
		"description": fmt.Sprintf("The method %s is not allowed for this resource.", r.Method)})})
}

func (s *Server) v1Routes(r *mux.Router, withRoot bool) {
	authed := func(h handler) http.Handler { return s.requireAuth(s.wrap(h)) }
	if withRoot {
		r.Handle("", authed(s.getV1)).Methods(http.MethodGet)
		r.Handle("/", authed(s.getV1)).Methods(http.MethodGet)
	}
	collection{list: s.listNodes(false), detail: s.listNodes(true), create: s.createNode,
		get: s.getNode, patch: s.patchNode, del: s.deleteNode}.route(r, authed, "/nodes", "node")
	n := "/nodes/{node}"
	r.Handle(n+"/states", authed(s.getStates)).Methods(http.MethodGet)
	r.Handle(n+"/states/provision", authed(s.putProvision)).Methods(http.MethodPut)
	r.Handle(n+"/states/power", authed(s.putPower)).Methods(http.MethodPut)
	r.Handle(n+"/states/raid", authed(s.putRAID)).Methods(http.MethodPut)
	r.Handle(n+"/maintenance", authed(s.putMaintenance)).Methods(http.MethodPut)
	r.Handle(n+"/maintenance", authed(s.deleteMaintenance)).Methods(http.MethodDelete)
	r.Handle(n+"/traits", authed(s.getTraits)).Methods(http.MethodGet)
	r.Handle(n+"/traits", authed(s.putTraits)).Methods(http.MethodPut)
	r.Handle(n+"/traits", authed(s.deleteTraits)).Methods(http.MethodDelete)
	r.Handle(n+"/traits/{trait}", authed(s.putTrait)).Methods(http.MethodPut)
	r.Handle(n+"/traits/{trait}", authed(s.deleteTrait)).Methods(http.MethodDelete)
	r.Handle(n+"/validate", authed(s.validateNode)).Methods(http.MethodGet)
	r.Handle(n+"/history", authed(s.getHistory)).Methods(http.MethodGet)
	r.Handle(n+"/cleaning/steps", authed(s.cleaningSteps)).Methods(http.MethodGet)
	r.Handle(n+"/inventory", authed(s.inventory)).Methods(http.MethodGet)
	r.Handle(n+"/bios", authed(s.listBIOS)).Methods(http.MethodGet)
	r.Handle(n+"/bios/{setting}", authed(s.getBIOSSetting)).Methods(http.MethodGet)
	r.Handle(n+"/firmware", authed(s.listFirmware)).Methods(http.MethodGet)
	r.Handle(n+"/children", authed(s.listChildren)).Methods(http.MethodGet)
	r.Handle(n+"/steps/results", authed(s.stepResults)).Methods(http.MethodGet)
	r.Handle(n+"/boot-timeline", authed(s.bootTimeline)).Methods(http.MethodGet)
	r.Handle(n+"/sel", authed(s.getSEL)).Methods(http.MethodGet)
	r.Handle(n+"/management/inject_nmi", authed(s.injectNMI)).Methods(http.MethodPut)
	s.consoleRoutes(r, authed)
	r.Handle(n+"/erase-records", authed(s.eraseRecords)).Methods(http.MethodGet)
	r.Handle("/erase-records/public-key", authed(s.recordsPublicKey)).Methods(http.MethodGet)
	r.Handle("/whoami", authed(s.whoami)).Methods(http.MethodGet)
	r.Handle(n+"/agent_token", authed(s.resetAgentToken)).Methods(http.MethodDelete)
	// agent endpoints are public, as in Ironic: the agent proves itself
	// with the per-boot token, not with operator credentials; each source
	// address gets a bounded rate of them
	public := func(route string, h handler) http.Handler { return s.limitPublic(route, s.wrap(h)) }
	r.Handle("/lookup", public("lookup", s.lookup)).Methods(http.MethodGet)
	r.Handle("/heartbeat/{node}", public("heartbeat", s.heartbeat)).Methods(http.MethodPost)
	r.Handle("/discovery", public("discovery", s.discover)).Methods(http.MethodPost)
	r.Handle("/continue_inspection", public("continue_inspection", s.continueInspection)).Methods(http.MethodPost)
	r.Handle("/boot/files/{file}", public("boot_file", s.bootFile)).Methods(http.MethodGet, http.MethodHead)
	r.Handle("/boot/firmware/{file}", public("boot_file", s.firmwareImage)).Methods(http.MethodGet, http.MethodHead)
	r.Handle("/boot/{node}/ipxe", public("boot_script", s.bootScript)).Methods(http.MethodGet)
	r.Handle("/boot/{node}/grub", public("boot_script", s.bootGrub)).Methods(http.MethodGet)
	r.Handle("/boot/{node}/vmedia/{key:[0-9a-f]{1,64}}.iso", public("boot_file", s.bootISO)).Methods(http.MethodGet, http.MethodHead)
	s.vmediaRoutes(r, authed, public)
	ports, portgroups := s.ports(), s.portgroups()
	r.Handle(n+"/ports", authed(ports.list)).Methods(http.MethodGet)
	r.Handle(n+"/portgroups", authed(portgroups.list)).Methods(http.MethodGet)
	ports.route(r, authed, "/ports", "port")
	portgroups.route(r, authed, "/portgroups", "pg")
	collection{list: s.listAllocations, create: s.createAllocation, get: s.getAllocation(s.loadAllocation),
		patch: s.patchAllocation, del: s.deleteAllocation(s.loadAllocation)}.
		route(r, func(h handler) http.Handler { return authed(allocationsGate(h)) }, "/allocations", "alloc")
	r.Handle(n+"/vifs", authed(s.listVIFs)).Methods(http.MethodGet)
	r.Handle(n+"/vifs", authed(s.attachVIF)).Methods(http.MethodPost)
	r.Handle(n+"/vifs/{vif}", authed(s.detachVIF)).Methods(http.MethodDelete)
	r.Handle(n+"/allocation", authed(s.getAllocation(s.nodeAllocation))).Methods(http.MethodGet)
	r.Handle(n+"/allocation", authed(s.deleteAllocation(s.nodeAllocation))).Methods(http.MethodDelete)
	s.chassis().route(r, authed, "/chassis", "chassis")
	r.Handle("/chassis/{chassis}/nodes", authed(s.listChassisNodes(false))).Methods(http.MethodGet)
	r.Handle("/chassis/{chassis}/nodes/detail", authed(s.listChassisNodes(true))).Methods(http.MethodGet)
	s.volumeRoutes(r, authed)
	for _, p := range []string{"/drivers", "/drivers/"} {
		r.Handle(p, authed(s.listDrivers)).Methods(http.MethodGet)
	}
	r.Handle("/drivers/{driver}", authed(s.getDriver)).Methods(http.MethodGet)
	for _, p := range []string{"/conductors", "/conductors/"} {
		r.Handle(p, authed(s.listConductors)).Methods(http.MethodGet)
	}
	r.Handle("/conductors/{hostname}", authed(s.getConductor)).Methods(http.MethodGet)
	deployTemplates.collection(s).route(r, authed, "/deploy_templates", "template")
	runbooks.collection(s).route(r, authed, "/runbooks", "runbook")
	collection{list: s.listInspectionRules, create: s.createInspectionRule, get: s.getInspectionRule,
		patch: s.patchInspectionRule, del: s.deleteInspectionRule}.
		route(r, func(h handler) http.Handler { return authed(rulesGate(h)) }, "/inspection_rules", "rule")
	r.Handle("/drivers/{driver}/properties", authed(s.getDriverProperties)).Methods(http.MethodGet)
	r.Handle("/drivers/{driver}/raid/logical_disk_properties", authed(s.getRAIDProperties)).Methods(http.MethodGet)
}

// collection is the handlers of an Ironic collection, routed alike for
// every kind by route.
type collection struct {
	list, detail            handler // detail: nil where the kind has no /detail
	create, get, patch, del handler
}

// route routes list and create at base (with and without the trailing
// slash), the detailed list, then get, patch and delete of the member that
// {member} names; /detail goes first, as {member} would take it for a name.
func (c collection) route(r *mux.Router, wrap func(handler) http.Handler, base, member string) {
	for _, p := range []string{base, base + "/"} {
		r.Handle(p, wrap(c.list)).Methods(http.MethodGet)
		r.Handle(p, wrap(c.create)).Methods(http.MethodPost)
	}
	if c.detail != nil {
		r.Handle(base+"/detail", wrap(c.detail)).Methods(http.MethodGet)
	}
	one := base + "/{" + member + "}"
	r.Handle(one, wrap(c.get)).Methods(http.MethodGet)
	r.Handle(one, wrap(c.patch)).Methods(http.MethodPatch)
	r.Handle(one, wrap(c.del)).Methods(http.MethodDelete)
}

// statusRecorder captures the status for logs and metrics.
type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (r *statusRecorder) WriteHeader(code int) {
	r.status = code
	r.ResponseWriter.WriteHeader(code)
}

// Unwrap lets http.ResponseController reach the connection's writer.
func (r *statusRecorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// requestMiddleware assigns a request id, bounds the body, forces JSON
// responses, and logs and measures each request.
func (s *Server) requestMiddleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		id := "req-" + uuid.NewString()
		setRequestID(w.Header(), id)
		ctx := context.WithValue(r.Context(), ctxRequestID, id)
		r = r.WithContext(context.WithValue(ctx, ctxBase, s.baseURL(r)))
		r.Body = http.MaxBytesReader(w, r.Body, bodyLimit(r.URL.Path))
		rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
		next.ServeHTTP(rec, r)
		route := "unmatched"
		if cr := mux.CurrentRoute(r); cr != nil {
			if t, err := cr.GetPathTemplate(); err == nil {
				route = t
			}
		}
		elapsed := time.Since(start)
		if s.metrics != nil {
			s.metrics.observe(r.Method, route, rec.status, elapsed)
		}
		level := slog.LevelDebug
		if rec.status >= 500 {
			level = slog.LevelError
		} else if r.Method != http.MethodGet {
			level = slog.LevelInfo
		}
		s.log.Log(r.Context(), level, "request", "request_id", id, "global_request_id", globalRequestID(r),
			"method", r.Method, "route", route,
			"node", mux.Vars(r)["node"], "status", rec.status, "duration_ms", float64(elapsed.Microseconds())/1000)
	})
}

// baseURL is the URL clients use to reach us: --public-url, or the request's host.
func (s *Server) baseURL(r *http.Request) string {
	if s.publicURL != "" {
		return s.publicURL
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return scheme + "://" + r.Host
}

func (s *Server) links(r *http.Request, resource string) []link {
	return linksAt(s.baseURL(r), resource)
}

func linksAt(base, resource string) []link {
	return []link{{base + "/v1/" + resource, "self"}, {base + "/" + resource, "bookmark"}}
}

// baseFromContext returns the base URL computed once per request.
func baseFromContext(r *http.Request, s *Server) string {
	if b, ok := r.Context().Value(ctxBase).(string); ok {
		return b
	}
	return s.baseURL(r)
}

func (s *Server) versionDoc(r *http.Request) map[string]any {
	return map[string]any{"id": "v1", "links": []link{{s.baseURL(r) + "/v1/", "self"}},
		"status": "CURRENT", "min_version": fmt.Sprintf("1.%d", minMinor), "version": fmt.Sprintf("1.%d", maxMinor)}
}

func (s *Server) getRoot(w http.ResponseWriter, r *http.Request) error {
	v := s.versionDoc(r)
	writeJSON(w, http.StatusOK, map[string]any{
		"name":            "OpenStack Ironic API",
		"description":     "Ironic is an OpenStack project which enables the provision and management of baremetal machines. (served by anvil)",
		"default_version": v, "versions": []any{v}})
	return nil
}

func (s *Server) getV1(w http.ResponseWriter, r *http.Request) error {
	ver := version(r.Context())
	doc := map[string]any{
		"id":          "v1",
		"links":       []link{{s.baseURL(r) + "/v1/", "self"}, {"https://docs.openstack.org//ironic/latest/contributor//webapi.html", "describedby"}},
		"media_types": []map[string]string{{"base": "application/json", "type": "application/vnd.openstack.ironic.v1+json"}},
		"chassis":     s.links(r, "chassis/"),
		"nodes":       s.links(r, "nodes/"),
		"ports":       s.links(r, "ports/"),
		"drivers":     s.links(r, "drivers/"),
		"version":     s.versionDoc(r),
	}
	if ver >= 23 {
		doc["portgroups"] = s.links(r, "portgroups/")
	}
	if ver >= 22 {
		doc["lookup"] = s.links(r, "lookup/")
		doc["heartbeat"] = s.links(r, "heartbeat/")
	}
	if ver >= volumeVersion {
		doc["volume"] = s.links(r, "volume/")
	}
	if ver >= 52 {
		doc["allocations"] = s.links(r, "allocations/")
	}
	if ver >= 49 {
		doc["conductors"] = s.links(r, "conductors/")
	}
	if ver >= 55 {
		doc["deploy_templates"] = s.links(r, "deploy_templates/")
	}
	if ver >= runbooksVersion {
		doc["runbooks"] = s.links(r, "runbooks/")
	}
	if ver >= inspectionRulesVersion {
		doc["inspection_rules"] = s.links(r, "inspection_rules/")
	}
	writeJSON(w, http.StatusOK, doc)
	return nil
}

// decodeBody reads (readBody) and decodes a JSON body strictly (unknown
// fields are refused).
func decodeBody(r *http.Request, v any) error {
	body, err := readBody(r)
	if err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return bodyError(err)
	}
	if dec.More() {
		return badRequest("Malformed JSON body: trailing data after the JSON document")
	}
	return nil
}

func bodyError(err error) error {
	var mbe *http.MaxBytesError
	if asMaxBytes(err, &mbe) {
		return errf(http.StatusRequestEntityTooLarge, "Request body is larger than %d bytes", mbe.Limit)
	}
	if isTimeout(err) {
		return errf(http.StatusRequestTimeout, "The request body did not arrive in time; the connection is closed.")
	}
	msg := err.Error()
	if strings.HasPrefix(msg, "json: unknown field ") {
		return badRequest("Unexpected arguments: %s", strings.Trim(strings.TrimPrefix(msg, "json: unknown field "), `"`))
	}
	return badRequest("Malformed JSON body: %s", msg)
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
