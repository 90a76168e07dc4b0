package ipa

import (
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"time"
)

// maxBody bounds a command request. Ironic's largest is prepare_image or
// write_image with a base64 configdrive (at most 64 MiB in Ironic).
const maxBody = 96 << 20

// Server is IPA's REST API (ironic_python_agent/api/app.py) on the agent's
// port: Ironic pushes commands to it.
type Server struct {
	Commands *Commands
	Version  string
	Started  time.Time
	Log      *slog.Logger

	token  atomic.Pointer[string] // the agent token from lookup
	locked atomic.Bool            // system.lockdown was run
}

// SetToken sets the agent token commands must carry.
func (s *Server) SetToken(t string) { s.token.Store(&t) }

// tokenOK checks a request's agent_token. IPA 2023.1 only checks it on
// POST and compares for equality; we never accept a missing token when we
// hold one, and compare in constant time.
func (s *Server) tokenOK(got string) bool {
	want := s.token.Load()
	if want == nil || *want == "" {
		return false
	}
	return subtle.ConstantTimeCompare([]byte(got), []byte(*want)) == 1
}

// ServeHTTP routes IPA's URLs, with and without the /v1 prefix as IPA does.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if s.locked.Load() {
		writeFault(w, &fault{503, "503 Service Unavailable: the agent is locked down"})
		return
	}
	path := r.URL.Path
	if path == "/" {
		s.get(w, r, s.root)
		return
	}
	if path == "/v1/" || path == "/v1" {
		s.get(w, r, s.v1)
		return
	}
	path = strings.TrimPrefix(path, "/v1")
	switch {
	case path == "/status":
		s.get(w, r, func(w http.ResponseWriter, _ *http.Request) {
			writeJSON(w, 200, map[string]any{"started_at": float64(s.Started.UnixNano()) / 1e9, "version": s.Version})
		})
	case path == "/commands/" || path == "/commands":
		switch r.Method {
		case http.MethodGet, http.MethodHead:
			s.list(w, r)
		case http.MethodPost:
			s.run(w, r)
		default:
			writeFault(w, &fault{405, "405 Method Not Allowed: The method is not allowed for the requested URL."})
		}
	case strings.HasPrefix(path, "/commands/"):
		s.get(w, r, func(w http.ResponseWriter, r *http.Request) { s.command(w, r, strings.TrimPrefix(path, "/commands/")) })
	default:
		writeFault(w, &fault{404, "404 Not Found: The requested URL was not found on the server. If you entered the URL manually please check your spelling and try again."})
	}
}

func (s *Server) get(w http.ResponseWriter, r *http.Request, h http.HandlerFunc) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		writeFault(w, &fault{405, "405 Method Not Allowed: The method is not allowed for the requested URL."})
		return
	}
	h(w, r)
}

func rootURL(r *http.Request) string {
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return scheme + "://" + r.Host
}

func link(href, rel string) map[string]string { return map[string]string{"href": href, "rel": rel} }

// version is IPA's version object; the hrefs are what IPA's make_link
// builds for bookmark links (no trailing slash on self, one on the docs).
func version(url string) map[string]any {
	return map[string]any{"id": "v1", "links": []any{
		link(url+"/v1", "self"),
		map[string]string{"href": "https://docs.openstack.org/ironic-python-agent/", "rel": "describedby", "type": "text/html"},
	}}
}

func (s *Server) root(w http.ResponseWriter, r *http.Request) {
	u := rootURL(r)
	writeJSON(w, 200, map[string]any{
		"name":            "OpenStack Ironic Python Agent API",
		"description":     "Ironic Python Agent is a provisioning agent for OpenStack Ironic",
		"versions":        []any{version(u)},
		"default_version": version(u),
	})
}

func (s *Server) v1(w http.ResponseWriter, r *http.Request) {
	u := rootURL(r)
	out := version(u)
	out["commands"] = []any{link(u+"/v1/commands", "self"), link(u+"/commands", "bookmark")}
	out["status"] = []any{link(u+"/v1/status", "self"), link(u+"/status", "bookmark")}
	out["media_types"] = []any{map[string]string{"base": "application/json", "type": "application/vnd.openstack.ironic-python-agent.v1+json"}}
	writeJSON(w, 200, out)
}

// readerAuth decides what a GET may see. Ironic 21.4 polls the command
// list without a token (IPA 2023.1 allows it), so a tokenless reader gets
// statuses and results but not the parameters (node, ports, image URLs);
// a wrong token is refused.
func (s *Server) readerAuth(w http.ResponseWriter, r *http.Request) (full, ok bool) {
	tok, given := r.URL.Query()["agent_token"]
	if !given {
		return false, true
	}
	if len(tok) != 1 || !s.tokenOK(tok[0]) {
		writeFault(w, &fault{401, "401 Unauthorized: Token invalid."})
		return false, false
	}
	return true, true
}

func redact(res Result, full bool) Result {
	if !full {
		res.Params = nil
	}
	return res
}

func (s *Server) list(w http.ResponseWriter, r *http.Request) {
	full, ok := s.readerAuth(w, r)
	if !ok {
		return
	}
	list := s.Commands.List()
	for i := range list {
		list[i] = redact(list[i], full)
	}
	writeJSON(w, 200, map[string]any{"commands": list})
}

func (s *Server) command(w http.ResponseWriter, r *http.Request, id string) {
	full, ok := s.readerAuth(w, r)
	if !ok {
		return
	}
	res, done, found := s.Commands.Get(id)
	if !found {
		writeFault(w, &fault{404, fmt.Sprintf("Not found: Command Result with id %s not found.", id)})
		return
	}
	if wantWait(r) {
		res = s.wait(r, id, res, done)
	}
	writeJSON(w, 200, redact(*res, full))
}

func wantWait(r *http.Request) bool { return strings.EqualFold(r.URL.Query().Get("wait"), "true") }

// wait blocks until the command is done or the caller goes away (IPA joins
// the thread without a limit; Ironic's own request timeout bounds it).
func (s *Server) wait(r *http.Request, id string, res *Result, done <-chan struct{}) *Result {
	select {
	case <-done:
	case <-r.Context().Done():
		return res
	}
	if now, _, ok := s.Commands.Get(id); ok {
		return now
	}
	return res
}

// CommandRequest is the body of POST /v1/commands/.
type CommandRequest struct {
	Name   string         `json:"name"`
	Params map[string]any `json:"params"`
}

// ParseCommandRequest reads a command request as IPA's API does: a JSON
// object with a string name and an object params (which may be empty).
func ParseCommandRequest(body []byte) (CommandRequest, error) {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(body, &raw); err != nil {
		return CommandRequest{}, &fault{400, "400 Bad Request: Failed to decode JSON object: " + err.Error()}
	}
	bad := &fault{400, "400 Bad Request: Missing or invalid name or params"}
	var req CommandRequest
	name, okName := raw["name"]
	params, okParams := raw["params"]
	if !okName || !okParams {
		return req, bad
	}
	if err := json.Unmarshal(name, &req.Name); err != nil {
		return req, bad
	}
	if err := json.Unmarshal(params, &req.Params); err != nil || req.Params == nil {
		return req, bad
	}
	return req, nil
}

func (s *Server) run(w http.ResponseWriter, r *http.Request) {
	// IPA's order: a malformed body is refused before the token is
	// looked at. Neither answer tells a stranger anything.
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	if err != nil {
		writeFault(w, &fault{400, "400 Bad Request: " + err.Error()})
		return
	}
	if len(body) > maxBody {
		writeFault(w, &fault{413, "413 Request Entity Too Large: The data value transmitted exceeds the capacity limit."})
		return
	}
	req, err := ParseCommandRequest(body)
	if err != nil {
		writeFault(w, err)
		return
	}
	if !s.tokenOK(r.URL.Query().Get("agent_token")) {
		s.Log.Warn("ipa: command with an invalid agent token refused", "command", req.Name, "remote", r.RemoteAddr)
		writeFault(w, &fault{401, "401 Unauthorized: Token invalid."})
		return
	}
	res, done, err := s.Commands.Execute(req.Name, req.Params)
	if err != nil {
		writeFault(w, err)
		return
	}
	if wantWait(r) {
		res = s.wait(r, res.ID, res, done)
	}
	writeJSON(w, 200, *res)
}

// Lockdown refuses every later request (system.lockdown). It reports
// whether this call locked the server: two lockdown commands that passed
// the check at the door together must not both act.
func (s *Server) Lockdown() bool { return s.locked.CompareAndSwap(false, true) }

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		// A result the hardware managers built that cannot be encoded
		// is a bug; answer it in IPA's shape rather than a torn body.
		status = 500
		b, _ = json.Marshal(map[string]string{"faultcode": "Server", "faultstring": "cannot encode the result: " + err.Error()})
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

func writeFault(w http.ResponseWriter, err error) {
	var f *fault
	if !errors.As(err, &f) {
		f = &fault{500, err.Error()}
	}
	code := "Client"
	if f.status >= 500 {
		code = "Server"
	}
	writeJSON(w, f.status, map[string]string{"faultcode": code, "faultstring": f.msg})
}
