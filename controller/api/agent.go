package api

import (
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/gorilla/mux"

	"github.com/anvil-metal/anvil/controller/conductor"
	"github.com/anvil-metal/anvil/controller/store"
	"github.com/anvil-metal/anvil/protocol"
)

// lookup serves GET /v1/lookup for agents (public, like Ironic's).
func (s *Server) lookup(w http.ResponseWriter, r *http.Request) error {
	if err := atLeast(r.Context(), 22); err != nil {
		return err
	}
	q, err := parseQuery(r, "addresses", "node_uuid", protocol.LookupBootID, protocol.LookupNonce)
	if err != nil {
		return err
	}
	var macs []string
	if a := q.v.Get("addresses"); a != "" {
		macs = strings.Split(a, ",")
	}
	nodeUUID := q.v.Get("node_uuid")
	if len(macs) == 0 && nodeUUID == "" {
		return badRequest("At least one of 'addresses' and 'node_uuid' parameters is required")
	}
	resp, err := s.cond.Lookup(r.Context(), conductor.LookupRequest{MACs: macs, NodeUUID: nodeUUID,
		BootID: q.v.Get(protocol.LookupBootID), Nonce: q.v.Get(protocol.LookupNonce), Address: sourceAddr(r)})
	if err != nil {
		s.countClaim(err, "lookup")
		return err
	}
	writeJSON(w, http.StatusOK, resp)
	return nil
}

// heartbeat serves POST /v1/heartbeat/{node}: one write, then the reply
// with the agent's next command.
func (s *Server) heartbeat(w http.ResponseWriter, r *http.Request) error {
	if err := atLeast(r.Context(), 22); err != nil {
		return err
	}
	if _, err := parseQuery(r); err != nil {
		return err
	}
	hb, err := protocol.DecodeHeartbeat(r.Body)
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) || isTimeout(err) {
			return bodyError(err)
		}
		if strings.Contains(err.Error(), "unknown field") {
			return badRequest("%v (this controller speaks the anvil pull protocol %s; an ironic-python-agent heartbeat is not accepted)", err, protocol.Version)
		}
		return badRequest("%v", err)
	}
	resp, err := s.cond.Heartbeat(r.Context(), muxVar(r, "node"), sourceAddr(r), hb)
	if err != nil {
		s.countClaim(err, "heartbeat")
		return err
	}
	markAuthenticated(r.Context()) // the agent proved itself with its token
	writeJSON(w, http.StatusOK, resp)
	return nil
}

// resetAgentToken serves DELETE /v1/nodes/{node}/agent_token: the node's
// agent token (and boot nonce) is forgotten, so the next lookup gets a new
// one, e.g. after the node was rebooted by hand into the ramdisk. The
// reset is in the node's history.
func (s *Server) resetAgentToken(w http.ResponseWriter, r *http.Request) error {
	if _, err := parseQuery(r); err != nil {
		return err
	}
	n, err := s.loadNode(r)
	if err != nil {
		return err
	}
	if err := s.cond.ResetAgentToken(r.Context(), n.UUID); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// countClaim counts a second agent claimant (the operation stops) and a
// request refused for lacking what the boot requires.
func (s *Server) countClaim(err error, via string) {
	switch {
	case s.metrics == nil:
	case errors.Is(err, conductor.ErrSecondClaimant):
		s.metrics.claims.WithLabelValues(via).Inc()
	case errors.Is(err, conductor.ErrNotTrusted):
		s.metrics.untrusted.WithLabelValues(via).Inc()
	}
}

// sourceAddr is the address a request came from (no port).
func sourceAddr(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// cleaningSteps serves GET /v1/nodes/{id}/cleaning/steps (proposed in
// Ironic's manual-cleaning spec, never built upstream): the steps the node
// offers, highest priority first, or 202 while the agent has not reported.
func (s *Server) cleaningSteps(w http.ResponseWriter, r *http.Request) error {
	q, err := parseQuery(r, "min_priority")
	if err != nil {
		return err
	}
	minPrio := -1
	if v := q.v.Get("min_priority"); v != "" {
		if minPrio, err = strconv.Atoi(v); err != nil || minPrio < 0 {
			return badRequest("Invalid min_priority %q: expected a non-negative integer", v)
		}
	}
	n, err := s.loadNode(r)
	if err != nil {
		return err
	}
	body := map[string]any{}
	if conductor.UsesAgent(n) {
		cache := s.cond.CachedSteps(n)
		if cache == nil {
			w.Header().Set("Retry-Request-After", "-1")
			writeJSON(w, http.StatusAccepted, map[string]any{"message": "The node's agent has not reported its clean steps yet. " +
				"They are cached when the agent first heartbeats (during cleaning, inspection or deployment); retry later."})
			return nil
		}
		body["fingerprint"] = cache.Fingerprint
		body["agent_version"] = cache.AgentVersion
		body["cached_at"] = fmtTime(cache.RefreshedAt)
		body["age_seconds"] = int(time.Since(cache.RefreshedAt).Seconds())
		body["managers"] = cache.Managers
	}
	steps := s.cond.CleanStepsFor(n)
	sort.SliceStable(steps, func(i, j int) bool { return steps[i].Priority > steps[j].Priority })
	out := []map[string]any{}
	for _, st := range steps {
		if st.Priority < minPrio {
			continue
		}
		args := map[string]any{}
		for k, v := range st.ArgsInfo {
			args[k] = v
		}
		out = append(out, map[string]any{"interface": st.Interface, "step": st.Step, "priority": st.Priority,
			"abortable": st.Abortable, "reboot_requested": st.RebootRequested, "args": args})
	}
	body["steps"] = out
	writeJSON(w, http.StatusOK, body)
	return nil
}

// inventory serves GET /v1/nodes/{id}/inventory (1.81).
func (s *Server) inventory(w http.ResponseWriter, r *http.Request) error {
	if err := since(r.Context(), 81); err != nil {
		return err
	}
	n, err := s.loadNode(r)
	if err != nil {
		return err
	}
	raw, err := s.st.GetInventory(r.Context(), n.UUID)
	if errors.Is(err, store.ErrNotFound) {
		return notFound("Inventory of node", n.UUID)
	}
	if err != nil {
		return err
	}
	plugin := map[string]any{}
	var inv protocol.Inventory
	if json.Unmarshal(raw, &inv) == nil {
		plugin = conductor.InventoryPluginData(inv)
	}
	writeJSON(w, http.StatusOK, map[string]any{"inventory": json.RawMessage(raw), "plugin_data": plugin})
	return nil
}

func muxVar(r *http.Request, k string) string { return mux.Vars(r)[k] }
