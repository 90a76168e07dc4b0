package conductor

// The cleaning flow: automated cleaning (on provide and undeploy) and
// manual cleaning (the clean verb), planned once the agent reported its
// steps, run by the step runner, ended powered off out of the ramdisk.

import (
	"context"
	"fmt"

	"github.com/anvil-metal/anvil/controller/state"
	"github.com/anvil-metal/anvil/controller/store"
	"github.com/anvil-metal/anvil/protocol"
)

// cleaning advances nodes in state cleaning.
type cleaning struct {
	*machine
	steps  *stepRunner
	agents *agents
}

func (c *cleaning) clean(ctx context.Context, n *store.Node, d Driver) error {
	op := &n.Operation
	manual := op.ManualClean
	var plan []protocol.Step
	if op.Clean == nil {
		if !manual && !c.automatedClean(n) {
			return c.finishClean(ctx, n, d, manual, c.newEvent(n.UUID, "INFO", "cleaning", "automated cleaning is disabled; skipping"))
		}
		if UsesAgent(n) && !op.Agent.Booted {
			// In-band steps are known only once the agent runs.
			return c.waitForRamdisk(ctx, n, d, cleanPhase)
		}
		if manual {
			var err error
			if plan, err = c.steps.resolveSteps("clean", c.steps.CleanStepsFor(n), withNodeArgs(n, op.UserCleanSteps)); err != nil {
				return c.steps.failSteps(ctx, n.UUID, cleanPhase, fmt.Sprintf("Cannot clean node %s: %v", n.UUID, err), false)
			}
		} else {
			var err error
			if plan, err = c.automatedCleanSteps(n); err != nil {
				return c.steps.failSteps(ctx, n.UUID, cleanPhase, fmt.Sprintf("Cannot clean node %s: %v", n.UUID, err), false)
			}
			if len(plan) == 0 {
				return c.finishClean(ctx, n, d, manual, c.newEvent(n.UUID, "INFO", "cleaning", "no clean step is enabled"))
			}
		}
	}
	done, pending, err := c.steps.runSteps(ctx, n, d, cleanPhase, plan)
	if err != nil || !done {
		return err
	}
	return c.finishClean(ctx, n, d, manual, pending...)
}

// waitForRamdisk reboots the node into the agent ramdisk and waits for it.
// On fast track the running agent is this operation's instead
// (fasttrack.go): no power action, and the flow goes on at once.
func (c *cleaning) waitForRamdisk(ctx context.Context, n *store.Node, d Driver, ph stepPhase) error {
	if ok, err := c.agents.startOnRunningAgent(ctx, n, string(ph.running), nil); ok || err != nil {
		return err
	}
	aw, err := c.agents.bootRamdisk(ctx, n, d, "boot", "")
	if err != nil {
		return c.steps.failSteps(ctx, n.UUID, ph, fmt.Sprintf("Failed to boot node %s into the agent ramdisk: %v", n.UUID, err), false)
	}
	_, err = c.transition(ctx, n.UUID, ph.running, state.EvWait, func(m *store.Node) error {
		awaitBoot(m, aw)
		m.PowerState = strp(PowerOn) // our own reboot: not a drift for power sync
		return nil
	}, c.newEvent(n.UUID, "INFO", "agent", "rebooted into the agent ramdisk; waiting for it to call back"))
	return err
}

// finishClean ends cleaning: available, or manageable after manual cleaning
// and for retired nodes (which must not become available).
func (c *cleaning) finishClean(ctx context.Context, n *store.Node, d Driver, manual bool, events ...*store.Event) error {
	ev := state.EvDone
	if manual || n.Retired {
		ev = state.EvManage
	}
	agent := UsesAgent(n) && n.Operation.Agent.Booted
	keep := agent && canKeepAgent(n, c.cfg.FastTrack)
	ps := PowerOff
	if agent && !keep {
		c.agents.ejectMedia(ctx, n, d, "cleaning done, leaving the ramdisk", true)
		// Ironic's tear_down_cleaning: the node leaves the ramdisk powered
		// off (rebooted with disable_power_off).
		var err error
		if ps, err = powerOff(ctx, d, n, offReboot); err != nil {
			return c.steps.failSteps(ctx, n.UUID, cleanPhase, fmt.Sprintf("Cleaning of node %s finished but powering it off failed: %v", n.UUID, err), false)
		}
	}
	// the steps (bios.apply_configuration, factory_reset) may have changed them
	refreshBIOSAndFirmware(ctx, c.st, c.log, n, d)
	if keep {
		events = append(events, c.keptEvent(n, "cleaning"))
	}
	_, err := c.transition(ctx, n.UUID, state.Cleaning, ev, func(m *store.Node) error {
		m.CleanStep = map[string]any{}
		m.Operation.Clean, m.Operation.ManualClean, m.Operation.UserCleanSteps = nil, false, nil
		m.Operation.CleaningRequestedBy = ""
		switch {
		case keep:
			keepAgent(m, c.now())
		case agent:
			wipeAgent(m)
			m.PowerState = strp(ps)
		}
		return nil
	}, events...)
	return err
}

func (c *cleaning) automatedClean(n *store.Node) bool {
	if n.AutomatedClean != nil {
		return *n.AutomatedClean
	}
	return c.cfg.AutomatedClean
}

// automatedCleanSteps are the enabled steps (priority > 0 after overrides),
// ordered by priority then interface. Two enabled steps of one interface
// with the same priority have no defined order: that is a configuration
// error, reported instead of guessing.
func (c *cleaning) automatedCleanSteps(n *store.Node) ([]protocol.Step, error) {
	var out []protocol.Step
	seen := map[string]string{} // interface/priority -> step
	for _, s := range c.steps.CleanStepsFor(n) {
		if p, ok := c.cfg.PriorityOverrides[s.Key()]; ok {
			s.Priority = p
		}
		if s.Priority <= 0 {
			continue
		}
		k := fmt.Sprintf("%s/%d", s.Interface, s.Priority)
		if other, dup := seen[k]; dup {
			c.log.Error("two enabled clean steps of one interface share a priority; not cleaning with that interface",
				"node", n.UUID, "interface", s.Interface, "priority", s.Priority, "steps", other+","+s.Key())
			return nil, fmt.Errorf("interface %s has two enabled clean steps with priority %d (%s and %s), so their order is undefined; "+
				"give one of them another priority with --clean-step-priority", s.Interface, s.Priority, other, s.Key())
		}
		seen[k] = s.Key()
		out = append(out, s)
	}
	protocol.SortSteps(out)
	return out, nil
}
