package conductor

// The state machine's writes, which every part of the lifecycle engine
// makes its changes through: a transition moves a node from one
// provision state by an event, in one store write with the change the
// caller makes and the node's history entry, and schedules the node again.

import (
	"context"
	"errors"
	"fmt"

	"github.com/anvil-metal/anvil/controller/state"
	"github.com/anvil-metal/anvil/controller/store"
)

// machine moves nodes through the provision state machine.
type machine struct {
	*core
	kick func(nodeUUID string) // schedules the node on the runtime
}

// errStale means the node moved on (abort, another request) while we worked.
var errStale = errors.New("node state changed concurrently")

// transition moves the node from `from` by event ev, applying mut in the same
// write, together with the transition's history entry and any extra events.
// Targets follow Ironic: entering a non-stable state shows its default
// target, except that wait/resume/fail/abort keep the operation's target
// (manual cleaning targets manageable); a stable state clears it.
//
// A node whose boot had a second claimant (an alarm) moves only by
// securityStop: any other transition is stale, so whatever the worker was
// finishing (a clean step the impostor reported done, a deploy) never
// lands, and the next pass stops the operation instead.
func (c *machine) transition(ctx context.Context, nodeUUID string, from state.State, ev state.Event, mut func(n *store.Node) error, extra ...*store.Event) (*store.Node, error) {
	return c.move(ctx, nodeUUID, from, ev, false, mut, extra...)
}

// move is transition; alarmed says it is the security stop, the one
// transition a node with an alarm may make.
func (c *machine) move(ctx context.Context, nodeUUID string, from state.State, ev state.Event, alarmed bool, mut func(n *store.Node) error, extra ...*store.Event) (*store.Node, error) {
	return c.moveThrough(ctx, nodeUUID, from, alarmed, []hop{{ev, mut}}, extra...)
}

// hop is one transition of a moveThrough: its event and the change made
// with it.
type hop struct {
	ev  state.Event
	mut func(n *store.Node) error
}

// transitionThrough is transition by several events in one write: one
// logical change Ironic makes as two transitions (a service failed and
// aborted back to active) lands whole, never half.
func (c *machine) transitionThrough(ctx context.Context, nodeUUID string, from state.State, hops []hop, extra ...*store.Event) (*store.Node, error) {
	return c.moveThrough(ctx, nodeUUID, from, false, hops, extra...)
}

func (c *machine) moveThrough(ctx context.Context, nodeUUID string, from state.State, alarmed bool, hops []hop, extra ...*store.Event) (*store.Node, error) {
	var to state.State
	n, err := store.MutateNodeEvents(ctx, c.st, nodeUUID, func(n *store.Node) ([]*store.Event, error) {
		if state.State(n.ProvisionState) != from {
			return nil, fmt.Errorf("%w: expected %q, found %q", errStale, from, n.ProvisionState)
		}
		if n.Operation.Agent.Alarm != nil && !alarmed {
			return nil, fmt.Errorf("%w: a second agent claimant was seen; the operation stops instead", errStale)
		}
		events := append([]*store.Event(nil), extra...)
		at := from
		for _, h := range hops {
			next, err := state.Next(at, h.ev)
			if err != nil {
				return nil, err
			}
			c.applyState(n, next, h.ev)
			if h.mut != nil {
				if err := h.mut(n); err != nil {
					return nil, err
				}
			}
			events = append(events, c.newEvent(nodeUUID, "INFO", "provisioning", fmt.Sprintf("%s -> %s (%s)", at, next, h.ev)))
			at = next
		}
		to = at
		return events, nil
	})
	if err != nil {
		if errors.Is(err, errStale) && !alarmed {
			c.kick(nodeUUID) // an alarm may be why: the next pass stops the operation
		}
		return nil, err
	}
	c.log.Info("provision state changed", "node", nodeUUID, "from", from, "event", hops[len(hops)-1].ev, "to", to)
	if n.TargetPowerState != nil {
		c.kick(nodeUUID) // e.g. the power-off of a torn-down agent operation
	}
	return n, nil
}

func (c *machine) applyState(n *store.Node, next state.State, ev state.Event) {
	now := c.now()
	n.ProvisionState = string(next)
	n.ProvisionUpdatedAt = &now
	if ev != state.EvWait {
		// a firmware update lives only while its step waits
		n.Operation.Firmware = nil
	}
	switch {
	case state.Stable(next):
		n.TargetProvisionState = nil
	case n.TargetProvisionState != nil && (ev == state.EvWait || ev == state.EvResume || ev == state.EvFail || ev == state.EvAbort ||
		ev == state.EvHold || ev == state.EvUnhold):
		// same operation continues or fails: keep its target
	default:
		n.TargetProvisionState = strp(string(state.DefaultTarget(next)))
	}
	if state.Working(next) {
		n.Reservation = strp(c.cfg.Host)
	} else if n.TargetPowerState == nil {
		n.Reservation = nil
	}
}
