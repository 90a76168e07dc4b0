package conductor

// Aborts and the security stop, two of the ways an operation is stopped
// (stops, timeouts.go).

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
func (c *stops) finishAbort(ctx context.Context, n *store.Node, key string, st protocol.CommandStatus, report *agentReport) error {
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
func (c *stops) abortOverdue(n *store.Node) string {
	p := n.Operation.Agent.Command
	if p == nil || p.AbortRequestedAt == nil || p.Step == nil || c.now().Sub(*p.AbortRequestedAt) <= c.cfg.Agent.AbortTimeout {
		return ""
	}
	kind := "deploy"
	if ph, ok := phaseOf(n); ok {
		kind = ph.kind
	}
	return fmt.Sprintf("By request, the %s operation was aborted during step %q: the agent did not stop it within %s, so the node is %s",
		kind, p.Step.Key(), c.cfg.Agent.AbortTimeout, offWords(n))
}

// abortByPowerOff is the fallback of an abort the agent did not act on:
// the operation fails as Ironic's abort does, and the node is powered off.
func (c *stops) abortByPowerOff(ctx context.Context, n *store.Node, msg string) {
	if !c.leases.lease(ctx, n) {
		return // its holder does it
	}
	ph, ok := phaseOf(n)
	if !ok {
		return
	}
	key := currentStepKey(n)
	args, _ := (*ph.current(n))["args"].(map[string]any)
	r := c.steps.runResult(n, ph, key, args, errors.New(msg), store.OutcomeAborted)
	if p := n.Operation.Agent.Command; p != nil {
		r.UUID = p.ID
	}
	_, err := c.transition(withResult(c.leases.fenced(ctx), r), n.UUID, state.State(n.ProvisionState), state.EvAbort, func(m *store.Node) error {
		m.LastError = strp(msg)
		c.agents.tearDownAgent(m)
		*ph.current(m) = map[string]any{}
		return nil
	}, c.newEvent(n.UUID, "ERROR", "agent", msg))
	if err != nil {
		if !errors.Is(err, errStale) {
			c.log.Error("powering off a node whose agent ignored an abort failed", "node", n.UUID, "err", err)
		}
		return
	}
	c.log.Warn("agent did not stop an aborted step; powered off", "node", n.UUID)
	c.kick(n.UUID)
}

// applyAbort handles abort in a wait state. An abortable (or absent) current
// step fails the operation now; a non-abortable one is marked and the node
// fails as soon as that step finishes. In wait call-back (Ironic's since
// 1.110, an anvil extension below it) only a step the agent is running counts:
// a deploy waiting for the ramdisk to boot is aborted at once.
func (c *stops) applyAbort(n *store.Node) error {
	cur := state.State(n.ProvisionState)
	var step map[string]any
	switch cur {
	case state.CleanWait:
		step = n.CleanStep
	case state.DeployWait:
		if p := n.Operation.Agent.Command; p != nil && p.Step != nil {
			step = n.DeployStep
		}
	}
	if len(step) > 0 {
		if abortable, _ := step["abortable"].(bool); !abortable {
			step["abort_after"] = true
			return nil
		}
		// An agent running the step stops it itself: the node stays in
		// its wait state until the agent reports (or AbortTimeout passes).
		if p, st := n.Operation.Agent.Command, n.Operation.Agent.CommandStatus; p != nil && p.Step != nil && st != nil &&
			st.ID == p.ID && st.State == protocol.CommandRunning {
			if p.AbortRequestedAt == nil {
				now := c.now()
				p.AbortRequestedAt = &now
			}
			return nil
		}
	}
	next, err := state.Next(cur, state.EvAbort)
	if err != nil {
		return err
	}
	c.applyState(n, next, state.EvAbort)
	c.agents.tearDownAgent(n) // an aborted erase really stops
	name := "(none)"
	if len(step) > 0 {
		name = fmt.Sprintf("%v.%v", step["interface"], step["step"])
	}
	switch cur {
	case state.CleanWait:
		n.LastError = strp(fmt.Sprintf("By request, the clean operation was aborted during or after the completion of step %q", name))
		n.CleanStep = map[string]any{}
	case state.DeployWait:
		if len(step) == 0 && len(n.DeployStep) > 0 {
			name = fmt.Sprintf("%v.%v", n.DeployStep["interface"], n.DeployStep["step"])
		}
		// Ironic's text (do_node_deploy_abort, 1.110), then anvil's note
		msg := fmt.Sprintf("By request, the deploy operation was aborted during or after the completion of step %q", name)
		if UsesAgent(n) {
			msg += ": no agent step was running; the node is " + offWords(n)
		}
		n.LastError = strp(msg)
		n.DeployStep = map[string]any{}
	case state.InspectWait:
		n.LastError = strp("By request, the inspection operation has been aborted")
	case state.RescueWait:
		n.LastError = strp("By request, the rescue operation has been aborted")
	}
	return nil
}

// securityStop ends the operation of a node whose boot had a second
// claimant: failed with the alarm in last_error, its agent torn down (no
// token, powered off), and in maintenance with the alarm as the reason, so
// nothing uses the node before an operator has looked (whoever posed as
// its agent may have reported results that are not true).
func (c *stops) securityStop(ctx context.Context, n *store.Node) error {
	cl := n.Operation.Agent.Alarm
	cur := state.State(n.ProvisionState)
	msg := fmt.Sprintf("SECURITY ALARM in %s: %s. The operation was stopped and the node powered off; check the node and the provisioning network, then start the operation again.",
		cur, alarmText(cl))
	ph, inPhase := phaseOf(n)
	stepRunning := inPhase && len(*ph.current(n)) > 0
	wctx := withResult(ctx, c.steps.stoppedResult(n, msg, store.OutcomeFailed))
	_, err := c.move(wctx, n.UUID, cur, state.EvFail, true, func(m *store.Node) error {
		m.LastError = strp(msg)
		c.agents.tearDownAgent(m)
		// Whatever answered as its agent, the node was booted for this
		// operation: it is powered off in any case.
		m.TargetPowerState, m.Reservation = strp(offTarget(m)), strp(c.cfg.Host)
		if stepRunning {
			ph.onFailure(m, msg)
		}
		m.Maintenance, m.MaintenanceReason = true, strp(msg)
		return nil
	})
	if err != nil {
		return err
	}
	c.log.WarnContext(ctx, "operation stopped: second agent claimant", "node", n.UUID, "state", cur, "claimant", cl.Address, "holder", cl.HolderAddress)
	return nil
}

// offWords says what tearDownAgent's power action (offTarget) does to n,
// for last_error: a node with disable_power_off is rebooted, never
// powered off.
func offWords(n *store.Node) string {
	if n.DisablePowerOff {
		return "rebooted (disable_power_off)"
	}
	return "powered off"
}
