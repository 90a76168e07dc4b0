package conductor

import (
	"context"
	"errors"
	"fmt"

	"github.com/anvil-metal/anvil/controller/state"
	"github.com/anvil-metal/anvil/controller/store"
	"github.com/anvil-metal/anvil/protocol"
)

// advance does the next piece of the node's work, for the runtime that
// holds its lease. again says the node moved on (the runtime then loads
// it again and goes on); a node that rests or waits with nothing to do
// gives false.
func (c *engine) advance(ctx context.Context, n *store.Node, d Driver) (again bool, err error) {
	if alarmPending(n) {
		return true, c.securityStop(ctx, n) // before anything else the node would do
	}
	if n.TargetPowerState != nil {
		return true, c.power(ctx, n, d)
	}
	switch state.State(n.ProvisionState) {
	case state.Verifying:
		err = c.verify(ctx, n, d)
	case state.Cleaning:
		err = c.clean(ctx, n, d)
	case state.Deploying:
		err = c.deploy(ctx, n, d)
	case state.Deleting:
		err = c.tearDown(ctx, n, d)
	case state.Inspecting:
		err = c.inspect(ctx, n, d)
	case state.Adopting, state.Rescuing, state.Unrescuing:
		err = c.simple(ctx, n)
	case state.CleanWait, state.DeployWait, state.InspectWait:
		before := n.Revision
		if err = c.agentWait(ctx, n, d); err == nil {
			if after, gerr := c.st.GetNode(ctx, n.UUID); gerr != nil || after.Revision == before {
				return false, nil // nothing happened: keep waiting
			}
		}
	default:
		return false, nil // resting or waiting: nothing to do
	}
	return true, err
}

func (c *engine) power(ctx context.Context, n *store.Node, d Driver) error {
	target := *n.TargetPowerState
	if resultingPower(target) == PowerOff && c.mediaActive(n) && !state.LookupAllowed(state.State(n.ProvisionState)) {
		// A failed or aborted agent operation (tearDownAgent) ends with
		// this power-off: the node leaves the ramdisk here.
		c.ejectMedia(ctx, n, d, "the agent operation ended", true)
	}
	err := d.SetPower(ctx, n, target)
	ev := c.newEvent(n.UUID, "INFO", "power", "power action succeeded: "+target)
	if err != nil {
		ev = c.newEvent(n.UUID, "ERROR", "power", fmt.Sprintf("power action %q failed: %v", target, err))
	}
	_, merr := store.MutateNodeEvents(ctx, c.st, n.UUID, func(m *store.Node) ([]*store.Event, error) {
		m.TargetPowerState = nil
		if err != nil {
			m.LastError = strp(fmt.Sprintf("Failed to change power state to %q: %v", target, err))
		} else {
			m.PowerState = strp(resultingPower(target))
		}
		if !state.Working(state.State(m.ProvisionState)) {
			m.Reservation = nil
		}
		return []*store.Event{ev}, nil
	})
	return merr
}

func resultingPower(target string) string {
	switch target {
	case PowerOff, SoftPowerOff:
		return PowerOff
	}
	return PowerOn
}

func (c *engine) verify(ctx context.Context, n *store.Node, d Driver) error {
	if err := d.VerifyAccess(ctx, n); err != nil {
		_, terr := c.transition(ctx, n.UUID, state.Verifying, state.EvFail, func(m *store.Node) error {
			m.LastError = strp(fmt.Sprintf("Failed to verify management access to node %s: %v", n.UUID, err))
			return nil
		})
		return terr
	}
	ps, perr := d.PowerState(ctx, n)
	_, err := c.transition(ctx, n.UUID, state.Verifying, state.EvDone, func(m *store.Node) error {
		// Ironic's do_node_verify records what the power interface
		// reports; "" (fake-hardware before any power action) is null
		switch {
		case perr != nil:
		case ps == "":
			m.PowerState = nil
		default:
			m.PowerState = &ps
		}
		return nil
	})
	return err
}

func (c *engine) automatedClean(n *store.Node) bool {
	if n.AutomatedClean != nil {
		return *n.AutomatedClean
	}
	return c.cfg.AutomatedClean
}

// automatedCleanSteps are the enabled steps (priority > 0 after overrides),
// ordered by priority then interface. Two enabled steps of one interface
// with the same priority have no defined order: that is a configuration
// error, reported instead of guessing.
func (c *engine) automatedCleanSteps(n *store.Node) ([]protocol.Step, error) {
	var out []protocol.Step
	seen := map[string]string{} // interface/priority -> step
	for _, s := range c.CleanStepsFor(n) {
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

// stepPhase describes cleaning or deploying for the shared step runner.
type stepPhase struct {
	kind      string // clean | deploy
	running   state.State
	plan      func(op *store.Operation) **store.StepPlan
	current   func(n *store.Node) *map[string]any
	onFailure func(n *store.Node, msg string)
}

var cleanPhase = stepPhase{
	kind: "clean", running: state.Cleaning, plan: func(op *store.Operation) **store.StepPlan { return &op.Clean },
	current: func(n *store.Node) *map[string]any { return &n.CleanStep },
	onFailure: func(n *store.Node, msg string) {
		// A step that failed while running puts the node in maintenance
		// with fault "clean failure", as Ironic does.
		n.Maintenance = true
		n.MaintenanceReason = strp(msg)
		n.Fault = strp("clean failure")
	},
}

var deployPhase = stepPhase{
	kind: "deploy", running: state.Deploying, plan: func(op *store.Operation) **store.StepPlan { return &op.Deploy },
	current:   func(n *store.Node) *map[string]any { return &n.DeployStep },
	onFailure: func(*store.Node, string) {},
}

// runSteps executes the step list from the persisted index. plan, when
// not nil, is a freshly computed list, stored with the first step's write.
// Each step costs one write, made before it runs (current step, index and
// the history of the previous step), so a restart resumes at the step that
// was running (steps are idempotent). It returns done=true when every step
// has finished, with the events still to be committed by the caller's final
// transition.
func (c *engine) runSteps(ctx context.Context, n *store.Node, d Driver, ph stepPhase, plan []protocol.Step) (bool, []*store.Event, error) {
	steps, start := plan, 0
	if stored := *ph.plan(&n.Operation); plan == nil && stored != nil {
		steps, start = stored.Steps, stored.Index
	}
	var pending []*store.Event
	for idx := start; idx < len(steps); idx++ {
		step := steps[idx]
		verb := "started"
		if p := n.Operation.Agent.Command; p != nil && p.Step != nil && p.Step.Key() == step.Key() {
			// Its command was issued before a restart and is reused (the
			// agent never runs an id twice): the step goes on, it does
			// not start again.
			verb = "resumed"
		}
		started := c.newEvent(n.UUID, "INFO", ph.kind+"ing", fmt.Sprintf("%s step %s %s (%d/%d)", ph.kind, step.Key(), verb, idx+1, len(steps)))
		var err error
		n, err = store.MutateNodeEvents(ctx, c.st, n.UUID, func(m *store.Node) ([]*store.Event, error) {
			if state.State(m.ProvisionState) != ph.running {
				return nil, fmt.Errorf("%w: expected %q, found %q", errStale, ph.running, m.ProvisionState)
			}
			stored := ph.plan(&m.Operation)
			if plan != nil || *stored == nil {
				*stored = &store.StepPlan{Steps: steps}
			}
			*ph.current(m) = stepToMap(step)
			if (*stored).Index != idx || (*stored).StartedAt.IsZero() || verb == "started" {
				(*stored).StartedAt = c.now()
			}
			(*stored).Index = idx
			return append(pending, started), nil
		})
		if err != nil {
			return false, nil, err
		}
		plan, pending = nil, nil
		status, serr := c.executeStep(ctx, n, d, ph.kind, step)
		if serr != nil {
			msg := fmt.Sprintf("%s step %s failed on node %s: %v", capital(ph.kind), step.Key(), n.UUID, serr)
			err := c.failSteps(ctx, n.UUID, ph, msg, true)
			if err == nil {
				c.recordRun(ctx, c.runResult(n, ph, step.Key(), step.Args, serr, store.OutcomeFailed))
			}
			return false, nil, err
		}
		if status == StepWait {
			_, err := c.transition(ctx, n.UUID, ph.running, state.EvWait, nil)
			return false, nil, err
		}
		c.recordRun(ctx, c.runResult(n, ph, step.Key(), step.Args, nil, store.OutcomeSucceeded))
		pending = []*store.Event{c.newEvent(n.UUID, "INFO", ph.kind+"ing", fmt.Sprintf("%s step %s finished", ph.kind, step.Key()))}
	}
	return true, pending, nil
}

func capital(s string) string {
	if s == "" {
		return s
	}
	return string(s[0]-'a'+'A') + s[1:]
}

// failSteps moves the node to its failure state. stepRunning says whether a
// step was running (then the phase's failure policy applies, and the failed
// step stays visible in clean_step/deploy_step).
func (c *engine) failSteps(ctx context.Context, nodeUUID string, ph stepPhase, msg string, stepRunning bool) error {
	_, err := c.transition(ctx, nodeUUID, ph.running, state.EvFail, func(m *store.Node) error {
		// the agent gets no further command; its token dies with the operation
		c.tearDownAgent(m)
		m.LastError = strp(msg)
		if stepRunning {
			ph.onFailure(m, msg)
		} else {
			*ph.current(m) = map[string]any{}
		}
		return nil
	}, c.newEvent(nodeUUID, "ERROR", ph.kind+"ing", msg))
	return err
}

func (c *engine) clean(ctx context.Context, n *store.Node, d Driver) error {
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
			if plan, err = c.resolveSteps(c.CleanStepsFor(n), withNodeArgs(n, op.UserCleanSteps), true); err != nil {
				return c.failSteps(ctx, n.UUID, cleanPhase, fmt.Sprintf("Cannot clean node %s: %v", n.UUID, err), false)
			}
		} else {
			var err error
			if plan, err = c.automatedCleanSteps(n); err != nil {
				return c.failSteps(ctx, n.UUID, cleanPhase, fmt.Sprintf("Cannot clean node %s: %v", n.UUID, err), false)
			}
			if len(plan) == 0 {
				return c.finishClean(ctx, n, d, manual, c.newEvent(n.UUID, "INFO", "cleaning", "no clean step is enabled"))
			}
		}
	}
	done, pending, err := c.runSteps(ctx, n, d, cleanPhase, plan)
	if err != nil || !done {
		return err
	}
	return c.finishClean(ctx, n, d, manual, pending...)
}

// waitForRamdisk reboots the node into the agent ramdisk and waits for it.
func (c *engine) waitForRamdisk(ctx context.Context, n *store.Node, d Driver, ph stepPhase) error {
	aw, err := c.bootRamdisk(ctx, n, d, "boot", "")
	if err != nil {
		return c.failSteps(ctx, n.UUID, ph, fmt.Sprintf("Failed to boot node %s into the agent ramdisk: %v", n.UUID, err), false)
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
func (c *engine) finishClean(ctx context.Context, n *store.Node, d Driver, manual bool, events ...*store.Event) error {
	ev := state.EvDone
	if manual || n.Retired {
		ev = state.EvManage
	}
	agent := UsesAgent(n) && n.Operation.Agent.Booted
	if agent {
		c.ejectMedia(ctx, n, d, "cleaning done, leaving the ramdisk", true)
		// Ironic's tear_down_cleaning: the node leaves the ramdisk powered off.
		if err := d.SetPower(ctx, n, PowerOff); err != nil {
			return c.failSteps(ctx, n.UUID, cleanPhase, fmt.Sprintf("Cleaning of node %s finished but powering it off failed: %v", n.UUID, err), false)
		}
	}
	_, err := c.transition(ctx, n.UUID, state.Cleaning, ev, func(m *store.Node) error {
		m.CleanStep = map[string]any{}
		m.Operation.Clean, m.Operation.ManualClean, m.Operation.UserCleanSteps = nil, false, nil
		m.Operation.CleaningRequestedBy = ""
		if agent {
			wipeAgent(m)
			m.PowerState = strp(PowerOff)
		}
		return nil
	}, events...)
	return err
}

func (c *engine) deploy(ctx context.Context, n *store.Node, d Driver) error {
	var plan []protocol.Step
	if n.Operation.Deploy == nil {
		var err error
		if plan, err = c.deploySteps(ctx, n, d); err != nil {
			return c.failSteps(ctx, n.UUID, deployPhase, fmt.Sprintf("Failed to validate the final deploy steps list for node %s: %v", n.UUID, err), false)
		}
	}
	var pending []*store.Event
	if plan == nil || len(plan) > 0 {
		done, p, err := c.runSteps(ctx, n, d, deployPhase, plan)
		if err != nil || !done {
			return err
		}
		pending = p
	}
	_, err := c.transition(ctx, n.UUID, state.Deploying, state.EvDone, func(m *store.Node) error {
		m.DeployStep = map[string]any{}
		m.Operation.Deploy, m.Operation.UserDeploySteps = nil, nil
		m.PowerState = strp(PowerOn)
		return nil
	}, pending...)
	return err
}

// tearDown powers the instance off and forgets it, then starts cleaning.
func (c *engine) tearDown(ctx context.Context, n *store.Node, d Driver) error {
	if err := d.SetPower(ctx, n, PowerOff); err != nil {
		_, terr := c.transition(ctx, n.UUID, state.Deleting, state.EvFail, func(m *store.Node) error {
			m.LastError = strp(fmt.Sprintf("Failed to tear down node %s: could not power it off: %v", n.UUID, err))
			return nil
		})
		return terr
	}
	var alloc *string
	_, err := c.transition(ctx, n.UUID, state.Deleting, state.EvClean, func(m *store.Node) error {
		m.PowerState = strp(PowerOff)
		m.InstanceInfo = map[string]any{}
		m.InstanceUUID = nil
		// The instance's allocation goes with it, as in Ironic.
		alloc, m.AllocationUUID = m.AllocationUUID, nil
		m.DeployStep = map[string]any{}
		wipeAgent(m)
		op := &m.Operation
		op.Deploy, op.UserDeploySteps, op.Clean, op.ManualClean, op.UserCleanSteps = nil, nil, nil, false, nil
		m.CleanStep = map[string]any{}
		return nil
	})
	if err == nil {
		// The instance's VIFs go too (Ironic's remove_vifs_from_node).
		if verr := (&vifs{core: c.core}).removeVIFs(ctx, n.UUID); verr != nil {
			c.log.Warn("detaching the VIFs of a torn-down node failed", "node", n.UUID, "err", verr)
		}
	}
	if err == nil && alloc != nil {
		if derr := c.st.DeleteAllocation(ctx, *alloc); derr != nil && !errors.Is(derr, store.ErrNotFound) {
			c.log.Warn("deleting the allocation of a torn-down node failed", "node", n.UUID, "allocation", *alloc, "err", derr)
		}
	}
	return err
}

func (c *engine) inspect(ctx context.Context, n *store.Node, d Driver) error {
	if usesAgentInspect(n) {
		return c.startAgentInspection(ctx, n, d)
	}
	if err := d.Inspect(ctx, n); err != nil {
		_, terr := c.transition(ctx, n.UUID, state.Inspecting, state.EvFail, func(m *store.Node) error {
			m.LastError = strp(fmt.Sprintf("Failed to inspect hardware of node %s: %v", n.UUID, err))
			return nil
		})
		return terr
	}
	_, err := c.transition(ctx, n.UUID, state.Inspecting, state.EvDone, func(m *store.Node) error {
		now := c.now()
		m.InspectionFinishedAt = &now
		return nil
	})
	return err
}

// simple finishes operations that fake-hardware completes at once.
func (c *engine) simple(ctx context.Context, n *store.Node) error {
	_, err := c.transition(ctx, n.UUID, state.State(n.ProvisionState), state.EvDone, func(m *store.Node) error {
		delete(m.InstanceInfo, "rescue_password")
		if m.ProvisionState == string(state.Active) {
			m.PowerState = strp(PowerOn)
		}
		return nil
	})
	return err
}
