package conductor

// The end of a step the node waited for (clean wait, wait call-back): the
// step runner's completion, which moves the node to its next step or
// fails it.

import (
	"context"
	"fmt"
	"strings"
	"unicode"

	"github.com/anvil-metal/anvil/controller/state"
	"github.com/anvil-metal/anvil/controller/store"
)

// CompleteAsyncStep records the end of a step that left the node waiting
// (clean wait / wait call-back): on success the node resumes with the next
// step, on failure it fails naming the step. A step marked abort_after
// (abort requested while it could not be interrupted) fails the operation
// once it finishes, unless it was the last step. stepKey must name the
// current step, so a stale report can never advance the wrong step.
func (c *stepRunner) CompleteAsyncStep(ctx context.Context, nodeUUID, stepKey string, stepErr error) error {
	return c.completeAsync(ctx, nodeUUID, stepKey, stepErr, "", nil, nil)
}

// agentReport is what the agent's report of a finished step left: its
// result is stored, and events (the records it signed) go with the step's
// end into the history.
type agentReport struct {
	events []*store.Event
}

// completeAsync is CompleteAsyncStep applying mut in the same write. A
// summary of what the step did (the agent's) goes into its "finished"
// history event. Without an agent report (whose result is stored
// already), the run's result is stored by the write that moves the node on.
func (c *stepRunner) completeAsync(ctx context.Context, nodeUUID, stepKey string, stepErr error, summary string, agent *agentReport, mut func(m *store.Node)) error {
	if mut == nil {
		mut = func(*store.Node) {}
	}
	n, err := c.st.GetNode(ctx, nodeUUID)
	if err != nil {
		return err
	}
	wait := state.State(n.ProvisionState)
	ph, ok := phaseOf(n)
	if !ok || wait != ph.wait {
		return Conflict("node %s is in state %q, not waiting for a step", nodeUUID, n.ProvisionState)
	}
	cur := *ph.current(n)
	if got := fmt.Sprintf("%v.%v", cur["interface"], cur["step"]); got != stepKey {
		return Conflict("node %s is running step %s, not %s", nodeUUID, got, stepKey)
	}
	var extra []*store.Event
	if agent != nil {
		extra = agent.events
	}
	if agent == nil {
		args, _ := cur["args"].(map[string]any)
		r := c.runResult(n, ph, stepKey, args, stepErr, store.OutcomeSucceeded)
		r.Summary = oneLine(summary)
		ctx = withResult(ctx, r)
	}
	if stepErr != nil {
		msg := fmt.Sprintf("%s step %s failed on node %s: %v", capital(ph.kind), stepKey, nodeUUID, stepErr)
		_, err := c.transition(ctx, nodeUUID, wait, state.EvFail, func(m *store.Node) error {
			mut(m)
			c.agents.tearDownAgent(m)
			if keepsPower(stepErr) {
				m.TargetPowerState, m.Reservation = nil, nil // no power action during a flash
			}
			m.LastError = strp(msg)
			ph.onFailure(m, msg)
			return nil
		}, append(extra, c.newEvent(nodeUUID, "ERROR", ph.kind+"ing", msg))...)
		return err
	}
	plan := *ph.plan(&n.Operation)
	if plan == nil {
		return Conflict("node %s has no %s steps planned", nodeUUID, ph.kind)
	}
	steps, idx := plan.Steps, plan.Index
	abortAfter, _ := cur["abort_after"].(bool)
	msg := fmt.Sprintf("%s step %s finished", ph.kind, stepKey)
	if summary = oneLine(summary); summary != "" {
		msg += ": " + summary
	}
	finished := c.newEvent(nodeUUID, "INFO", ph.kind+"ing", msg)
	if abortAfter && idx+1 < len(steps) && ph.kind == servicePhase.kind {
		err := c.abortServiceAfter(ctx, n, stepKey, append(extra, finished), mut)
		return err
	}
	if abortAfter && idx+1 < len(steps) {
		msg := fmt.Sprintf("By request, the %s operation was aborted during or after the completion of step %q", ph.kind, stepKey)
		_, err := c.transition(ctx, nodeUUID, wait, state.EvFail, func(m *store.Node) error {
			mut(m)
			c.agents.tearDownAgent(m)
			m.LastError = strp(msg)
			*ph.current(m) = map[string]any{}
			return nil
		}, append(extra, finished)...)
		return err
	}
	_, err = c.transition(ctx, nodeUUID, wait, state.EvResume, func(m *store.Node) error {
		mut(m)
		if p := *ph.plan(&m.Operation); p != nil {
			p.Index = idx + 1
		}
		return nil
	}, append(extra, finished)...)
	if err != nil {
		return err
	}
	c.kick(nodeUUID)
	return nil
}

// oneLine makes an agent's text safe for a history line: control
// characters (newlines, escapes) become spaces, invalid UTF-8 goes.
func oneLine(s string) string {
	s = strings.ToValidUTF8(s, "")
	return strings.TrimSpace(strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return ' '
		}
		return r
	}, s))
}
