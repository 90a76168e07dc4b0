package conductor

import (
	"context"
	"errors"
	"time"

	"github.com/google/uuid"

	"github.com/anvil-metal/anvil/controller/store"
	"github.com/anvil-metal/anvil/protocol"
)

// Step results: every run of a clean or deploy step ends with a
// store.StepResult, whoever ran it. An agent step's result is the agent's
// report (its command id is the result's id, so a report the agent repeats
// is stored once) and is stored before the node moves on; every other run
// (out-of-band steps, reboots, timeouts) gets an id derived from the node,
// the step and its start, so a retried completion stores it once too.

// runNamespace derives the ids of results that have no agent command.
var runNamespace = uuid.MustParse("6f1d8a52-3c1e-4b7a-9d55-21c0b1a5e021")

// stepRunID is the id of the run of step that started at start.
func stepRunID(nodeUUID, kind, step string, start time.Time) string {
	return uuid.NewSHA1(runNamespace, []byte(nodeUUID+"/"+kind+"/"+step+"/"+start.UTC().Format(time.RFC3339Nano))).String()
}

// runResult builds the result of a run without an agent report.
func (c *stepRunner) runResult(n *store.Node, ph stepPhase, step string, args map[string]any, stepErr error, outcome string) *store.StepResult {
	start := c.now()
	if p := *ph.plan(&n.Operation); p != nil && !p.StartedAt.IsZero() {
		start = p.StartedAt
	}
	r := &store.StepResult{UUID: stepRunID(n.UUID, ph.kind, step, start), NodeUUID: n.UUID, Kind: ph.kind, Step: step,
		Args: args, StartedAt: start, FinishedAt: c.now(), Outcome: outcome}
	if stepErr != nil {
		r.Error = stepErr.Error()
		if outcome == store.OutcomeSucceeded {
			r.Outcome = store.OutcomeFailed
		}
	}
	return r
}

// agentResult builds the result of an agent command that finished.
func (c *stepRunner) agentResult(n *store.Node, ph stepPhase, cmd *store.AgentCommand, st protocol.CommandStatus) *store.StepResult {
	r := &store.StepResult{UUID: cmd.ID, NodeUUID: n.UUID, Kind: ph.kind, Step: cmd.Step.Key(), Args: maskedArgs(cmd.Step.Args),
		StartedAt: st.StartedAt, FinishedAt: c.now(), Outcome: store.OutcomeSucceeded, Summary: oneLine(st.Summary),
		RebootRequested: cmd.Step.RebootRequested, Result: st.Result}
	if st.StartedAt.IsZero() {
		r.StartedAt = cmd.IssuedAt
	}
	if st.FinishedAt != nil {
		r.FinishedAt = *st.FinishedAt
	}
	if v := n.Operation.Agent.Version; v != nil {
		r.AgentVersion = *v
	}
	if st.State == protocol.CommandFailed {
		r.Outcome = store.OutcomeFailed
		if e := st.Error; e != nil {
			r.Error = e.Message
			if e.Details != "" {
				r.Error += ": " + e.Details
			}
			if e.Type == protocol.ErrTypeAborted {
				r.Outcome = store.OutcomeAborted
			}
		}
	}
	return r
}

// recordRun stores a result before the node moves on (an out-of-band
// step that succeeded: a crash before the node's write runs the step
// again, and the same start makes the same result id). A failure to store
// it is logged, never fatal (the node's history has the step's outcome).
func (c *stepRunner) recordRun(ctx context.Context, r *store.StepResult) {
	if err := c.st.PutStepResult(ctx, r); err != nil {
		c.log.Error("storing a step result failed", "node", r.NodeUUID, "step", r.Step, "err", err)
	}
}

// withResult is ctx for the node write that ends a run: the write stores
// r with the node (store.WithStepResult), so a failed node never lacks
// its step's result and a result never tells of a write that was refused.
func withResult(ctx context.Context, r *store.StepResult) context.Context {
	return store.WithStepResult(ctx, r)
}

// stoppedResult is the result of the step n (as it was before failing)
// was running when the controller stopped it (a timeout, an abort, a
// security alarm); nil when none ran.
func (c *stepRunner) stoppedResult(n *store.Node, msg, outcome string) *store.StepResult {
	ph, ok := phaseOf(n)
	key := currentStepKey(n)
	if !ok || key == "" {
		return nil
	}
	args, _ := (*ph.current(n))["args"].(map[string]any)
	r := c.runResult(n, ph, key, args, errors.New(msg), outcome)
	if p := n.Operation.Agent.Command; p != nil && p.Step != nil && p.Step.Key() == key {
		r.UUID = p.ID // the agent's run: a late report of it is the same run
	}
	return r
}

// maskedArgs hides a configdrive in a step's recorded arguments: it may
// hold the tenant's secrets (user_data), which Ironic masks as it masks
// instance_info.configdrive; it is large too.
func maskedArgs(args map[string]any) map[string]any {
	if _, ok := args[protocol.ConfigDriveArg]; !ok {
		return args
	}
	out := make(map[string]any, len(args))
	for k, v := range args {
		out[k] = v
	}
	out[protocol.ConfigDriveArg] = "******"
	return out
}
