package conductor

// The hold step (Ironic 22.1, API 1.85): a reserved step name, accepted
// on any step interface in clean_steps and deploy_steps (Ironic's docs
// write {"interface": "deploy", "step": "hold"}), that pauses cleaning or
// deployment in clean hold / deploy hold until an operator sends unhold
// (the flow goes on with the next step) or abort (the operation fails).
// A held node has no timeout and no lock; its agent stays up and its
// heartbeats are recorded only (state.Held). This file owns the step's
// planning, the hold itself and the two verbs out of it.

import (
	"context"
	"fmt"

	"github.com/anvil-metal/anvil/controller/state"
	"github.com/anvil-metal/anvil/controller/store"
	"github.com/anvil-metal/anvil/protocol"
)

// holdStepName is Ironic's reserved step name for a hold.
const holdStepName = "hold"

// isHoldStep reports whether s is the reserved hold step.
func isHoldStep(s protocol.Step) bool { return s.Step == holdStepName }

// holdStep is the planned form of a requested hold step: the conductor
// runs it itself, so no driver or agent offers it. It is abortable: no
// work is running while the node is held.
func holdStep(requested protocol.Step) protocol.Step {
	return protocol.Step{Interface: requested.Interface, Step: holdStepName, Priority: requested.Priority,
		Abortable: true, Args: requested.Args}
}

// hold puts a node whose step runner reached a hold step into the phase's
// hold state. The plan's index stays on the hold step; unhold moves past it.
func (c *stepRunner) hold(ctx context.Context, n *store.Node, ph stepPhase, step protocol.Step) error {
	msg := fmt.Sprintf("%s step %s reached: the node is held until an operator sends unhold (continue) or abort", ph.kind, step.Key())
	_, err := c.transition(ctx, n.UUID, ph.running, state.EvHold, nil, c.newEvent(n.UUID, "INFO", ph.kind+"ing", msg))
	return err
}

// heldPhase is the step phase a held node belongs to.
func heldPhase(cur state.State) (stepPhase, bool) {
	switch cur {
	case state.CleanHold:
		return cleanPhase, true
	case state.DeployHold:
		return deployPhase, true
	case state.ServiceHold:
		return servicePhase, true
	}
	return stepPhase{}, false
}

// unhold releases a held node, in the write that accepts the verb. Ironic
// moves it to its wait state and lets the agent's next heartbeat continue
// the flow; anvil's step runner continues from the running state, so the
// node passes through the wait state (unhold, then resume) in the same
// write and the runtime runs the step after the hold step at once. The
// operation's target (manageable after a manual clean) is kept.
func (c *requests) unhold(n *store.Node) error {
	cur := state.State(n.ProvisionState)
	ph, ok := heldPhase(cur)
	if !ok {
		return Invalid("The requested action %q can not be performed on node %q while it is in state %q.", "unhold", n.UUID, n.ProvisionState)
	}
	plan := *ph.plan(&n.Operation)
	if plan == nil || plan.Index >= len(plan.Steps) {
		return Invalid("Node %s is in %s but has no %s step plan to continue; abort the operation instead.", n.UUID, cur, ph.kind)
	}
	plan.Index++
	plan.StartedAt = c.now()
	*ph.current(n) = map[string]any{}
	c.applyState(n, ph.wait, state.EvUnhold)
	c.applyState(n, ph.running, state.EvResume)
	n.LastError = nil
	return nil
}

// abortHold fails a held operation (Ironic's abort from clean hold and
// deploy hold). Nothing runs while a node is held, so the abort is
// immediate; the agent is torn down (its token dies, and an agent node
// is powered off out of the ramdisk) as an abort in a wait state does.
func (c *requests) abortHold(n *store.Node) error {
	cur := state.State(n.ProvisionState)
	ph, ok := heldPhase(cur)
	if !ok {
		return Invalid("The requested action %q can not be performed on node %q while it is in state %q.", "abort", n.UUID, n.ProvisionState)
	}
	next, err := state.Next(cur, state.EvAbort)
	if err != nil {
		return err
	}
	name := currentStepKey(n)
	c.applyState(n, next, state.EvAbort)
	c.steps.agents.tearDownAgent(n)
	if ph.kind == "clean" {
		n.LastError = strp(fmt.Sprintf("By request, the clean operation was aborted during or after the completion of step %q", name))
	} else {
		n.LastError = strp(fmt.Sprintf("Deploy aborted by operator during step %q", name))
	}
	*ph.current(n) = map[string]any{}
	return nil
}
