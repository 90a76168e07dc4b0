// Package ui serves the operator dashboard at /ui/: static files embedded
// in the binary (plain HTML, CSS and JavaScript, nothing fetched from
// elsewhere) that drive the Ironic API of the same controller, plus the
// few read-only endpoints the API lacks: fleet counts per state, a compact
// fleet page, a node with its running step worked out, a node's cached BIOS
// settings (with the BMC's pending values) and firmware versions, and one
// server-sent event stream per open page.
package ui

import (
	"context"
	"embed"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"sync"
)

//go:embed static
var staticFiles embed.FS

// Authenticator decides whether a request may read the dashboard; it is
// the API's own (HTTP basic when the controller uses it).
type Authenticator interface {
	Authenticate(r *http.Request) bool
}

// Counter counts nodes per provision state from an index, without
// reading any node document.
type Counter interface {
	CountNodesByState(ctx context.Context) (map[string]int, error)
}

// Policy says what the logged-in account may see and do: the API's
// policy, asked for the dashboard's own answers (its counts, and the
// buttons it shows).
type Policy interface {
	// NodeActions says which actions (provision, clean_steps, power,
	// maintenance, retire) the account may take on a node of that owner
	// and lessee.
	NodeActions(r *http.Request, owner, lessee string) map[string]bool
	// SeesAllNodes says whether the account may list every node.
	SeesAllNodes(r *http.Request) bool
}

// Config wires the dashboard.
type Config struct {
	// API is the controller's Ironic API; the dashboard's own endpoints
	// read through it, so filtering, paging, secret masking and
	// authentication have one definition.
	API    http.Handler
	Counts Counter
	Auth   Authenticator // nil = noauth
	// BIOS is the cache of the nodes' BIOS settings and firmware versions
	// (the store); nil: the node page has neither.
	BIOS   BIOSCache
	Logger *slog.Logger
	// Policy limits the counts and the buttons to what the account may
	// see and do (nil: everything, as noauth).
	Policy Policy
}

// Handler serves /ui/.
type Handler struct {
	api    http.Handler
	counts Counter
	cache  BIOSCache
	auth   Authenticator
	policy Policy
	log    *slog.Logger
	mux    *http.ServeMux

	// done ends the event streams when the server shuts down: an open
	// stream would otherwise hold http.Server.Shutdown for its full timeout.
	done     chan struct{}
	doneOnce sync.Once
}

// New builds the dashboard handler.
func New(cfg Config) *Handler {
	h := &Handler{api: cfg.API, counts: cfg.Counts, cache: cfg.BIOS, auth: cfg.Auth, policy: cfg.Policy, log: cfg.Logger, done: make(chan struct{})}
	if h.log == nil {
		h.log = slog.New(slog.DiscardHandler)
	}
	m := http.NewServeMux()
	m.HandleFunc("GET /ui", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/ui/", http.StatusMovedPermanently)
	})
	m.HandleFunc("GET /ui/{$}", h.index)
	m.Handle("GET /ui/static/", http.StripPrefix("/ui/", http.FileServerFS(staticFiles)))
	m.HandleFunc("GET /ui/api/counts", h.countsHandler)
	m.HandleFunc("GET /ui/api/fleet", h.fleet)
	m.HandleFunc("GET /ui/api/nodes/{node}", h.node)
	m.HandleFunc("GET /ui/api/nodes/{node}/bios", h.bios)
	m.HandleFunc("GET /ui/api/nodes/{node}/firmware", h.firmware)
	m.HandleFunc("GET /ui/api/watch", h.watch)
	m.HandleFunc("/ui/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "The resource could not be found.")
	})
	h.mux = m
	return h
}

// Close ends every open event stream (register it with
// http.Server.RegisterOnShutdown).
func (h *Handler) Close() { h.doneOnce.Do(func() { close(h.done) }) }

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	hd := w.Header()
	// Everything the page needs comes from this origin; no inline script,
	// no framing (clickjacking of the action buttons).
	hd.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "+
		"connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'")
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("Referrer-Policy", "same-origin")
	hd.Set("X-Frame-Options", "DENY")
	if h.auth != nil && !h.auth.Authenticate(r) {
		// The realm is the API's, so the browser reuses the credentials
		// for the page's API calls.
		hd.Set("WWW-Authenticate", `Basic realm="anvil"`)
		writeError(w, http.StatusUnauthorized, "Authentication required")
		return
	}
	h.mux.ServeHTTP(w, r)
}

// index serves the page and gives the browser its CSRF cookie.
func (h *Handler) index(w http.ResponseWriter, r *http.Request) {
	if err := ensureCSRFCookie(w, r); err != nil {
		h.log.Error("creating a CSRF token failed", "err", err)
		writeError(w, http.StatusInternalServerError, "Internal server error")
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	http.ServeFileFS(w, r, staticFiles, "static/index.html")
}

func (h *Handler) countsHandler(w http.ResponseWriter, r *http.Request) {
	var body map[string]any
	var err error
	if h.policy != nil && !h.policy.SeesAllNodes(r) {
		body, err = h.visibleCounts(r)
	} else {
		body, err = h.countsDoc(r.Context())
	}
	if err != nil {
		h.log.Error("counting nodes failed", "err", err)
		writeError(w, http.StatusInternalServerError, "Internal server error; see the controller log")
		return
	}
	writeJSON(w, http.StatusOK, body)
}

// countsDoc is {"total": N, "states": {"available": n, ...}}.
func (h *Handler) countsDoc(ctx context.Context) (map[string]any, error) {
	by, err := h.counts.CountNodesByState(ctx)
	if err != nil {
		return nil, err
	}
	total := 0
	for _, n := range by {
		total += n
	}
	return map[string]any{"total": total, "states": by}, nil
}

// maxCountedNodes bounds the nodes counted through the API for an account
// that sees only its project's (a project's share of a fleet is small).
const maxCountedNodes = 10000

// visibleCounts counts the nodes the account of r may see, through the
// API's node list (which the policy filters), instead of the index of the
// whole fleet.
func (h *Handler) visibleCounts(r *http.Request) (map[string]any, error) {
	by, total, marker := map[string]int{}, 0, ""
	for total < maxCountedNodes {
		path := "/v1/nodes?fields=uuid,provision_state&limit=1000"
		if marker != "" {
			path += "&marker=" + url.QueryEscape(marker)
		}
		status, body := h.get(r, path)
		if status != http.StatusOK {
			return nil, fmt.Errorf("listing the visible nodes: status %d: %s", status, body)
		}
		var page struct {
			Nodes []struct {
				UUID           string `json:"uuid"`
				ProvisionState string `json:"provision_state"`
			} `json:"nodes"`
		}
		if err := json.Unmarshal(body, &page); err != nil {
			return nil, fmt.Errorf("decoding the visible nodes: %w", err)
		}
		for _, n := range page.Nodes {
			by[n.ProvisionState]++
		}
		total += len(page.Nodes)
		if len(page.Nodes) < 1000 {
			break
		}
		marker = page.Nodes[len(page.Nodes)-1].UUID
	}
	return map[string]any{"total": total, "states": by}, nil
}

// writeError answers in Ironic's error format, like the API.
func writeError(w http.ResponseWriter, status int, msg string) {
	client := "Client"
	if status >= 500 {
		client = "Server"
	}
	inner, _ := json.Marshal(map[string]any{"faultcode": client, "faultstring": msg, "debuginfo": nil})
	writeJSON(w, status, map[string]string{"error_message": string(inner)})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
