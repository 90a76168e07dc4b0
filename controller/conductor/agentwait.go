package conductor

import (
	"context"
	"errors"
	"fmt"

	"github.com/anvil-metal/anvil/controller/state"
	"github.com/anvil-metal/anvil/controller/store"
	"github.com/anvil-metal/anvil/protocol"
)

// The lifecycle engine's side of the agent: booting the ramdisk, leaving
// steps for the agent, and moving the node on when the agent is back or a
// command finished (the session service records those facts).

// awaitBoot records in m that the controller (re)booted the node into the
// ramdisk: the agent of the new boot (started by bootRamdisk) is awaited
// and no command is pending.
func awaitBoot(m *store.Node, aw *store.Await) {
	m.Operation.Agent.Await, m.Operation.Agent.Command = aw, nil
}

// bootRamdisk sets PXE (or, for virtual media, inserts the node's ISO and
// sets the CD) for the next boot and reboots the node into the agent
// ramdisk; the caller moves the node to a wait state with the await
// record this returns. The new boot's agent session, with its nonce, is
// stored before the node is powered: there is no moment in which the
// node boots and a lookup without the nonce could get its token.
func (c *engine) bootRamdisk(ctx context.Context, n *store.Node, d Driver, reason, step string) (*store.Await, error) {
	oldBoot := n.Operation.Agent.BootID
	if _, err := store.MutateNode(ctx, c.st, n.UUID, func(m *store.Node) error {
		newBoot(&m.Operation.Agent, c.nonceVia(m), c.now())
		m.Operation.Agent.Command = nil
		return nil
	}); err != nil {
		return nil, fmt.Errorf("start the agent session of the new boot: %w", err)
	}
	dev := "pxe"
	if usesVirtualMedia(n) {
		if err := c.insertMedia(ctx, n, d); err != nil {
			return nil, err
		}
		dev = "cdrom"
	}
	if err := d.SetBootDevice(ctx, n, dev, false); err != nil {
		return nil, fmt.Errorf("set boot device %s: %w", dev, err)
	}
	if err := d.SetPower(ctx, n, Rebooting); err != nil {
		return nil, fmt.Errorf("reboot into the agent ramdisk: %w", err)
	}
	return &store.Await{Reason: reason, Since: c.now(), OldBootID: oldBoot, Step: step}, nil
}

// tearDownAgent ends an agent operation that failed or was aborted, as
// Ironic tears cleaning down: the agent's token dies (it can no longer act)
// and the node is powered off by the worker (the power action holds the
// reservation until done).
func (c *engine) tearDownAgent(n *store.Node) {
	wipeAgent(n)
	if UsesAgent(n) || usesAgentInspect(n) {
		n.TargetPowerState = strp(PowerOff)
		n.Reservation = strp(c.cfg.Host)
	}
}

// agentWait advances a node waiting for its agent (clean wait, wait
// call-back, inspect wait): the ramdisk came back, or a command finished.
func (c *engine) agentWait(ctx context.Context, n *store.Node, d Driver) error {
	cur := state.State(n.ProvisionState)
	a := &n.Operation.Agent
	if aw := a.Await; aw != nil {
		if !agentBack(n, *aw) {
			return nil
		}
		return c.agentIsBack(ctx, n, d, *aw)
	}
	pending := a.Command
	if pending == nil {
		return nil
	}
	if a.CommandStatus == nil || a.CommandStatus.ID != pending.ID || a.CommandStatus.State == protocol.CommandRunning {
		return nil
	}
	st := *a.CommandStatus
	if pending.Name == protocol.CmdInventory && cur == state.InspectWait {
		return c.finishInspection(ctx, n, d, st)
	}
	if pending.Name == protocol.CmdInventory && pending.Guards != nil {
		return c.diskCheckDone(ctx, n, *pending, st)
	}
	if pending.Step == nil {
		return nil
	}
	key := pending.Step.Key()
	clearCmd := func(m *store.Node) {
		m.Operation.Agent.Command = nil
	}
	// The agent's full result, and the records of what it erased, are
	// stored before the node moves on (the command's id makes a repeated
	// report one result and the same records).
	report := &agentReport{}
	if ph, ok := phaseOf(n); ok {
		res := c.agentResult(n, ph, pending, st)
		if err := c.st.PutStepResult(ctx, res); err != nil {
			return fmt.Errorf("store the result of step %s: %w", key, err)
		}
		ev, err := c.signRecords(ctx, n, res)
		if err != nil {
			return err
		}
		report.events = ev
	}
	if pending.AbortRequestedAt != nil {
		return c.finishAbort(ctx, n, key, st, report)
	}
	if st.State == protocol.CommandFailed {
		msg := "the agent reported a failure"
		if st.Error != nil {
			msg = st.Error.Message
			if st.Error.Details != "" {
				msg += ": " + st.Error.Details
			}
			if st.Error.Type != "" {
				msg = st.Error.Type + ": " + msg
			}
		}
		// The agent's summary of the step's partial result (each device
		// erased, skipped or failed and why) goes with the error into
		// last_error and the history, where operators look first.
		if sum := oneLine(st.Summary); sum != "" {
			msg += "; step result: " + sum
		}
		// Agent text (an mdadm error, a summary) must not break the
		// one-line last_error or history event.
		return c.completeAsync(ctx, n.UUID, key, errors.New(oneLine(msg)), "", report, clearCmd)
	}
	if pending.Step.RebootRequested {
		aw, err := c.bootRamdisk(ctx, n, d, "reboot", key)
		if err != nil {
			return c.completeAsync(ctx, n.UUID, key, fmt.Errorf("step requested a reboot, which failed: %w", err), st.Summary, report, clearCmd)
		}
		aw.Summary = st.Summary
		_, err = store.MutateNodeEvents(ctx, c.st, n.UUID, func(m *store.Node) ([]*store.Event, error) {
			if m.ProvisionState != string(cur) {
				return nil, errStale
			}
			clearCmd(m)
			awaitBoot(m, aw)
			m.PowerState = strp(PowerOn) // our own reboot: not a drift for power sync
			return []*store.Event{c.newEvent(m.UUID, "INFO", "agent", fmt.Sprintf("step %s requested a reboot; rebooted, waiting for the agent's new boot", key))}, nil
		})
		return err
	}
	return c.completeAsync(ctx, n.UUID, key, nil, withDisklessNote(n, key, st.Summary), report, clearCmd)
}

// agentIsBack continues after the ramdisk (re)booted.
func (c *engine) agentIsBack(ctx context.Context, n *store.Node, d Driver, aw store.Await) error {
	c.ejectMedia(ctx, n, d, "the agent called back", false)
	cur := state.State(n.ProvisionState)
	ready := func(m *store.Node) error {
		m.Operation.Agent.Await, m.Operation.Agent.Booted = nil, true
		return nil
	}
	switch {
	case aw.Step != "":
		// The reboot (into the ramdisk, or requested by a step) completes
		// that step. A step that requested it has its result stored and
		// its summary kept for the "finished" event; the controller's own
		// reboot into the ramdisk is a run of its own.
		var report *agentReport
		if aw.Reason == "reboot" {
			report = &agentReport{}
		}
		return c.completeAsync(ctx, n.UUID, aw.Step, nil, aw.Summary, report, func(m *store.Node) { _ = ready(m) })
	case cur == state.InspectWait:
		_, err := store.MutateNodeEvents(ctx, c.st, n.UUID, func(m *store.Node) ([]*store.Event, error) {
			if m.ProvisionState != string(cur) {
				return nil, errStale
			}
			_ = ready(m)
			issueCommand(m, protocol.CmdInventory, nil, c.now())
			return nil, nil
		})
		return err
	default:
		_, err := c.transition(ctx, n.UUID, cur, state.EvResume, ready,
			c.newEvent(n.UUID, "INFO", "agent", "agent ramdisk is up; continuing"))
		if err == nil {
			c.kick(n.UUID)
		}
		return err
	}
}

// inbandStep starts a step on the agent: the command is left for the next
// heartbeat and the node waits.
func (c *engine) inbandStep(ctx context.Context, n *store.Node, kind string, step protocol.Step) (StepStatus, error) {
	name := protocol.CmdExecuteCleanStep
	if kind == "deploy" {
		name = protocol.CmdExecuteDeployStep
	}
	_, err := store.MutateNode(ctx, c.st, n.UUID, func(m *store.Node) error {
		// Resuming after a restart may run this again: a command already
		// issued for this step keeps its id, so the agent (which never
		// re-runs an id) cannot execute the step twice. Completing a step
		// clears its command, so a later identical step gets a new one.
		if guardedStep(kind, step) {
			c.issueGuardedStep(m, name, step)
			return nil
		}
		if p := m.Operation.Agent.Command; p != nil && p.Name == name && p.Step != nil && p.Step.Key() == step.Key() {
			return nil
		}
		s := step
		issueCommand(m, name, &s, c.now())
		return nil
	})
	if err != nil {
		return StepDone, err
	}
	return StepWait, nil
}

// cachedSteps returns the agent's cached steps of a kind.
func cachedSteps(n *store.Node, kind string) []protocol.Step {
	cache := n.Operation.Agent.Steps
	if cache == nil {
		return nil
	}
	if kind == "deploy" {
		return cache.Deploy
	}
	return cache.Clean
}

// mergeSteps lists out-of-band steps and the agent's in-band steps; an
// out-of-band step with the same interface.step shadows the in-band one
// (that is how deploy.write_image wraps the agent's step).
func mergeSteps(oob, inband []protocol.Step) []protocol.Step {
	seen := map[string]bool{}
	out := make([]protocol.Step, 0, len(oob)+len(inband))
	for _, s := range oob {
		seen[s.Key()] = true
		out = append(out, s)
	}
	for _, s := range inband {
		if !seen[s.Key()] {
			out = append(out, s)
		}
	}
	return out
}

// CleanStepsFor lists every clean step the node offers now: the driver's
// out-of-band steps and, for agent nodes, the cached in-band ones.
func (c *engine) CleanStepsFor(n *store.Node) []protocol.Step {
	d, ok := c.drivers[n.Driver]
	if !ok {
		return nil
	}
	if UsesAgent(n) {
		return mergeSteps(d.CleanSteps(n), cachedSteps(n, "clean"))
	}
	return d.CleanSteps(n)
}
