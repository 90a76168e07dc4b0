package conductor

// What the agent's reports mean for a node waiting for it (clean wait,
// wait call-back, inspect wait): the ramdisk came back after a boot, or a
// command finished, and the node goes on in its flow (the step runner,
// the disk guard, inspection, an abort). The session service
// (session.go) records those reports; the engine reads them here.

import (
	"context"
	"errors"
	"fmt"

	"github.com/anvil-metal/anvil/controller/state"
	"github.com/anvil-metal/anvil/controller/store"
	"github.com/anvil-metal/anvil/protocol"
)

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
		return c.inspection.finishInspection(ctx, n, d, st)
	}
	if pending.Name == protocol.CmdInventory && pending.Guards != nil {
		return c.guard.diskCheckDone(ctx, n, *pending, st)
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
		res := c.steps.agentResult(n, ph, pending, st)
		if err := c.st.PutStepResult(ctx, res); err != nil {
			return fmt.Errorf("store the result of step %s: %w", key, err)
		}
		c.stage(n.UUID, store.BootStage{Stage: store.StageStepEnd, Detail: res.Kind + " " + key, Outcome: res.Outcome})
		ev, err := c.steps.signRecords(ctx, n, res)
		if err != nil {
			return err
		}
		report.events = ev
	}
	if pending.AbortRequestedAt != nil {
		return c.stops.finishAbort(ctx, n, key, st, report)
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
		return c.steps.completeAsync(ctx, n.UUID, key, errors.New(oneLine(msg)), "", report, clearCmd)
	}
	if pending.Step.RebootRequested {
		aw, err := c.agents.bootRamdisk(ctx, n, d, "reboot", key)
		if err != nil {
			return c.steps.completeAsync(ctx, n.UUID, key, fmt.Errorf("step requested a reboot, which failed: %w", err), st.Summary, report, clearCmd)
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
	return c.steps.completeAsync(ctx, n.UUID, key, nil, withDisklessNote(n, key, st.Summary), report, clearCmd)
}

// agentIsBack continues after the ramdisk (re)booted.
func (c *engine) agentIsBack(ctx context.Context, n *store.Node, d Driver, aw store.Await) error {
	c.agents.ejectMedia(ctx, n, d, "the agent called back", false)
	cur := state.State(n.ProvisionState)
	ready := func(m *store.Node) error {
		m.Operation.Agent.Await, m.Operation.Agent.Booted = nil, true
		agentReady(m, c.now(), pathFullBoot)
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
		return c.steps.completeAsync(ctx, n.UUID, aw.Step, nil, aw.Summary, report, func(m *store.Node) { _ = ready(m) })
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
