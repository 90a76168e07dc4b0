package conductor

// The ways the controller ends an operation itself: wait-state timeouts
// and the agent's timers here, an operator's abort and the security stop
// in abort.go. stops holds them.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/anvil-metal/anvil/controller/state"
	"github.com/anvil-metal/anvil/controller/store"
)

// stops ends operations: timeouts, aborts and security stops.
type stops struct {
	*machine
	steps  *stepRunner // the stopped step's result
	agents *agents     // tear-down of the agent
	leases leaser
}

// leaser is what stops needs of the runtime's leases: its timers find
// nodes outside any worker and must hold a node's lease to fail it.
type leaser interface {
	lease(ctx context.Context, n *store.Node) bool
	fenced(ctx context.Context) context.Context
}

// checkTimeouts fails nodes that waited too long for their agent. It reads
// only nodes in wait states (an indexed filter), never the whole table.
func (c *stops) checkTimeouts(ctx context.Context) {
	waits := []struct {
		st      state.State
		timeout time.Duration
		msg     func(n *store.Node) string
	}{
		{state.CleanWait, c.cfg.CleanWaitTimeout, func(n *store.Node) string {
			return fmt.Sprintf("Timeout reached while cleaning the node. Please check if the ramdisk responsible for the cleaning is running on the node. Failed on step %v.", n.CleanStep)
		}},
		{state.DeployWait, c.cfg.DeployWaitTimeout, func(n *store.Node) string {
			return fmt.Sprintf("Timeout reached while waiting for callback for node %s", n.UUID)
		}},
		{state.ServiceWait, c.cfg.ServiceWaitTimeout, func(n *store.Node) string {
			return fmt.Sprintf("Timeout reached while servicing the node. Please check if the ramdisk responsible for the servicing is running on the node. Failed on step %v.", n.ServiceStep)
		}},
		{state.InspectWait, c.cfg.InspectWaitTimeout, func(n *store.Node) string {
			return fmt.Sprintf("Timeout reached while inspecting the node %s", n.UUID)
		}},
		{state.RescueWait, c.cfg.RescueWaitTimeout, func(n *store.Node) string {
			return fmt.Sprintf("Timeout reached while waiting for rescue ramdisk callback for node %s", n.UUID)
		}},
	}
	c.checkAgentTimers(ctx)
	c.checkFastTrack(ctx)
	no := false
	for _, w := range waits {
		if w.timeout <= 0 {
			continue
		}
		st := string(w.st)
		nodes, err := c.st.ListNodes(ctx, store.NodeFilter{ProvisionState: &st, Maintenance: &no}, store.Page{})
		if err != nil {
			c.log.Error("listing waiting nodes failed", "state", st, "err", err)
			continue
		}
		deadline := c.now().Add(-w.timeout)
		for _, n := range nodes {
			if n.ProvisionUpdatedAt == nil || n.ProvisionUpdatedAt.After(deadline) || n.Operation.Firmware != nil {
				continue // a firmware update has its own bounds (FirmwareConfig)
			}
			if !c.leases.lease(ctx, n) {
				continue // its holder times it out
			}
			msg := w.msg(n) + c.whereBootStopped(ctx, n, *n.ProvisionUpdatedAt)
			ph, stepRunning := runningPhase(n)
			// the step's result is stored by the write that fails the node
			wctx := withResult(c.leases.fenced(ctx), c.steps.stoppedResult(n, msg, store.OutcomeTimedOut))
			_, err := c.transition(wctx, n.UUID, w.st, state.EvFail, func(m *store.Node) error {
				m.LastError = strp(msg)
				if stepRunning {
					ph.onFailure(m, msg)
				}
				if w.st == state.ServiceWait {
					c.agents.tearDownAgent(m) // the token dies; a failed service keeps its power
				}
				return nil
			})
			if err == nil && w.st == state.ServiceWait {
				c.steps.ejectAfterFailedService(c.leases.fenced(ctx), n.UUID)
			}
			if err != nil && !errors.Is(err, errStale) {
				c.log.Error("failing timed-out node failed", "node", n.UUID, "err", err)
				continue
			}
			if err == nil {
				c.stage(n.UUID, store.BootStage{Stage: store.StageTimeout, Detail: st, Outcome: store.OutcomeTimedOut})
			}
			c.log.Warn("wait state timed out", "node", n.UUID, "state", st, "timeout", w.timeout)
			c.kick(n.UUID) // at rest now: its lease is released
		}
	}
}

// checkAgentTimers fails waiting nodes whose ramdisk never called back after
// a (re)boot, or whose agent went silent, each with its own message naming
// the phase, so an operator knows where to look.
func (c *stops) checkAgentTimers(ctx context.Context) {
	no := false
	now := c.now()
	for _, st := range []state.State{state.CleanWait, state.DeployWait, state.InspectWait, state.ServiceWait} {
		s := string(st)
		nodes, err := c.st.ListNodes(ctx, store.NodeFilter{ProvisionState: &s, Maintenance: &no}, store.Page{})
		if err != nil {
			c.log.Error("listing waiting nodes failed", "state", s, "err", err)
			continue
		}
		for _, n := range nodes {
			if n.Operation.Agent.Alarm != nil {
				c.kick(n.UUID) // its worker stops the operation (securityStop)
				continue
			}
			if msg := c.abortOverdue(n); msg != "" {
				c.abortByPowerOff(ctx, n, msg)
				continue
			}
			msg := c.agentTimerExpired(n, now)
			if n.Operation.Firmware != nil {
				msg = "" // the update may reboot the node out of its ramdisk; its own bounds apply
			}
			if msg == "" {
				continue
			}
			if !c.leases.lease(ctx, n) {
				continue // its holder times it out
			}
			if aw := n.Operation.Agent.Await; aw != nil && !agentBack(n, *aw) {
				msg += c.whereBootStopped(ctx, n, aw.Since)
			}
			ph, stepRunning := runningPhase(n)
			wctx := withResult(c.leases.fenced(ctx), c.steps.stoppedResult(n, msg, store.OutcomeTimedOut))
			_, err := c.transition(wctx, n.UUID, st, state.EvFail, func(m *store.Node) error {
				m.LastError = strp(msg)
				c.agents.tearDownAgent(m)
				if stepRunning {
					ph.onFailure(m, msg)
				}
				return nil
			}, c.newEvent(n.UUID, "ERROR", "agent", msg))
			if err != nil && !errors.Is(err, errStale) {
				c.log.Error("failing node after agent timeout failed", "node", n.UUID, "err", err)
				continue
			}
			if err == nil && st == state.ServiceWait {
				c.steps.ejectAfterFailedService(c.leases.fenced(ctx), n.UUID)
			}
			if err == nil {
				c.stage(n.UUID, store.BootStage{Stage: store.StageTimeout, Detail: s, Outcome: store.OutcomeTimedOut})
				c.log.Warn("agent timeout", "node", n.UUID, "state", s, "reason", msg)
			}
			c.kick(n.UUID)
		}
	}
}

// runningPhase is the step phase of a waiting node that has a step
// running, whose failure policy then applies (maintenance after a clean
// or service step).
func runningPhase(n *store.Node) (stepPhase, bool) {
	ph, ok := phaseOf(n)
	return ph, ok && len(*ph.current(n)) > 0
}

func (c *stops) agentTimerExpired(n *store.Node, now time.Time) string {
	step := currentStepKey(n)
	a := &n.Operation.Agent
	if p := a.Command; p != nil && p.Step != nil {
		limit := c.cfg.Agent.StepTimeout
		if p.Step.MaxSeconds > 0 {
			limit = time.Duration(p.Step.MaxSeconds) * time.Second
		}
		if limit > 0 && now.Sub(p.IssuedAt) > limit {
			return fmt.Sprintf("Timeout in %s: step %s exceeded its limit of %s (started %s); the agent is still alive but the step did not finish.",
				n.ProvisionState, p.Step.Key(), limit, p.IssuedAt.Format(time.RFC3339))
		}
	}
	if aw := a.Await; aw != nil {
		if !agentBack(n, *aw) && now.Sub(aw.Since) > c.cfg.Agent.BootTimeout {
			what := "the agent ramdisk never called back"
			if aw.Reason == "reboot" {
				what = "the agent did not come back after the reboot requested by step " + aw.Step
			}
			return fmt.Sprintf("Timeout in %s: %s within %s of the node being rebooted into it at %s; check the node's console, PXE/DHCP and the ramdisk's network.",
				n.ProvisionState, what, c.cfg.Agent.BootTimeout, aw.Since.Format(time.RFC3339))
		}
		return ""
	}
	t := a.LastHeartbeat
	if t.IsZero() || now.Sub(t) <= c.cfg.Agent.SilenceTimeout {
		return ""
	}
	during := ""
	if step != "" {
		during = " during step " + step
	}
	return fmt.Sprintf("Timeout in %s: the agent went silent%s: no heartbeat for %s (last at %s).",
		n.ProvisionState, during, now.Sub(t).Round(time.Second), t.Format(time.RFC3339))
}
