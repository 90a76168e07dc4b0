package conductor

import (
	"context"
	"errors"
	"fmt"

	"github.com/anvil-metal/anvil/controller/state"
	"github.com/anvil-metal/anvil/controller/store"
	"github.com/anvil-metal/anvil/protocol"
)

// An operator's abort of an abortable in-band step stops the agent: the
// abort is recorded on the command (applyAbort), every heartbeat reply
// carries it, the agent stops at its next safe point and reports the step
// failed with its partial result. The node then fails with "aborted by
// operator", its agent left running (no power-off: the agent stopped
// cleanly, and a half-written disk is what the partial result says). If
// the agent does not report within AbortTimeout, the node is powered off
// as before (checkAbortTimeouts).

// finishAbort ends the operation of an aborted step the agent reported.
func (c *engine) finishAbort(ctx context.Context, n *store.Node, key string, st protocol.CommandStatus, report *agentReport) error {
	ph, ok := phaseOf(n)
	if !ok {
		return nil
	}
	how := "the agent stopped it"
	switch {
	case st.State == protocol.CommandSucceeded:
		how = "the step could not be interrupted and completed before the agent saw the abort"
	case st.Error != nil && st.Error.Type != protocol.ErrTypeAborted:
		how = "the step failed before it could stop: " + st.Error.Message
	}
	msg := fmt.Sprintf("%s step %s aborted by operator: %s", capital(ph.kind), key, how)
	if sum := oneLine(st.Summary); sum != "" {
		msg += "; partial result: " + sum
	}
	msg = oneLine(msg)
	events := append(report.events, c.newEvent(n.UUID, "ERROR", ph.kind+"ing", msg))
	_, err := c.transition(ctx, n.UUID, state.State(n.ProvisionState), state.EvAbort, func(m *store.Node) error {
		m.Operation.Agent.Command = nil
		m.LastError = strp(msg)
		*ph.current(m) = map[string]any{}
		return nil
	}, events...)
	if errors.Is(err, errStale) {
		return nil
	}
	return err
}

// abortOverdue is the message failing a node whose agent did not stop an
// aborted step in time ("" while there is time).
func (c *engine) abortOverdue(n *store.Node) string {
	p := n.Operation.Agent.Command
	if p == nil || p.AbortRequestedAt == nil || p.Step == nil || c.now().Sub(*p.AbortRequestedAt) <= c.cfg.Agent.AbortTimeout {
		return ""
	}
	return fmt.Sprintf("By request, the %s operation was aborted during step %q: the agent did not stop it within %s, so the node is powered off",
		map[bool]string{true: "clean", false: "deploy"}[n.ProvisionState == string(state.CleanWait)], p.Step.Key(), c.cfg.Agent.AbortTimeout)
}

// abortByPowerOff is the fallback of an abort the agent did not act on:
// the operation fails as Ironic's abort does, and the node is powered off.
func (c *engine) abortByPowerOff(ctx context.Context, n *store.Node, msg string) {
	if !c.leases.lease(ctx, n) {
		return // its holder does it
	}
	ph, ok := phaseOf(n)
	if !ok {
		return
	}
	_, err := c.transition(c.leases.fenced(ctx), n.UUID, state.State(n.ProvisionState), state.EvAbort, func(m *store.Node) error {
		m.LastError = strp(msg)
		c.tearDownAgent(m)
		*ph.current(m) = map[string]any{}
		return nil
	}, c.newEvent(n.UUID, "ERROR", "agent", msg))
	if err != nil {
		if !errors.Is(err, errStale) {
			c.log.Error("powering off a node whose agent ignored an abort failed", "node", n.UUID, "err", err)
		}
		return
	}
	key := currentStepKey(n)
	args, _ := (*ph.current(n))["args"].(map[string]any)
	r := c.runResult(n, ph, key, args, errors.New(msg), store.OutcomeAborted)
	if p := n.Operation.Agent.Command; p != nil {
		r.UUID = p.ID
	}
	c.recordRun(ctx, r)
	c.log.Warn("agent did not stop an aborted step; powered off", "node", n.UUID)
	c.kick(n.UUID)
}
