package conductor

// The step runner: the steps a node offers (the driver's and its agent's),
// a plan's steps run in order from the persisted index, each where it
// belongs (the driver, the agent, the direct deploy interface), and the
// node failed when one fails. A step left running on the agent ends in
// async.go, its result is stored by results.go and records.go.
//
// A flow made of steps (cleaning, deployment, servicing) is a
// stepPhase: its running state, where its plan and current step are kept
// and what a failed step does to the node; phaseOf names the phase of a
// node's state.

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/anvil-metal/anvil/controller/state"
	"github.com/anvil-metal/anvil/controller/store"
	"github.com/anvil-metal/anvil/protocol"
)

// stepRunner plans and runs the steps of cleaning and deployment and
// records their results.
type stepRunner struct {
	*machine
	agents   *agents       // in-band steps and the direct deploy interface
	firmware *firmwareFlow // the firmware steps
	children *childSteps   // steps for the child nodes (reservedsteps.go)
}

// stepPhase describes a flow made of steps for the shared step runner.
type stepPhase struct {
	kind      string      // clean | deploy | service
	running   state.State // where its steps run
	wait      state.State // where it waits for a step left running
	plan      func(op *store.Operation) **store.StepPlan
	current   func(n *store.Node) *map[string]any
	onFailure func(n *store.Node, msg string)
}

var cleanPhase = stepPhase{
	kind: "clean", running: state.Cleaning, wait: state.CleanWait, plan: func(op *store.Operation) **store.StepPlan { return &op.Clean },
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
	kind: "deploy", running: state.Deploying, wait: state.DeployWait, plan: func(op *store.Operation) **store.StepPlan { return &op.Deploy },
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
func (c *stepRunner) runSteps(ctx context.Context, n *store.Node, d Driver, ph stepPhase, plan []protocol.Step) (bool, []*store.Event, error) {
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
		if isHoldStep(step) {
			return false, nil, c.hold(ctx, n, ph, step) // hold.go
		}
		status, serr := c.executeStep(ctx, n, d, ph.kind, step)
		if serr != nil {
			msg := fmt.Sprintf("%s step %s failed on node %s: %v", capital(ph.kind), step.Key(), n.UUID, serr)
			rctx := withResult(ctx, c.runResult(n, ph, step.Key(), step.Args, serr, store.OutcomeFailed))
			return false, nil, c.failSteps(rctx, n.UUID, ph, msg, true)
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
func (c *stepRunner) failSteps(ctx context.Context, nodeUUID string, ph stepPhase, msg string, stepRunning bool) error {
	_, err := c.transition(ctx, nodeUUID, ph.running, state.EvFail, func(m *store.Node) error {
		// the agent gets no further command; its token dies with the operation
		c.agents.tearDownAgent(m)
		m.LastError = strp(msg)
		if stepRunning {
			ph.onFailure(m, msg)
		} else {
			*ph.current(m) = map[string]any{}
		}
		return nil
	}, c.newEvent(nodeUUID, "ERROR", ph.kind+"ing", msg))
	if err == nil && ph.kind == servicePhase.kind {
		c.ejectAfterFailedService(ctx, nodeUUID)
	}
	return err
}

// stepPhases are the flows made of steps (servicePhase: service.go).
func stepPhases() []stepPhase { return []stepPhase{cleanPhase, deployPhase, servicePhase} }

// currentStepKey names the step the node runs (interface.step), of
// whichever flow; "" when none.
func currentStepKey(n *store.Node) string {
	if s := n.ServiceStep; len(s) > 0 {
		return fmt.Sprintf("%v.%v", s["interface"], s["step"])
	}
	return protocol.NodeStepKey(n.CleanStep, n.DeployStep)
}

// phaseOf returns the step phase of a wait or running state.
func phaseOf(n *store.Node) (stepPhase, bool) {
	cur := state.State(n.ProvisionState)
	for _, ph := range stepPhases() {
		if cur == ph.running || cur == ph.wait {
			return ph, true
		}
	}
	return stepPhase{}, false
}

// executeStep runs one step where it belongs: the driver (out of band), the
// direct deploy interface, or the agent (in band).
func (c *stepRunner) executeStep(ctx context.Context, n *store.Node, d Driver, kind string, step protocol.Step) (StepStatus, error) {
	if step.ExecuteOnChildNodes {
		summary, err := c.children.run(ctx, n, kind, step)
		if err == nil {
			err = c.st.AppendEvent(ctx, c.newEvent(n.UUID, "INFO", kind+"ing", fmt.Sprintf("%s step %s %s", kind, step.Key(), summary)))
		}
		return StepDone, err
	}
	if isPowerStep(step) {
		return c.powerStep(ctx, n, d, kind, step)
	}
	if !UsesAgent(n) {
		return c.driverStep(ctx, n, d, kind, step)
	}
	if kind == "deploy" && isAgentDeployStep(step.Key()) {
		return c.agents.directDeployStep(ctx, n, d, step)
	}
	oob := d.CleanSteps(n)
	if kind == "deploy" {
		oob = d.DeploySteps(n)
	}
	if isDriverStep(oob, step.Key()) {
		return c.driverStep(ctx, n, d, kind, step)
	}
	return c.agents.inbandStep(ctx, n, kind, step)
}

// driverStep runs an out-of-band step. A bios step refreshes the BIOS
// cache when it ends, failed or not (Ironic's cache_bios_settings
// decorator): a failed apply may have changed some settings.
func (c *stepRunner) driverStep(ctx context.Context, n *store.Node, d Driver, kind string, step protocol.Step) (StepStatus, error) {
	if step.Interface == protocol.InterfaceFirmware {
		return c.firmware.execute(ctx, n, d, step)
	}
	if r, ok := d.(stepRebooter); ok && r.RebootsNode(step) && UsesAgent(n) && n.Operation.Agent.Booted {
		if err := c.leaveRamdisk(ctx, n.UUID, step.Key()); err != nil {
			return StepDone, err
		}
	}
	status, err := d.ExecuteStep(ctx, n, kind, step)
	if step.Interface == protocol.InterfaceBIOS && status == StepDone {
		refreshBIOSAndFirmware(ctx, c.st, c.log, n, d)
	}
	if err == nil && status == StepDone && agentNeededAfter(n, d, kind, step) {
		return c.backToRamdisk(ctx, n, d, step.Key(), "", nil)
	}
	return status, err
}

// stepRebooter is a Driver whose steps may reboot the node (the BMC
// types' bios steps, which apply the settings at the next boot, and
// firmware.update).
type stepRebooter interface {
	RebootsNode(step protocol.Step) bool
}

// agentNeededAfter reports whether, on an agent node whose ramdisk runs,
// step reboots the node out of it while a later step of the plan needs
// the agent: the node must then boot the ramdisk again before the plan
// goes on (Ironic reboots back into the ramdisk too).
func agentNeededAfter(n *store.Node, d Driver, kind string, step protocol.Step) bool {
	r, ok := d.(stepRebooter)
	if !ok || !UsesAgent(n) || !n.Operation.Agent.Booted || !r.RebootsNode(step) {
		return false
	}
	return laterStepsNeedAgent(n, d, kind)
}

// laterStepsNeedAgent reports whether a step after the running one of the
// node's plan runs on the agent.
func laterStepsNeedAgent(n *store.Node, d Driver, kind string) bool {
	ph, ok := phaseOf(n)
	if !ok || *ph.plan(&n.Operation) == nil {
		return false
	}
	plan := *ph.plan(&n.Operation)
	oob := d.CleanSteps(n)
	if kind == "deploy" {
		oob = d.DeploySteps(n)
	}
	for _, s := range plan.Steps[min(plan.Index+1, len(plan.Steps)):] {
		if s.Key() == "deploy.write_image" || (!isDriverStep(oob, s.Key()) && !isAgentDeployStep(s.Key()) && !conductorStep(s)) {
			return true
		}
	}
	return false
}

// leaveRamdisk revokes the agent's token before step reboots the node out
// of its ramdisk (leaveRamdisk in trust.go).
func (c *stepRunner) leaveRamdisk(ctx context.Context, nodeUUID, step string) error {
	_, err := store.MutateNodeEvents(ctx, c.st, nodeUUID, func(m *store.Node) ([]*store.Event, error) {
		if m.Operation.Agent.LeftRamdisk {
			return nil, nil
		}
		leaveRamdisk(&m.Operation.Agent, c.now())
		return []*store.Event{c.newEvent(nodeUUID, "INFO", "agent", fmt.Sprintf("step %s reboots the node out of the agent ramdisk: the agent's token is revoked", step))}, nil
	})
	return err
}

// backToRamdisk boots an agent node into its ramdisk again after step
// rebooted it out; step ends when the agent is back (agentIsBack), with
// summary in its "finished" event.
func (c *stepRunner) backToRamdisk(ctx context.Context, n *store.Node, d Driver, step, summary string, mut func(m *store.Node)) (StepStatus, error) {
	aw, err := c.agents.bootRamdisk(ctx, n, d, "boot", step)
	if err != nil {
		return StepDone, fmt.Errorf("booting the agent ramdisk again after step %s: %w", step, err)
	}
	aw.Summary = summary
	_, err = store.MutateNodeEvents(ctx, c.st, n.UUID, func(m *store.Node) ([]*store.Event, error) {
		awaitBoot(m, aw)
		m.PowerState = strp(PowerOn) // our own reboot: not a drift for power sync
		if mut != nil {
			mut(m)
		}
		return []*store.Event{c.newEvent(n.UUID, "INFO", "agent", fmt.Sprintf("step %s rebooted the node out of the agent ramdisk; booting the ramdisk again for the steps after it", step))}, nil
	})
	return StepWait, err
}

func isDriverStep(steps []protocol.Step, key string) bool {
	for _, s := range steps {
		if s.Key() == key {
			return true
		}
	}
	return false
}

// withNodeArgs fills arguments that Ironic takes from the node rather than
// from the request: raid.create_configuration builds the node's
// target_raid_config (set with PUT /v1/nodes/{id}/states/raid).
func withNodeArgs(n *store.Node, requested []protocol.Step) []protocol.Step {
	out := make([]protocol.Step, len(requested))
	for i, r := range requested {
		if r.Key() == "raid.create_configuration" && len(n.TargetRAIDConfig) > 0 {
			if _, given := r.Args["target_raid_config"]; !given {
				args := map[string]any{"target_raid_config": n.TargetRAIDConfig}
				for k, v := range r.Args {
					args[k] = v
				}
				r.Args = args
			}
		}
		out[i] = r
	}
	return out
}

// resolveSteps matches requested steps (of a manual clean, or a service:
// kind names it) against the available ones. The requested order is kept
// and priority/abortable are copied from the driver's step; arguments are
// checked against argsinfo.
func (c *stepRunner) resolveSteps(kind string, available, requested []protocol.Step) ([]protocol.Step, error) {
	byKey := map[string]protocol.Step{}
	for _, s := range available {
		byKey[s.Key()] = s
	}
	out := make([]protocol.Step, 0, len(requested))
	for _, r := range requested {
		if conductorStep(r) {
			out = append(out, plannedConductorStep(r)) // run by the conductor (hold.go, reservedsteps.go)
			continue
		}
		s, ok := byKey[r.Key()]
		if !ok {
			return nil, fmt.Errorf("node does not support %s step %s", kind, r.Key())
		}
		if err := s.CheckArgs(r.Args); err != nil {
			return nil, err
		}
		s.Args = r.Args
		out = append(out, s)
	}
	return out, nil
}

func stepToMap(s protocol.Step) map[string]any {
	var m map[string]any
	b, _ := json.Marshal(s)
	_ = json.Unmarshal(b, &m)
	return m
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
func (c *stepRunner) CleanStepsFor(n *store.Node) []protocol.Step {
	d, ok := c.drivers[n.Driver]
	if !ok {
		return nil
	}
	if UsesAgent(n) {
		return mergeSteps(d.CleanSteps(n), cachedSteps(n, "clean"))
	}
	return d.CleanSteps(n)
}
