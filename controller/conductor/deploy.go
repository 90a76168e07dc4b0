package conductor

// The deploy flow: deployment (active, rebuild), planned from the
// driver's, the deploy templates' and the user's steps (deploysteps.go)
// and run by the step runner, and the tear-down of an instance (deleted),
// which hands the node to cleaning.

import (
	"context"
	"errors"
	"fmt"

	"github.com/anvil-metal/anvil/controller/state"
	"github.com/anvil-metal/anvil/controller/store"
	"github.com/anvil-metal/anvil/protocol"
)

// deploying advances nodes in states deploying and deleting.
type deploying struct {
	*machine
	steps *stepRunner
}

func (c *deploying) deploy(ctx context.Context, n *store.Node, d Driver) error {
	var plan []protocol.Step
	if n.Operation.Deploy == nil {
		var err error
		if plan, err = c.deploySteps(ctx, n, d); err != nil {
			return c.steps.failSteps(ctx, n.UUID, deployPhase, fmt.Sprintf("Failed to validate the final deploy steps list for node %s: %v", n.UUID, err), false)
		}
	}
	var pending []*store.Event
	if plan == nil || len(plan) > 0 {
		done, p, err := c.steps.runSteps(ctx, n, d, deployPhase, plan)
		if err != nil || !done {
			return err
		}
		pending = p
	}
	timed, report := c.deployTimed(n)
	if timed != nil {
		pending = append(pending, timed)
	}
	_, err := c.transition(ctx, n.UUID, state.Deploying, state.EvDone, func(m *store.Node) error {
		m.DeployStep = map[string]any{}
		m.Operation.Deploy, m.Operation.UserDeploySteps, m.Operation.DeployTiming = nil, nil, nil
		m.PowerState = strp(PowerOn)
		return nil
	}, pending...)
	if err == nil && report != nil {
		report()
	}
	return err
}

// tearDown powers the instance off (reboots a node with
// disable_power_off out of it) and forgets it, then starts cleaning.
func (c *deploying) tearDown(ctx context.Context, n *store.Node, d Driver) error {
	ps, err := powerOff(ctx, d, n, offReboot)
	if err != nil {
		_, terr := c.transition(ctx, n.UUID, state.Deleting, state.EvFail, func(m *store.Node) error {
			m.LastError = strp(fmt.Sprintf("Failed to tear down node %s: could not power it off: %v", n.UUID, err))
			return nil
		})
		return terr
	}
	var alloc *string
	_, err = c.transition(ctx, n.UUID, state.Deleting, state.EvClean, func(m *store.Node) error {
		m.PowerState = strp(ps)
		m.InstanceInfo = map[string]any{}
		m.InstanceUUID, m.InstanceName = nil, nil
		// The instance's allocation goes with it, as in Ironic.
		alloc, m.AllocationUUID = m.AllocationUUID, nil
		m.DeployStep, m.ServiceStep = map[string]any{}, map[string]any{}
		clearService(&m.Operation) // deleted from service failed or service wait
		wipeAgent(m)
		op := &m.Operation
		op.Deploy, op.UserDeploySteps, op.Clean, op.ManualClean, op.UserCleanSteps = nil, nil, nil, false, nil
		op.DeployTiming = nil // a failed deploy's
		m.CleanStep = map[string]any{}
		return nil
	})
	if err == nil && c.cfg.DataImages != nil {
		// The images the vmedia API downloaded for the instance are not
		// served to whoever has the node next.
		for _, dev := range VmediaDevices() {
			c.cfg.DataImages.Remove(n.UUID, dev)
		}
	}
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
