package ui

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

const (
	maxWatchPaths    = 4
	minWatchInterval = 200 * time.Millisecond
	maxWatchInterval = 2 * time.Second
	keepAlive        = 15 * time.Second
)

// watchable says which resources a page may follow: cheap reads of nodes
// and the dashboard's own read endpoints (never the stream itself, nor a
// read that talks to a BMC, like validate).
func watchable(path string) bool {
	p, _, _ := strings.Cut(path, "?")
	if !strings.HasPrefix(p, "/") {
		return false
	}
	seg := strings.Split(p[1:], "/")
	for _, s := range seg {
		if s == "" || s == "." || s == ".." {
			return false
		}
	}
	switch {
	case len(seg) == 2 && seg[0] == "v1" && seg[1] == "nodes":
		return true
	case len(seg) == 3 && seg[0] == "v1" && seg[1] == "nodes":
		return true // a node, or /v1/nodes/detail
	case len(seg) == 4 && seg[0] == "v1" && seg[1] == "nodes":
		return seg[3] == "history" || seg[3] == "inventory" || seg[3] == "boot-timeline"
	case len(seg) == 5 && seg[0] == "v1" && seg[1] == "nodes":
		return seg[3] == "cleaning" && seg[4] == "steps"
	case len(seg) == 3 && seg[0] == "ui" && seg[1] == "api":
		return seg[2] == "counts" || seg[2] == "fleet"
	case len(seg) == 4 && seg[0] == "ui" && seg[1] == "api":
		return seg[2] == "nodes"
	}
	return false
}

// watch is the page's one live connection (server-sent events): it reads
// each requested resource every interval as the requesting user and sends
// it when it changed, as {"i": index, "status": code, "body": document}.
// One stream serves a whole page (the fleet's counts and table; a node and
// its history), however many nodes it shows.
func (h *Handler) watch(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	paths := q["path"]
	if len(paths) == 0 || len(paths) > maxWatchPaths {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("watch needs 1 to %d path arguments", maxWatchPaths))
		return
	}
	for _, p := range paths {
		if !watchable(p) {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("cannot watch %q: only node reads (/v1/nodes[/NODE[/history|/inventory|/cleaning/steps]]) and /ui/api/counts, /ui/api/fleet, /ui/api/nodes/NODE", p))
			return
		}
	}
	interval := time.Second
	if v := q.Get("interval_ms"); v != "" {
		ms, err := strconv.Atoi(v)
		if err != nil {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("invalid interval_ms %q", v))
			return
		}
		interval = min(max(time.Duration(ms)*time.Millisecond, minWatchInterval), maxWatchInterval)
	}
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	if _, err := fmt.Fprintf(w, "retry: %d\n\n", interval.Milliseconds()); err != nil {
		return
	}
	_ = rc.Flush()

	last := make([][32]byte, len(paths))
	sent := make([]bool, len(paths))
	tick := time.NewTicker(interval)
	defer tick.Stop()
	idle := time.Now()
	for {
		wrote := false
		for i, p := range paths {
			status, body := h.get(r, p)
			sum := sha256.Sum256(append(body, byte(status>>8), byte(status)))
			if sent[i] && sum == last[i] {
				continue
			}
			last[i], sent[i] = sum, true
			if err := writeEvent(w, i, status, body); err != nil {
				return
			}
			wrote = true
		}
		if !wrote && time.Since(idle) > keepAlive {
			if _, err := fmt.Fprint(w, ": keep-alive\n\n"); err != nil {
				return
			}
			wrote = true
		}
		if wrote {
			idle = time.Now()
			if err := rc.Flush(); err != nil {
				return
			}
		}
		select {
		case <-r.Context().Done():
			return
		case <-h.done:
			return
		case <-tick.C:
		}
	}
}

// writeEvent sends one resource as one SSE data line (compact JSON has no
// newlines; a body that is not JSON is sent as a string).
func writeEvent(w http.ResponseWriter, i, status int, body []byte) error {
	var compact bytes.Buffer
	if err := json.Compact(&compact, body); err != nil {
		compact.Reset()
		s, _ := json.Marshal(string(body))
		compact.Write(s)
	}
	_, err := fmt.Fprintf(w, "data: {\"i\":%d,\"status\":%d,\"body\":%s}\n\n", i, status, compact.Bytes())
	return err
}
