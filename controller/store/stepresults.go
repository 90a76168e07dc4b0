package store

import (
	"context"
	"encoding/json"
	"time"
)

// Step result outcomes.
const (
	OutcomeSucceeded = "succeeded"
	OutcomeFailed    = "failed"
	OutcomeAborted   = "aborted"
	OutcomeTimedOut  = "timed out"
)

// Bounds of what the store keeps of step results: one result document
// (the agent's per-device detail) at most MaxStepResultBytes, and the
// newest MaxStepResultsPerNode runs per node; older runs are dropped as new
// ones arrive. Erase records are never dropped (they are the proof).
const (
	MaxStepResultBytes    = 256 << 10
	MaxStepResultsPerNode = 1000
	maxStepText           = 8 << 10
)

// StepResult is one finished run of a clean or deploy step: what ran, when,
// how it ended, and the full result its runner (the agent, or the
// controller for an out-of-band step) reported.
type StepResult struct {
	// UUID identifies the run: an agent step's command id, so a report the
	// agent repeats is stored once.
	UUID            string         `json:"uuid"`
	NodeUUID        string         `json:"node_uuid"`
	Kind            string         `json:"kind"` // clean | deploy
	Step            string         `json:"step"` // interface.step
	Args            map[string]any `json:"args,omitempty"`
	StartedAt       time.Time      `json:"started_at"`
	FinishedAt      time.Time      `json:"finished_at"`
	Outcome         string         `json:"outcome"`
	Error           string         `json:"error,omitempty"`
	Summary         string         `json:"summary,omitempty"`
	RebootRequested bool           `json:"reboot_requested,omitempty"`
	AgentVersion    string         `json:"agent_version,omitempty"`
	// Result is the runner's result document, absent when it was larger
	// than MaxStepResultBytes (then ResultTruncated says so and Summary
	// still tells what happened).
	Result          json.RawMessage `json:"result,omitempty"`
	ResultTruncated bool            `json:"result_truncated,omitempty"`
}

// Bound enforces the size limits on r before it is stored.
func (r *StepResult) Bound() {
	if len(r.Result) > MaxStepResultBytes || (len(r.Result) > 0 && !json.Valid(r.Result)) {
		r.Result, r.ResultTruncated = nil, true
	}
	r.Error = clip(r.Error, maxStepText)
	r.Summary = clip(r.Summary, maxStepText)
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// EraseRecord is a signed sanitization record of one device. The store
// keeps the signed document as it was signed (Data) and indexes it by
// node; it never changes or drops one, not even with its node.
type EraseRecord struct {
	UUID      string          `json:"uuid"`
	NodeUUID  string          `json:"node_uuid"`
	CreatedAt time.Time       `json:"created_at"`
	Data      json.RawMessage `json:"data"`
}

// ResultPage selects results or records of one node (NodeUUID "" = every
// node, as an export reads them), newest first: at most Limit (0: no
// limit) older than the one whose UUID is Marker. Ascending pages oldest
// first instead (an export, so an import keeps the order).
type ResultPage struct {
	NodeUUID  string
	Limit     int
	Marker    string
	Ascending bool
}

// StepResults keeps step results and erase records.
type StepResults interface {
	// PutStepResult stores r (bounded with Bound) unless a result with its
	// UUID exists, and drops the node's runs beyond MaxStepResultsPerNode.
	PutStepResult(ctx context.Context, r *StepResult) error
	// ListStepResults pages results newest first; an unknown marker is
	// ErrNotFound.
	ListStepResults(ctx context.Context, p ResultPage) ([]*StepResult, error)
	// PutEraseRecords stores records, skipping UUIDs already stored.
	PutEraseRecords(ctx context.Context, recs []*EraseRecord) error
	// ListEraseRecords pages records newest first, like ListStepResults.
	ListEraseRecords(ctx context.Context, p ResultPage) ([]*EraseRecord, error)
}

type resultsKey struct{}

// WithStepResult makes the node write done with ctx (UpdateNode) store r
// in the same transaction: a step the controller ends itself (a timeout,
// an abort, a failure) fails the node and records how the step ended in
// one write, so no crash between two writes loses the result. A write
// that is refused (stale revision, lost lease) stores nothing; the retry
// carries r again, and r's UUID makes it one result.
func WithStepResult(ctx context.Context, r *StepResult) context.Context {
	if r == nil {
		return ctx
	}
	rs := append(append([]*StepResult(nil), StepResultsOf(ctx)...), r)
	return context.WithValue(ctx, resultsKey{}, rs)
}

// StepResultsOf returns what WithStepResult put in ctx.
func StepResultsOf(ctx context.Context) []*StepResult {
	rs, _ := ctx.Value(resultsKey{}).([]*StepResult)
	return rs
}
