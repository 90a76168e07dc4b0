package conductor

// Requests: the provision verbs and power actions the API accepts,
// checked against the node and committed with the state change they make
// before the runtime is asked to do the work.

import (
	"context"
	"fmt"

	"github.com/anvil-metal/anvil/controller/state"
	"github.com/anvil-metal/anvil/controller/store"
	"github.com/anvil-metal/anvil/protocol"
)

// requests accepts provision and power requests.
type requests struct {
	*machine
	steps  *stepRunner
	deploy *deploying // the deploy templates a deploy verb is checked against
	stops  *stops     // abort
}

// ProvisionRequest is a PUT /v1/nodes/{id}/states/provision body, already
// checked for shape and microversion by the API.
type ProvisionRequest struct {
	Target         string
	CleanSteps     []protocol.Step // clean: interface, step, args
	DeploySteps    []protocol.Step // active/rebuild: interface, step, args, priority
	ServiceSteps   []protocol.Step // service (1.87): interface, step, args (or a runbook's, resolved by the API)
	ConfigDrive    any
	RescuePassword string
	DisableRamdisk bool
	// RequestedBy names who sent the request (the API's account of its
	// user); kept for the sanitization records of the cleaning it starts.
	RequestedBy string
	// User is the account that asked ("" = unknown), the user of the
	// history event the request starts.
	User string
	// Runbook names the runbook the steps came from ("NAME (UUID)"), for
	// the node's history; "" for none.
	Runbook string
}

// Provision validates and commits a provision verb, then schedules the work.
// When it returns nil the new state is already stored.
func (c *requests) Provision(ctx context.Context, ident string, req ProvisionRequest) error {
	verb, ok := state.LookupVerb(req.Target)
	if !ok {
		n, err := c.st.GetNode(ctx, ident)
		if err != nil {
			return err
		}
		return Invalid("The requested action %q can not be performed on node %q while it is in state %q.", req.Target, n.UUID, n.ProvisionState)
	}
	if err := c.checkDriverStepArgs(ctx, ident, verb, req); err != nil {
		return err
	}
	n, err := store.MutateNodeEvents(ctx, c.st, ident, func(n *store.Node) ([]*store.Event, error) {
		cur := state.State(n.ProvisionState)
		if verb.Event == state.EvDeploy || verb.Event == state.EvRebuild {
			// checked on the node as this write reads it: one read
			if err := c.deploy.checkTemplates(ctx, n, verb); err != nil {
				return nil, err
			}
		}
		if err := c.acceptVerb(n, verb, req); err != nil {
			return nil, err
		}
		what := req.Target + " requested"
		if req.Runbook != "" {
			what += " with runbook " + req.Runbook
		}
		ev := c.newEvent(n.UUID, "INFO", "provisioning", fmt.Sprintf("%s -> %s (%s)", cur, n.ProvisionState, what))
		if req.User != "" {
			ev.User = &req.User // the history's user: who asked
		}
		return []*store.Event{ev}, nil
	})
	if err != nil {
		return err
	}
	c.log.Info("provision verb accepted", "node", n.UUID, "verb", req.Target, "state", n.ProvisionState)
	if state.Working(state.State(n.ProvisionState)) || n.TargetPowerState != nil {
		c.kick(n.UUID)
	}
	return nil
}

// acceptVerb checks a verb against the node and applies it.
func (c *requests) acceptVerb(n *store.Node, verb state.Verb, req ProvisionRequest) error {
	cur := state.State(n.ProvisionState)
	if (verb.Event == state.EvDeploy || verb.Event == state.EvRebuild) && n.Maintenance {
		return Invalid("The %s operation can't be performed on node %s because it's in maintenance mode.", req.Target, n.UUID)
	}
	if !state.Allowed(cur, verb.Event) || state.Working(cur) {
		if n.Reservation != nil {
			return Locked(n.UUID, *n.Reservation)
		}
		return Invalid("The requested action %q can not be performed on node %q while it is in state %q.", req.Target, n.UUID, n.ProvisionState)
	}
	if err := CheckUnlocked(n); err != nil { // e.g. a power action is running
		return err
	}
	d, ok := c.drivers[n.Driver]
	if !ok {
		return Invalid("Node %s uses hardware type %q, which this controller does not enable.", n.UUID, n.Driver)
	}
	if err := c.checkVerb(n, d, verb, req); err != nil {
		return err
	}
	switch {
	case verb.Event == state.EvUnhold:
		return c.unhold(n) // hold.go
	case verb.Event == state.EvAbort && inService(cur):
		return c.abortService(n, d) // service.go
	case verb.Event == state.EvAbort && state.Held(cur):
		return c.abortHold(n)
	case verb.Event == state.EvAbort:
		return c.stops.applyAbort(n)
	}
	next, _ := state.Next(cur, verb.Event)
	c.applyState(n, next, verb.Event)
	return c.prepare(n, verb, req)
}

// checkVerb holds the synchronous, per-verb refusals (400s before any work).
func (c *requests) checkVerb(n *store.Node, d Driver, verb state.Verb, req ProvisionRequest) error {
	if verb.Event == state.EvDeploy || verb.Event == state.EvRebuild {
		// Ironic's do_node_deploy validation (the template steps are
		// checked when the deploy plans its steps)
		if err := checkInstanceTraits(n); err != nil {
			return Invalid("Failed to validate deploy or power info for node %s: %v", n.UUID, err)
		}
	}
	switch verb.Event {
	case state.EvManage:
		if state.State(n.ProvisionState) == state.Enroll {
			if err := d.Validate(n)["power"]; err != nil {
				return Invalid("Cannot manage node %s: its driver_info cannot be used to reach the BMC: %v", n.UUID, err)
			}
		}
	case state.EvProvide:
		if n.Retired {
			return Invalid("The providing operation can't be performed on node %s because it is retired.", n.UUID)
		}
	case state.EvClean:
		if n.Maintenance {
			return Invalid("The cleaning operation can't be performed on node %s because it's in maintenance mode.", n.UUID)
		}
		if len(req.CleanSteps) == 0 {
			return Invalid("clean_steps is required when setting target provision state to clean")
		}
		if err := c.checkCleanSteps(n, d, req.CleanSteps); err != nil {
			return Invalid("Cannot clean node %s: %v", n.UUID, err)
		}
	case state.EvService:
		if n.Maintenance {
			return Invalid("The service operation can't be performed on node %s because it's in maintenance mode.", n.UUID)
		}
		steps := req.ServiceSteps
		if len(steps) == 0 {
			return Invalid("\"service_steps\" is required when setting target provision state to service")
		}
		if err := c.checkServiceSteps(n, d, steps, req.DisableRamdisk); err != nil {
			return Invalid("Cannot service node %s: %v", n.UUID, err)
		}
	case state.EvDelete, state.EvRebuild:
		if err := checkProtected(n); err != nil {
			return err
		}
	case state.EvRescue:
		if req.RescuePassword == "" {
			return Invalid("A non-empty rescue_password is required when setting target provision state to rescue")
		}
	}
	return nil
}

// prepare records what the operation needs in the same write as the state
// change, and clears leftovers of the previous one.
func (c *requests) prepare(n *store.Node, verb state.Verb, req ProvisionRequest) error {
	op := &n.Operation
	if state.Working(state.State(n.ProvisionState)) {
		n.LastError = nil // a new asynchronous operation starts clean
	}
	switch verb.Event {
	case state.EvProvide, state.EvClean:
		op.Clean, op.ManualClean, op.UserCleanSteps, op.Agent.Booted = nil, false, nil, false
		op.CleaningRequestedBy = cleaningRequester(verb, req)
		n.CleanStep = map[string]any{}
		if verb.Event == state.EvClean {
			// resolved against the node's steps when cleaning starts (after
			// the agent booted, for in-band steps)
			op.UserCleanSteps = append([]protocol.Step{}, req.CleanSteps...)
			op.ManualClean = true
			n.TargetProvisionState = strp(string(state.Manageable))
		}
	case state.EvDeploy, state.EvRebuild:
		op.Deploy, op.UserDeploySteps, op.Agent.Booted = nil, nil, false
		op.DeployTiming = &store.DeployTiming{RequestedAt: c.now()}
		n.DeployStep = map[string]any{}
		if len(req.DeploySteps) > 0 {
			op.UserDeploySteps = append([]protocol.Step{}, req.DeploySteps...)
		}
		if req.ConfigDrive != nil {
			n.InstanceInfo["configdrive"] = req.ConfigDrive
		}
	case state.EvService:
		prepareService(n, req) // service.go
	case state.EvDelete:
		// undeploy: the automated cleaning that follows is this request's
		op.CleaningRequestedBy = cleaningRequester(verb, req)
	case state.EvInspect:
		op.Agent.Booted = false
		now := c.now()
		n.InspectionStartedAt, n.InspectionFinishedAt = &now, nil
	case state.EvRescue:
		n.InstanceInfo["rescue_password"] = req.RescuePassword
	}
	return nil
}

// cleaningRequester is the requested_by of the sanitization records of the
// cleaning verb starts: the policy (automated cleaning on provide or
// undeploy, or a manual clean) and who asked.
func cleaningRequester(verb state.Verb, req ProvisionRequest) string {
	who := req.RequestedBy
	if who == "" {
		who = "the controller"
	}
	if verb.Event == state.EvClean {
		return "manual cleaning requested by " + who
	}
	on := "provide"
	if verb.Event == state.EvDelete {
		on = "undeploy" // "deleted" on the wire
	}
	return fmt.Sprintf("automated cleaning (controller policy) on %s requested by %s", on, who)
}

// checkCleanSteps validates a manual clean request before anything is
// powered on. For an agent node whose catalogue is not cached yet, steps
// of the in-band interfaces (deploy, raid) are checked once the agent has
// reported them; everything else is checked now.
func (c *requests) checkCleanSteps(n *store.Node, d Driver, requested []protocol.Step) error {
	requested = withNodeArgs(n, requested)
	if !UsesAgent(n) {
		_, err := c.steps.resolveSteps("clean", d.CleanSteps(n), requested)
		return err
	}
	if n.Operation.Agent.Steps != nil {
		_, err := c.steps.resolveSteps("clean", c.steps.CleanStepsFor(n), requested)
		return err
	}
	oob := d.CleanSteps(n)
	var now []protocol.Step
	for _, r := range requested {
		if isDriverStep(oob, r.Key()) || (r.Interface != protocol.InterfaceDeploy && r.Interface != protocol.InterfaceRAID) {
			now = append(now, r)
		}
	}
	_, err := c.steps.resolveSteps("clean", oob, now)
	return err
}

// checkDriverStepArgs lets a StepArgsChecker driver refuse the request's
// clean or deploy steps (a BIOS setting its registry rejects) with a 400
// before anything runs. It runs before the write that accepts the verb,
// not inside it: the driver may ask the BMC, which a write retried on a
// conflict would ask again. A node the verb cannot apply to now is left
// to acceptVerb's refusal, without a BMC call.
func (c *requests) checkDriverStepArgs(ctx context.Context, ident string, verb state.Verb, req ProvisionRequest) error {
	steps, what := req.CleanSteps, "clean"
	switch verb.Event {
	case state.EvDeploy, state.EvRebuild:
		steps, what = req.DeploySteps, "deploy"
	case state.EvService:
		steps, what = req.ServiceSteps, "service"
	case state.EvClean:
	default:
		return nil
	}
	if len(steps) == 0 {
		return nil
	}
	n, err := c.st.GetNode(ctx, ident)
	if err != nil {
		return err
	}
	chk, ok := c.drivers[n.Driver].(StepArgsChecker)
	cur := state.State(n.ProvisionState)
	if !ok || n.Maintenance || !state.Allowed(cur, verb.Event) || state.Working(cur) || CheckUnlocked(n) != nil {
		return nil
	}
	if err := chk.CheckStepArgs(ctx, n, withNodeArgs(n, steps)); err != nil {
		return Invalid("Cannot %s node %s: %v", what, n.UUID, err)
	}
	return nil
}

// SetPower validates and commits a power request, then schedules it.
func (c *requests) SetPower(ctx context.Context, ident, target string) error {
	switch target {
	case PowerOn, PowerOff, Rebooting, SoftRebooting, SoftPowerOff:
	default:
		n, err := c.st.GetNode(ctx, ident)
		if err != nil {
			return err
		}
		return Invalid("The requested action %q can not be performed on node %q while it is in state %q.", target, n.UUID, deref(n.PowerState))
	}
	n, err := store.MutateNodeEvents(ctx, c.st, ident, func(n *store.Node) ([]*store.Event, error) {
		cur := state.State(n.ProvisionState)
		if cur == state.Cleaning || cur == state.CleanWait {
			return nil, Invalid("Can not change power state of node %s while it is in state %q.", n.UUID, n.ProvisionState)
		}
		if err := refusePowerOff(n, target); err != nil {
			return nil, err
		}
		if err := CheckUnlocked(n); err != nil {
			return nil, err
		}
		if _, ok := c.drivers[n.Driver]; !ok {
			return nil, Invalid("Node %s uses hardware type %q, which this controller does not enable.", n.UUID, n.Driver)
		}
		n.TargetPowerState = strp(target)
		n.LastError = nil
		n.Reservation = strp(c.cfg.Host)
		events := []*store.Event{c.newEvent(n.UUID, "INFO", "power", "power action requested: "+target)}
		if idleAgent(n) {
			events = append(events, c.endFastTrack(n, "power action "+target+" requested"))
		}
		held := state.Held(cur) // the flow goes on after unhold, in the new boot
		if a := &n.Operation.Agent; (state.LookupAllowed(cur) || held) && target != PowerOff && target != SoftPowerOff && (a.Booted || a.Await != nil) {
			// The ramdisk boots again: its agent is the first of a new
			// boot, not a claimant of the old one.
			c.bootAgain(n)
			events = append(events, c.newEvent(n.UUID, "INFO", "agent", "power action "+target+" boots the ramdisk again: a new agent session"))
		}
		return events, nil
	})
	if err != nil {
		return err
	}
	c.kick(n.UUID)
	return nil
}
