package api

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strconv"

	"github.com/google/uuid"

	"github.com/anvil-metal/anvil/controller/erasure"
	"github.com/anvil-metal/anvil/controller/store"
)

// Step results and erase records are anvil extensions: Ironic keeps
// neither. Both are paged newest first with limit and marker.

// maxResultsPage bounds one page of step results: each may carry up to
// store.MaxStepResultBytes of agent detail.
const maxResultsPage = 100

// resultPage reads limit and marker of a results list.
func resultPage(r *http.Request, nodeUUID string) (store.ResultPage, error) {
	q, err := parseQuery(r, "limit", "marker")
	if err != nil {
		return store.ResultPage{}, err
	}
	p := store.ResultPage{NodeUUID: nodeUUID}
	if p.Limit, err = q.limit(maxResultsPage); err != nil {
		return p, err
	}
	if m := q.v.Get("marker"); m != "" {
		u, err := uuid.Parse(m)
		if err != nil {
			return p, badRequest("Expected UUID for marker: %s", m)
		}
		p.Marker = u.String()
	}
	return p, nil
}

// writeResults answers page p of step results or erase records: each
// listed item shown by view under key, with the "next" link of a full
// page; a marker naming no item is a 404 naming it as what.
func writeResults[T, V any](s *Server, w http.ResponseWriter, r *http.Request, p store.ResultPage, what, key string,
	list func(context.Context, store.ResultPage) ([]*T, error), uuidOf func(*T) string, view func(*T) V) error {
	items, err := list(r.Context(), p)
	if errors.Is(err, store.ErrNotFound) {
		return errf(http.StatusNotFound, "%s %s could not be found.", what, p.Marker)
	}
	if err != nil {
		return err
	}
	out := make([]V, 0, len(items))
	for _, it := range items {
		out = append(out, view(it))
	}
	body := map[string]any{key: out}
	if len(items) == p.Limit {
		q := url.Values{"limit": {strconv.Itoa(p.Limit)}, "marker": {uuidOf(items[len(items)-1])}}
		body["next"] = s.baseURL(r) + r.URL.Path + "?" + q.Encode()
	}
	writeJSON(w, http.StatusOK, body)
	return nil
}

// GET /v1/nodes/{node}/steps/results
func (s *Server) stepResults(w http.ResponseWriter, r *http.Request) error {
	n, err := s.loadNode(r)
	if err != nil {
		return err
	}
	p, err := resultPage(r, n.UUID)
	if err != nil {
		return err
	}
	return writeResults(s, w, r, p, "Step result", "results", s.st.ListStepResults,
		func(res *store.StepResult) string { return res.UUID }, stepResultView)
}

func stepResultView(res *store.StepResult) map[string]any {
	v := map[string]any{"uuid": res.UUID, "node_uuid": res.NodeUUID, "kind": res.Kind, "step": res.Step,
		"args": res.Args, "started_at": fmtTime(res.StartedAt), "finished_at": fmtTime(res.FinishedAt),
		"outcome": res.Outcome, "error": res.Error, "summary": res.Summary, "reboot_requested": res.RebootRequested,
		"agent_version": res.AgentVersion, "result": res.Result, "result_truncated": res.ResultTruncated}
	if res.Args == nil {
		v["args"] = map[string]any{}
	}
	if res.Result == nil {
		v["result"] = nil
	}
	return v
}

// GET /v1/nodes/{node}/erase-records: the node's signed sanitization
// records, newest first. Records outlive their node: a deleted node's are
// listed by its UUID.
func (s *Server) eraseRecords(w http.ResponseWriter, r *http.Request) error {
	nodeUUID := ""
	n, err := s.loadNode(r)
	switch {
	case err == nil:
		nodeUUID = n.UUID
	case errors.Is(err, store.ErrNotFound):
		ident, _ := nodeIdent(r)
		u, perr := uuid.Parse(ident)
		if perr != nil {
			return err
		}
		nodeUUID = u.String()
	default:
		return err
	}
	p, err := resultPage(r, nodeUUID)
	if err != nil {
		return err
	}
	return writeResults(s, w, r, p, "Erase record", "erase_records", s.st.ListEraseRecords,
		func(rec *store.EraseRecord) string { return rec.UUID }, func(rec *store.EraseRecord) json.RawMessage { return rec.Data })
}

// GET /v1/erase-records/public-key: the key the records verify with.
func (s *Server) recordsPublicKey(w http.ResponseWriter, _ *http.Request) error {
	if s.recordsKey == nil {
		return errf(http.StatusNotFound, "This controller signs no sanitization records.")
	}
	writeJSON(w, http.StatusOK, map[string]any{"algorithm": "ed25519",
		"public_key": erasure.EncodePublicKey(s.recordsKey), "fingerprint": erasure.Fingerprint(s.recordsKey)})
	return nil
}
