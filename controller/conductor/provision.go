package conductor

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/anvil-metal/anvil/controller/state"
	"github.com/anvil-metal/anvil/controller/store"
	"github.com/anvil-metal/anvil/protocol"
)

// ProvisionRequest is a PUT /v1/nodes/{id}/states/provision body, already
// checked for shape and microversion by the API.
type ProvisionRequest struct {
	Target         string
	CleanSteps     []protocol.Step // clean: interface, step, args
	DeploySteps    []protocol.Step // active/rebuild: interface, step, args, priority
	ConfigDrive    any
	RescuePassword string
	DisableRamdisk bool
	// RequestedBy names who sent the request (the API's account of its
	// user); kept for the sanitization records of the cleaning it starts.
	RequestedBy string
}

// Provision validates and commits a provision verb, then schedules the work.
// When it returns nil the new state is already stored.
func (c *engine) Provision(ctx context.Context, ident string, req ProvisionRequest) error {
	verb, ok := state.LookupVerb(req.Target)
	if !ok {
		n, err := c.st.GetNode(ctx, ident)
		if err != nil {
			return err
		}
		return Invalid("The requested action %q can not be performed on node %q while it is in state %q.", req.Target, n.UUID, n.ProvisionState)
	}
	n, err := store.MutateNodeEvents(ctx, c.st, ident, func(n *store.Node) ([]*store.Event, error) {
		cur := state.State(n.ProvisionState)
		if verb.Event == state.EvDeploy || verb.Event == state.EvRebuild {
			// checked on the node as this write reads it: one read
			if err := c.checkTemplates(ctx, n, verb); err != nil {
				return nil, err
			}
		}
		if err := c.acceptVerb(n, verb, req); err != nil {
			return nil, err
		}
		return []*store.Event{c.newEvent(n.UUID, "INFO", "provisioning",
			fmt.Sprintf("%s -> %s (%s requested)", cur, n.ProvisionState, req.Target))}, nil
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
func (c *engine) acceptVerb(n *store.Node, verb state.Verb, req ProvisionRequest) error {
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
	if verb.Event == state.EvAbort {
		return c.applyAbort(n)
	}
	next, _ := state.Next(cur, verb.Event)
	c.applyState(n, next, verb.Event)
	return c.prepare(n, verb, req)
}

// checkVerb holds the synchronous, per-verb refusals (400s before any work).
func (c *engine) checkVerb(n *store.Node, d Driver, verb state.Verb, req ProvisionRequest) error {
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
func (c *engine) prepare(n *store.Node, verb state.Verb, req ProvisionRequest) error {
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
		n.DeployStep = map[string]any{}
		if len(req.DeploySteps) > 0 {
			op.UserDeploySteps = append([]protocol.Step{}, req.DeploySteps...)
		}
		if req.ConfigDrive != nil {
			n.InstanceInfo["configdrive"] = req.ConfigDrive
		}
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

// applyAbort handles abort in a wait state. An abortable (or absent) current
// step fails the operation now; a non-abortable one is marked and the node
// fails as soon as that step finishes. In wait call-back (an anvil
// extension, see state.Extension) only a step the agent is running counts:
// a deploy waiting for the ramdisk to boot is aborted at once.
func (c *engine) applyAbort(n *store.Node) error {
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
	c.tearDownAgent(n) // an aborted erase really stops
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
		msg := fmt.Sprintf("Deploy aborted by operator during step %q", name)
		if UsesAgent(n) {
			msg += ": no agent step was running; the node is powered off"
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

// checkCleanSteps validates a manual clean request before anything is
// powered on. For an agent node whose catalogue is not cached yet, steps
// of the in-band interfaces (deploy, raid) are checked once the agent has
// reported them; everything else is checked now.
func (c *engine) checkCleanSteps(n *store.Node, d Driver, requested []protocol.Step) error {
	requested = withNodeArgs(n, requested)
	if !UsesAgent(n) {
		_, err := c.resolveSteps(d.CleanSteps(n), requested, true)
		return err
	}
	if n.Operation.Agent.Steps != nil {
		_, err := c.resolveSteps(c.CleanStepsFor(n), requested, true)
		return err
	}
	oob := d.CleanSteps(n)
	var now []protocol.Step
	for _, r := range requested {
		if isDriverStep(oob, r.Key()) || (r.Interface != protocol.InterfaceDeploy && r.Interface != protocol.InterfaceRAID) {
			now = append(now, r)
		}
	}
	_, err := c.resolveSteps(oob, now, true)
	return err
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

// resolveSteps matches requested steps against the available ones. For
// manual cleaning the requested order is kept and priority/abortable are
// copied from the driver's step; arguments are checked against argsinfo.
func (c *engine) resolveSteps(available, requested []protocol.Step, manual bool) ([]protocol.Step, error) {
	byKey := map[string]protocol.Step{}
	for _, s := range available {
		byKey[s.Key()] = s
	}
	out := make([]protocol.Step, 0, len(requested))
	for _, r := range requested {
		s, ok := byKey[r.Key()]
		if !ok {
			return nil, fmt.Errorf("node does not support clean step %s", r.Key())
		}
		if err := s.CheckArgs(r.Args); err != nil {
			return nil, err
		}
		s.Args = r.Args
		if !manual {
			s.Priority = r.Priority
		}
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

// SetPower validates and commits a power request, then schedules it.
func (c *engine) SetPower(ctx context.Context, ident, target string) error {
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
		if a := &n.Operation.Agent; state.LookupAllowed(cur) && target != PowerOff && target != SoftPowerOff && (a.Booted || a.Await != nil) {
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
