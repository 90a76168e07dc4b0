package conductor

// The lifecycle engine: the runtime hands it a node whose lease it holds
// (advance), and it sends the node to the flow that owns the node's
// working state, or to the agent's report when the node waits for its
// agent (agentwait.go). The flows are clean.go, deploy.go, inspect.go and
// simple (rescue, adoption); they share the step runner (steps.go), the
// agent's boots and commands (agents.go) and the ways an operation is
// stopped (timeouts.go, abort.go). servicing (service.go) is a step-based
// flow beside cleaning; a new flow is a type beside them, its working
// states in newEngine's work table and, for a step-based flow, a stepPhase
// (steps.go).

import (
	"context"
	"fmt"

	"github.com/anvil-metal/anvil/controller/state"
	"github.com/anvil-metal/anvil/controller/store"
)

// engine dispatches node work to the flows.
type engine struct {
	*machine
	agents     *agents
	steps      *stepRunner
	guard      *diskGuard
	inspection *inspecting
	stops      *stops
	firmware   *firmwareFlow
	// work maps each working state to what advances a node in it.
	work map[state.State]func(ctx context.Context, n *store.Node, d Driver) error
}

// newEngine builds the lifecycle engine and its parts over co; kick
// schedules a node on the runtime, leases are the runtime's.
func newEngine(co *core, kick func(nodeUUID string), leases leaser) (*engine, *requests) {
	m := &machine{core: co, kick: kick}
	ag := &agents{core: co}
	steps := &stepRunner{machine: m, agents: ag}
	fw := &firmwareFlow{machine: m, steps: steps}
	steps.firmware = fw
	st := &stops{machine: m, steps: steps, agents: ag, leases: leases}
	cl := &cleaning{machine: m, steps: steps, agents: ag}
	dp := &deploying{machine: m, steps: steps}
	sv := &servicing{machine: m, steps: steps, agents: ag, cleaning: cl}
	in := &inspecting{machine: m, agents: ag}
	e := &engine{machine: m, agents: ag, steps: steps, guard: &diskGuard{core: co, complete: steps.completeAsync},
		inspection: in, stops: st, firmware: fw}
	e.work = map[state.State]func(context.Context, *store.Node, Driver) error{
		state.Verifying:  e.verify,
		state.Cleaning:   cl.clean,
		state.Servicing:  sv.service,
		state.Deploying:  dp.deploy,
		state.Deleting:   dp.tearDown,
		state.Inspecting: in.inspect,
		state.Adopting:   e.simple,
		state.Rescuing:   e.simple,
		state.Unrescuing: e.simple,
	}
	return e, &requests{machine: m, steps: steps, deploy: dp, stops: st}
}

// advance does the next piece of the node's work, for the runtime that
// holds its lease. again says the node moved on (the runtime then loads
// it again and goes on); a node that rests or waits with nothing to do
// gives false.
func (c *engine) advance(ctx context.Context, n *store.Node, d Driver) (again bool, err error) {
	if alarmPending(n) {
		return true, c.stops.securityStop(ctx, n) // before anything else the node would do
	}
	if n.TargetPowerState != nil {
		return true, c.power(ctx, n, d)
	}
	cur := state.State(n.ProvisionState)
	if work, ok := c.work[cur]; ok {
		return true, work(ctx, n, d)
	}
	switch cur {
	case state.CleanWait, state.DeployWait, state.InspectWait, state.ServiceWait:
		if n.Operation.Firmware != nil {
			return c.firmware.advance(ctx, n, d)
		}
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
	cur := state.State(n.ProvisionState)
	if (resultingPower(target) == PowerOff || target == offTarget(n) || cur == state.Active) && c.agents.mediaActive(n) && !state.LookupAllowed(cur) {
		// A failed or aborted agent operation (tearDownAgent) ends with
		// this power-off (a reboot with disable_power_off), an aborted
		// service with a reboot into its instance (abortService): the node
		// leaves the ramdisk here.
		c.agents.ejectMedia(ctx, n, d, "the agent operation ended", true)
	}
	err := refusePowerOff(n, target)
	if err == nil {
		err = d.SetPower(ctx, n, target)
	}
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
	refreshBIOSAndFirmware(ctx, c.st, c.log, n, d)
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

// simple is the rescue flow (rescue, unrescue) and adoption, which
// fake-hardware completes at once.
func (c *engine) simple(ctx context.Context, n *store.Node, _ Driver) error {
	_, err := c.transition(ctx, n.UUID, state.State(n.ProvisionState), state.EvDone, func(m *store.Node) error {
		delete(m.InstanceInfo, "rescue_password")
		if m.ProvisionState == string(state.Active) {
			m.PowerState = strp(PowerOn)
		}
		return nil
	})
	return err
}
