package api

import (
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/anvil-metal/anvil/controller/store"
)

// BootTimeline records the stages of boots the API serves (boot scripts,
// kernel, ramdisk, ISOs) without waiting: controller/timeline's Recorder.
// Learn and NodeAt map the addresses nodes boot from to the nodes, since
// a download of the kernel names no node.
type BootTimeline interface {
	RecordStage(nodeUUID string, s store.BootStage)
	Learn(addr netip.Addr, nodeUUID string)
	NodeAt(addr netip.Addr) string
}

// GET /v1/nodes/{node}/boot-timeline (an anvil extension): the node's
// boots, newest first (?limit=N: the newest N), each with the stages the
// controller saw: {at, stage, detail, outcome}.
func (s *Server) bootTimeline(w http.ResponseWriter, r *http.Request) error {
	q, err := parseQuery(r, "limit")
	if err != nil {
		return err
	}
	limit := 0
	if v := q.v.Get("limit"); v != "" {
		if limit, err = strconv.Atoi(v); err != nil || limit < 0 {
			return badRequest("Limit must be a non-negative integer, not %q.", v)
		}
	}
	n, err := s.loadNode(r)
	if err != nil {
		return err
	}
	boots, err := s.st.ListBoots(r.Context(), n.UUID, limit)
	if err != nil {
		return err
	}
	out := make([]map[string]any, 0, len(boots))
	for _, b := range boots {
		stages := make([]map[string]any, 0, len(b.Stages))
		for _, st := range b.Stages {
			stages = append(stages, map[string]any{"at": st.At.UTC().Format(time.RFC3339Nano), "stage": st.Stage,
				"detail": st.Detail, "outcome": st.Outcome})
		}
		bv := map[string]any{"number": b.Number, "boot_id": nil, "stages": stages}
		if b.BootID != "" {
			bv["boot_id"] = b.BootID
		}
		out = append(out, bv)
	}
	writeJSON(w, http.StatusOK, map[string]any{"node_uuid": n.UUID, "boots": out})
	return nil
}

// stage records a stage of the node's boot, if the server has a timeline.
func (s *Server) stage(nodeUUID, stage, detail, outcome string) {
	if s.timeline != nil && nodeUUID != "" {
		s.timeline.RecordStage(nodeUUID, store.BootStage{Stage: stage, Detail: detail, Outcome: outcome})
	}
}

// learn notes that the node boots from the request's address.
func (s *Server) learn(addr, nodeUUID string) {
	if s.timeline == nil {
		return
	}
	if a, err := netip.ParseAddr(addr); err == nil {
		s.timeline.Learn(a, nodeUUID)
	}
}

// nodeAt is the node booting from the request's address ("": unknown).
func (s *Server) nodeAt(r *http.Request) string {
	if s.timeline == nil {
		return ""
	}
	a, err := netip.ParseAddr(sourceAddr(r))
	if err != nil {
		return ""
	}
	return s.timeline.NodeAt(a)
}

// countingWriter counts the bytes of a download for its stage.
type countingWriter struct {
	http.ResponseWriter
	n      int64
	status int
}

func (c *countingWriter) WriteHeader(code int) {
	if c.status == 0 {
		c.status = code
	}
	c.ResponseWriter.WriteHeader(code)
}

func (c *countingWriter) Write(b []byte) (int, error) {
	if c.status == 0 {
		c.status = http.StatusOK
	}
	n, err := c.ResponseWriter.Write(b)
	c.n += int64(n)
	return n, err
}

// Unwrap lets http.ResponseController reach the connection (write deadlines).
func (c *countingWriter) Unwrap() http.ResponseWriter { return c.ResponseWriter }

// download serves a boot download through serve and records it in the
// timeline of node ("": not recorded) as stage: what, bytes, duration, and
// its outcome. HEAD requests (size probes) are not recorded, nor ranges
// past the start (a BMC reads an ISO in many).
func (s *Server) download(w http.ResponseWriter, r *http.Request, node, stage, what string, serve func(w http.ResponseWriter) error) error {
	if s.timeline == nil || node == "" || r.Method != http.MethodGet || !fromStart(r.Header.Get("Range")) {
		return serve(w)
	}
	cw := &countingWriter{ResponseWriter: w}
	start := time.Now()
	err := serve(cw)
	d := time.Since(start).Round(time.Millisecond)
	switch {
	case err != nil:
		s.stage(node, stage, what+" to "+sourceAddr(r), outcomeFor(err))
	case cw.status >= 400:
		s.stage(node, stage, what+" to "+sourceAddr(r), fmt.Sprintf("%s: HTTP %d", store.OutcomeFailed, cw.status))
	case r.Context().Err() != nil:
		s.stage(node, stage, fmt.Sprintf("%s to %s (%d bytes, %v)", what, sourceAddr(r), cw.n, d), store.OutcomeFailed+": the client went away")
	default:
		s.stage(node, stage, fmt.Sprintf("%s to %s (%d bytes, %v)", what, sourceAddr(r), cw.n, d), store.OutcomeOK)
	}
	return err
}

// fromStart reports whether a Range header asks from the first byte (or
// there is none).
func fromStart(rng string) bool {
	return rng == "" || strings.HasPrefix(strings.TrimSpace(rng), "bytes=0-")
}

// outcomeFor is a failed download's outcome.
func outcomeFor(err error) string {
	var nf *notFoundKey
	if errors.As(err, &nf) {
		return store.OutcomeNotFound
	}
	return store.OutcomeFailed + ": " + err.Error()
}

// scriptStage records the fetch of a node's boot script (what) by addr,
// and learns addr as the node's: its kernel and ramdisk follow from there.
func (s *Server) scriptStage(nodeUUID, what, addr string, err error) {
	if err != nil {
		s.stage(nodeUUID, store.StageBootScript, what+" to "+addr, store.OutcomeFailed+": "+err.Error())
		return
	}
	s.learn(addr, nodeUUID)
	s.stage(nodeUUID, store.StageBootScript, what+" to "+addr, store.OutcomeOK)
}
