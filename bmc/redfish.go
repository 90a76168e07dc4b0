package bmc

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	bmclib "github.com/bmc-toolbox/bmclib/v2"
	"github.com/bmc-toolbox/bmclib/v2/providers/redfish"
	"github.com/go-logr/logr"
	"github.com/jacobweinstock/registrar"
)

// redfishOpener opens bmclib clients restricted to the gofish provider.
type redfishOpener struct {
	log     *slog.Logger
	timeout time.Duration
}

func (o redfishOpener) open(ctx context.Context, t Target) (session, error) {
	s, err := o.openAuth(ctx, t, false)
	if err != nil && s != nil && s.tr.sessionsUnsupported() {
		// Some BMCs have no SessionService (or refuse to create sessions);
		// like sushy, fall back to HTTP basic authentication.
		o.log.InfoContext(ctx, "bmc: redfish sessions unsupported, using basic auth", "bmc", t)
		s, err = o.openAuth(ctx, t, true)
	}
	if err != nil {
		return nil, err
	}
	return s, nil
}

// openAuth logs in with a session, or with basic auth. On failure it
// returns the half-built session too, for its transport's diagnosis.
//
// Basic auth is done by the transport: bmclib v2.3.0's gofish provider
// drops its UseBasicAuth option (providers/redfish.New never passes it to
// the wrapper), so gofish always logs in with a session.
func (o redfishOpener) openAuth(ctx context.Context, t Target, basicAuth bool) (*redfishSession, error) {
	tr, err := newRedfishTransport(t, o.timeout)
	if err != nil {
		return nil, err
	}
	tr.basicAuth = basicAuth
	lg := logr.FromSlogHandler(o.log.Handler())
	// bmclib appends ":"+port to the host, so the host must not carry one.
	host := t.Scheme + "://" + urlHost(t.Host)
	// The provider is built here and handed to bmclib in a registry of its
	// own (which also keeps every other provider out) so that it gets our
	// http.Client. Through bmclib.NewClient it could not: in v2.3.0
	// WithRedfishHTTPClient is never read, and WithHTTPClient's transport is
	// cloned with a type assertion to *http.Transport, which panics on the
	// recording/system-selecting transport below.
	conn := redfish.New(host, t.Username, t.Password, lg,
		redfish.WithHttpClient(&http.Client{Transport: tr}),
		redfish.WithPort(strconv.Itoa(t.Port)))
	reg := registrar.NewRegistry(registrar.WithLogger(lg))
	reg.Register(redfish.ProviderName, redfish.ProviderProtocol, redfish.Features, nil, conn)
	cl := bmclib.NewClient(host, t.Username, t.Password, bmclib.WithRegistry(reg), bmclib.WithLogger(lg))

	s := &redfishSession{cl: cl, tr: tr, endpoint: redfishEndpoint(t)}
	if err := cl.Open(ctx); err != nil {
		return s, s.classify(ctx, fmt.Errorf("redfish login: %w", err))
	}
	return s, nil
}

func urlHost(h string) string {
	if strings.Contains(h, ":") {
		return "[" + h + "]"
	}
	return h
}

type redfishSession struct {
	cl       *bmclib.Client
	tr       *redfishTransport
	endpoint string // base URL for clients other than bmclib's
}

func (s *redfishSession) provider() string {
	if p := s.cl.GetMetadata().SuccessfulProvider; p != "" {
		return p
	}
	return redfish.ProviderName
}

func (s *redfishSession) close(ctx context.Context) { _ = s.cl.Close(ctx) }

// classify turns a bmclib error into a classified one using what the
// transport saw, since bmclib reduces HTTP statuses to strings.
func (s *redfishSession) classify(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	err = flatten(err)
	status, terr, selErr := s.tr.failure()
	switch {
	case selErr != nil:
		return classified(kindInvalid, selErr)
	case status == http.StatusNotFound && s.tr.systemID != "" && s.tr.notFound(s.tr.systemID):
		return classified(kindInvalid, fmt.Errorf("redfish_system_id %s: no such system on the BMC (HTTP 404)", s.tr.systemID))
	case isTLSOrProtocol(terr):
		// Retrying cannot fix a certificate or an HTTP/HTTPS mismatch.
		return fmt.Errorf("check redfish_address scheme and redfish_verify_ca: %w", err)
	case status == 0 && ctx.Err() != nil:
		return classified(kindUnreachable, err)
	}
	kind := redfishKind(status, err.Error(), terr)
	if status != 0 && kind != kindPermanent {
		err = fmt.Errorf("HTTP %d: %w", status, err)
	}
	return classified(kind, err)
}

func isTLSOrProtocol(err error) bool {
	if err == nil {
		return false
	}
	var cv *tls.CertificateVerificationError
	var ua x509.UnknownAuthorityError
	var hn x509.HostnameError
	var ci x509.CertificateInvalidError
	var rh tls.RecordHeaderError
	return errors.As(err, &cv) || errors.As(err, &ua) || errors.As(err, &hn) || errors.As(err, &ci) ||
		errors.As(err, &rh) || strings.Contains(err.Error(), "HTTP response to HTTPS client")
}

func (s *redfishSession) powerState(ctx context.Context) (PowerState, error) {
	s.tr.reset()
	st, err := s.cl.GetPowerState(ctx)
	if err != nil {
		return PowerUnknown, s.classify(ctx, err)
	}
	switch strings.ToLower(st) {
	case "on":
		return PowerOn, nil
	case "off":
		return PowerOff, nil
	}
	// PoweringOn, PoweringOff, Paused: not settled yet.
	return PowerUnknown, nil
}

func (s *redfishSession) setPower(ctx context.Context, p primitive) error {
	// Ironic's mapping: reboot is ForceRestart (bmclib "cycle"), cycle is
	// PowerCycle (bmclib "reset", which falls back to soft off + on).
	state := map[primitive]string{primOn: "on", primOff: "off", primSoft: "soft", primReset: "cycle", primCycle: "reset"}[p]
	if state == "" {
		return fmt.Errorf("%w: power command %q", ErrUnsupported, p)
	}
	s.tr.reset()
	ok, err := s.cl.SetPowerState(ctx, state)
	if p == primSoft && s.tr.resetAccepted() {
		// bmclib v2.3.0 returns ok=false from "soft" even when the BMC
		// accepted the GracefulShutdown; the read-back decides.
		return nil
	}
	return s.classify(ctx, bmclibResult(ok, err))
}

func (s *redfishSession) setBoot(ctx context.Context, dev BootDevice, opts BootOptions) error {
	s.tr.reset()
	return s.classify(ctx, bmclibResult(s.cl.SetBootDevice(ctx, string(dev), opts.Persistent, opts.EFI)))
}

func (s *redfishSession) bootOverride(ctx context.Context) (bootOverride, error) {
	s.tr.reset()
	o, err := s.cl.GetBootDeviceOverride(ctx)
	if err != nil {
		if status, terr, selErr := s.tr.failure(); status == 0 && terr == nil && selErr == nil {
			// The BMC answered but with a target bmclib does not map
			// (e.g. UefiHttp): a mismatch, not a failure.
			return bootOverride{Device: BootDevice("unrecognised target"), OptsKnown: true}, nil
		}
		return bootOverride{}, s.classify(ctx, err)
	}
	return bootOverride{
		Device:    BootDevice(o.Device),
		Opts:      BootOptions{Persistent: o.IsPersistent, EFI: o.IsEFIBoot},
		OptsKnown: true,
	}, nil
}

// redfishTransport sits under gofish. It records what bmclib hides (HTTP
// status of failed requests, network errors, whether a Reset action was
// accepted) and narrows the Systems collection to the target's system.
//
// Why narrow: bmclib v2.3.0 never takes a system id. GetPowerState and
// GetBootDeviceOverride read the first member of /redfish/v1/Systems, while
// SetPowerState and SetBootDevice act on every member. On a BMC with several
// systems (a chassis manager, or anvil-vbmc with several nodes) that would
// power the whole enclosure. Rewriting the collection to the one member named
// by redfish_system_id makes every bmclib call target exactly that system.
// Without redfish_system_id a BMC with more than one system is refused, as
// Ironic does.
type redfishTransport struct {
	base     http.RoundTripper
	systemID string
	// basicAuth answers gofish's session login locally and sends the
	// credentials as HTTP basic auth on every request instead.
	basicAuth      bool
	user, password string

	mu      sync.Mutex
	status  int             // status of the last failed request
	failReq string          // method and path of the last failed request
	netErr  error           // last network error
	selErr  error           // system selection failure
	resetOK bool            // a ComputerSystem.Reset POST got 2xx
	missing map[string]bool // paths that answered 404
	token   string          // X-Auth-Token of the session bmclib opened
	health  Health          // Status.Health of the last ComputerSystem read (health.go)
}

func newRedfishTransport(t Target, timeout time.Duration) (*redfishTransport, error) {
	tlsCfg := &tls.Config{InsecureSkipVerify: !t.VerifyCA} //nolint:gosec // operator's choice via redfish_verify_ca
	if t.CAFile != "" {
		pem, err := os.ReadFile(t.CAFile)
		if err != nil {
			return nil, classified(kindInvalid, fmt.Errorf("redfish_verify_ca: %w", err))
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, classified(kindInvalid, fmt.Errorf("redfish_verify_ca: %s holds no PEM certificate", t.CAFile))
		}
		tlsCfg.RootCAs = pool
	}
	base := &http.Transport{
		DialContext:           (&net.Dialer{Timeout: timeout}).DialContext,
		TLSClientConfig:       tlsCfg,
		TLSHandshakeTimeout:   timeout,
		ResponseHeaderTimeout: 2 * timeout,
		DisableKeepAlives:     true, // gofish closes every connection anyway
		Proxy:                 nil,  // BMC networks are never behind the environment's proxy
	}
	return &redfishTransport{base: base, systemID: t.SystemID, user: t.Username, password: t.Password, missing: map[string]bool{}}, nil
}

// retarget implements retargeter for a kept session.
func (s *redfishSession) retarget(systemID string) { s.tr.retarget(systemID) }

// retarget points the transport at another system of the BMC, forgetting
// what it learnt of the previous one.
func (tr *redfishTransport) retarget(systemID string) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.systemID, tr.selErr, tr.missing = systemID, nil, map[string]bool{}
}

// reset forgets failures before a new bmclib call.
func (tr *redfishTransport) reset() {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.status, tr.netErr, tr.resetOK, tr.health = 0, nil, false, HealthUnknown
}

func (tr *redfishTransport) failure() (int, error, error) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return tr.status, tr.netErr, tr.selErr
}

// sessionsUnsupported reports whether login failed because the BMC cannot
// create sessions (not because of the credentials).
func (tr *redfishTransport) sessionsUnsupported() bool {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	switch tr.status {
	case http.StatusNotFound, http.StatusMethodNotAllowed, http.StatusNotImplemented:
		return strings.HasPrefix(tr.failReq, http.MethodPost+" ") && strings.Contains(tr.failReq, "Session")
	}
	return false
}

func (tr *redfishTransport) notFound(path string) bool {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return tr.missing[path]
}

func (tr *redfishTransport) resetAccepted() bool {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return tr.resetOK
}

const systemsPath = "/redfish/v1/Systems"

// basicSession is the session URI the transport makes up in basic auth mode.
const basicSession = "/redfish/v1/SessionService/Sessions/anvil-basic-auth"

// basicAuthToken is the token it makes up: the transport swaps it for the
// credentials on every request.
const basicAuthToken = "basic-auth"

func (tr *redfishTransport) setToken(tok string) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.token = tok
}

// sessionToken is the token of the session bmclib logged in with, so that
// other clients on this transport (gofish for the BIOS) share the session
// instead of opening a second one: BMCs allow few sessions.
func (tr *redfishTransport) sessionToken() string {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return tr.token
}

func (tr *redfishTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if tr.basicAuth {
		path := strings.TrimSuffix(req.URL.Path, "/")
		switch {
		case req.Method == http.MethodPost && strings.HasSuffix(path, "/SessionService/Sessions"):
			tr.setToken(basicAuthToken)
			return synthetic(req, http.StatusCreated, map[string]string{"X-Auth-Token": basicAuthToken, "Location": basicSession}), nil
		case req.Method == http.MethodDelete && path == basicSession:
			return synthetic(req, http.StatusNoContent, nil), nil
		}
		req = req.Clone(req.Context())
		req.Header.Del("X-Auth-Token")
		req.SetBasicAuth(tr.user, tr.password)
	}
	resp, err := tr.base.RoundTrip(req)
	if err == nil && resp.StatusCode == http.StatusOK && req.Method == http.MethodGet &&
		strings.TrimSuffix(req.URL.Path, "/") == managersPath && tr.systemID != "" {
		return tr.narrowManagers(req, resp)
	}
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if err != nil {
		tr.netErr = err
		return nil, err
	}
	path := strings.TrimSuffix(req.URL.Path, "/")
	switch {
	case resp.StatusCode >= 300:
		tr.status = resp.StatusCode
		tr.failReq = req.Method + " " + path
		if resp.StatusCode == http.StatusNotFound {
			tr.missing[path] = true
		}
	case req.Method == http.MethodPost && strings.HasSuffix(path, "ComputerSystem.Reset"):
		tr.resetOK = true
	case req.Method == http.MethodPost && strings.HasSuffix(path, "/SessionService/Sessions"):
		tr.token = resp.Header.Get("X-Auth-Token")
	case req.Method == http.MethodGet && path == systemsPath:
		return tr.narrowSystems(resp)
	case req.Method == http.MethodGet && isSystemPath(path):
		return tr.noteHealth(resp)
	}
	return resp, nil
}

// narrowSystems rewrites the Systems collection to the selected member.
// Called with tr.mu held.
func (tr *redfishTransport) narrowSystems(resp *http.Response) (*http.Response, error) {
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	resp.Body.Close()
	if err != nil {
		tr.netErr = err
		return nil, err
	}
	var coll map[string]any
	if err := json.Unmarshal(body, &coll); err != nil {
		return nil, fmt.Errorf("systems collection: %w", err)
	}
	var ids []string
	members, _ := coll["Members"].([]any)
	for _, m := range members {
		if mm, ok := m.(map[string]any); ok {
			if id, ok := mm["@odata.id"].(string); ok {
				ids = append(ids, strings.TrimSuffix(id, "/"))
			}
		}
	}
	_, paged := coll["Members@odata.nextLink"]
	switch {
	case tr.systemID == "" && (len(ids) > 1 || paged):
		tr.selErr = fmt.Errorf("the BMC manages %d systems (%s): set redfish_system_id", len(ids), strings.Join(ids, ", "))
		return nil, tr.selErr
	case tr.systemID == "":
		return replaceBody(resp, body), nil
	case !paged && !slices.Contains(ids, tr.systemID):
		tr.selErr = fmt.Errorf("redfish_system_id %s: not among the BMC's systems (%s)", tr.systemID, strings.Join(ids, ", "))
		return nil, tr.selErr
	}
	// With a paged collection the id may be on a later page: pin it and
	// let the GET of the member itself say whether it exists.
	coll["Members"] = []any{map[string]any{"@odata.id": tr.systemID}}
	coll["Members@odata.count"] = 1
	delete(coll, "Members@odata.nextLink")
	out, err := json.Marshal(coll)
	if err != nil {
		return nil, err
	}
	return replaceBody(resp, out), nil
}

const managersPath = "/redfish/v1/Managers"

// narrowManagers rewrites the Managers collection to the managers of the
// selected system (its Links.ManagedBy): bmclib's virtual media calls eject
// and insert on every manager, which on a BMC serving several systems
// would reach the other systems' CDs.
func (tr *redfishTransport) narrowManagers(req *http.Request, resp *http.Response) (*http.Response, error) {
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	fail := func(err error) (*http.Response, error) {
		tr.mu.Lock()
		defer tr.mu.Unlock()
		tr.selErr = fmt.Errorf("redfish_system_id %s: cannot tell which manager serves it: %w", tr.systemID, err)
		return nil, tr.selErr
	}
	sub := req.Clone(req.Context())
	sub.URL.Path, sub.Body, sub.ContentLength = tr.systemID, nil, 0
	sresp, err := tr.base.RoundTrip(sub)
	if err != nil {
		return fail(err)
	}
	defer sresp.Body.Close()
	if sresp.StatusCode != http.StatusOK {
		return fail(fmt.Errorf("GET %s: HTTP %d", tr.systemID, sresp.StatusCode))
	}
	var sys struct {
		Links struct {
			ManagedBy []struct {
				ID string `json:"@odata.id"`
			}
		}
	}
	if err := json.NewDecoder(io.LimitReader(sresp.Body, 4<<20)).Decode(&sys); err != nil {
		return fail(err)
	}
	var keep []any
	for _, m := range sys.Links.ManagedBy {
		keep = append(keep, map[string]any{"@odata.id": m.ID})
	}
	if len(keep) == 0 {
		return fail(errors.New("the system lists no Links.ManagedBy"))
	}
	var coll map[string]any
	if err := json.Unmarshal(body, &coll); err != nil {
		return fail(fmt.Errorf("managers collection: %w", err))
	}
	coll["Members"], coll["Members@odata.count"] = keep, len(keep)
	delete(coll, "Members@odata.nextLink")
	out, err := json.Marshal(coll)
	if err != nil {
		return nil, err
	}
	return replaceBody(resp, out), nil
}

func synthetic(req *http.Request, status int, headers map[string]string) *http.Response {
	resp := &http.Response{
		StatusCode: status, Status: http.StatusText(status), Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: http.Header{"Content-Type": []string{"application/json"}}, Request: req,
	}
	for k, v := range headers {
		resp.Header.Set(k, v)
	}
	return replaceBody(resp, []byte("{}"))
}

func replaceBody(resp *http.Response, body []byte) *http.Response {
	resp.Body = io.NopCloser(bytes.NewReader(body))
	resp.ContentLength = int64(len(body))
	resp.Header.Set("Content-Length", strconv.Itoa(len(body)))
	return resp
}
