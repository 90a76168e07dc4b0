package conductor

// Servicing (Ironic 23.0, API 1.87; doc/source/admin/servicing.rst): the
// service verb runs explicit steps on an active node through the step
// runner cleaning uses, and the node returns to active with its instance.
// Out-of-band steps (bios, firmware) run on the running instance; in-band
// steps boot the agent ramdisk on the active node first, and the node
// boots its instance again after the last step. disable_ramdisk (1.108)
// allows out-of-band steps only. This file owns the service phase, its
// planning, its end, its aborts and the checks of a service request.

import (
	"context"
	"fmt"

	"github.com/anvil-metal/anvil/controller/state"
	"github.com/anvil-metal/anvil/controller/store"
	"github.com/anvil-metal/anvil/protocol"
)

// servicePhase is servicing for the step runner. A step that fails puts
// the node in maintenance with fault "service failure" and clears
// service_step, as Ironic's servicing_error_handler does; the node keeps
// its power (Ironic's poweroff_in_servicefail is off by default) and its
// instance.
var servicePhase = stepPhase{
	kind: "service", running: state.Servicing, wait: state.ServiceWait,
	plan:    func(op *store.Operation) **store.StepPlan { return &op.Service },
	current: func(n *store.Node) *map[string]any { return &n.ServiceStep },
	onFailure: func(n *store.Node, msg string) {
		n.Maintenance = true
		if n.MaintenanceReason == nil {
			n.MaintenanceReason = strp(msg)
		}
		n.Fault = strp("service failure")
		n.ServiceStep = map[string]any{}
	},
}

// servicing advances nodes in state servicing.
type servicing struct {
	*machine
	steps    *stepRunner
	agents   *agents
	cleaning *cleaning // waitForRamdisk
}

// instanceSteps are in-band steps that write the instance's disks: a
// service must leave the instance as it is, so they are refused.
var instanceSteps = map[string]bool{
	"deploy.erase_devices": true, "deploy.erase_devices_metadata": true, "deploy.erase_devices_express": true,
	"deploy.burnin_disk": true, "deploy.write_image": true,
	"raid.create_configuration": true, "raid.delete_configuration": true,
}

// inbandServiceSteps lists the requested steps that must run on the
// agent: on an agent node, those no driver offers (hold excepted).
func inbandServiceSteps(n *store.Node, d Driver, requested []protocol.Step) []protocol.Step {
	if !UsesAgent(n) {
		return nil
	}
	oob := d.CleanSteps(n)
	var out []protocol.Step
	for _, r := range requested {
		if !conductorStep(r) && !isDriverStep(oob, r.Key()) {
			out = append(out, r)
		}
	}
	return out
}

// checkServiceSteps refuses a service request before anything runs: a
// step that would write the instance's disks, an in-band step with
// disable_ramdisk (Ironic fails such a service when it plans it), and an
// out-of-band step the driver does not offer or whose arguments are wrong.
// In-band steps are checked against the agent's catalogue when it runs.
func (c *requests) checkServiceSteps(n *store.Node, d Driver, requested []protocol.Step, disableRamdisk bool) error {
	requested = withNodeArgs(n, requested)
	for _, r := range requested {
		if instanceSteps[r.Key()] {
			return fmt.Errorf("service step %s would write the disks of the instance, which servicing keeps", r.Key())
		}
	}
	inband := inbandServiceSteps(n, d, requested)
	if len(inband) > 0 && disableRamdisk {
		return fmt.Errorf("service step %s requires the agent ramdisk, but disable_ramdisk is set: only out-of-band steps can run", inband[0].Key())
	}
	var oob []protocol.Step
	for _, r := range requested {
		if !UsesAgent(n) || isDriverStep(d.CleanSteps(n), r.Key()) || conductorStep(r) {
			oob = append(oob, r)
		}
	}
	_, err := c.steps.resolveSteps("service", d.CleanSteps(n), oob)
	return err
}

// service plans the requested steps (after booting the agent, when one
// of them runs in band) and runs them; the node then boots its instance
// again and returns to active.
func (c *servicing) service(ctx context.Context, n *store.Node, d Driver) error {
	op := &n.Operation
	var plan []protocol.Step
	if op.Service == nil {
		requested := withNodeArgs(n, op.UserServiceSteps)
		if inband := inbandServiceSteps(n, d, requested); len(inband) > 0 {
			if op.ServiceDisableRamdisk {
				return c.steps.failSteps(ctx, n.UUID, servicePhase, fmt.Sprintf("Cannot service node %s: service step %s requires the agent ramdisk, but disable_ramdisk is set", n.UUID, inband[0].Key()), false)
			}
			if !op.Agent.Booted {
				// In-band steps are known only once the agent runs.
				return c.cleaning.waitForRamdisk(ctx, n, d, servicePhase)
			}
		}
		var err error
		if plan, err = c.steps.resolveSteps("service", c.steps.CleanStepsFor(n), requested); err != nil {
			return c.steps.failSteps(ctx, n.UUID, servicePhase, fmt.Sprintf("Cannot service node %s: %v", n.UUID, err), false)
		}
	}
	done, pending, err := c.steps.runSteps(ctx, n, d, servicePhase, plan)
	if err != nil || !done {
		return err
	}
	return c.finishService(ctx, n, d, pending...)
}

// finishService ends servicing in active. A node whose agent ramdisk ran
// leaves it as a deploy does (Ironic's tear_down_service): media out,
// powered off, the disk made its boot device, powered on into its
// instance. A service of out-of-band steps only makes no power action (a
// bios or firmware step reboots the instance itself when it must).
func (c *servicing) finishService(ctx context.Context, n *store.Node, d Driver, events ...*store.Event) error {
	agent := UsesAgent(n) && (n.Operation.Agent.Booted || n.Operation.Agent.Token != "")
	if agent {
		c.agents.ejectMedia(ctx, n, d, "servicing done, leaving the ramdisk", true)
		// disable_power_off: no power-off, the power-on is a reboot
		_, err := powerOff(ctx, d, n, offLeaveOn)
		if err == nil {
			err = d.SetBootDevice(ctx, n, "disk", true)
		}
		if err == nil {
			err = d.SetPower(ctx, n, bootTarget(n))
		}
		if err != nil {
			return c.steps.failSteps(ctx, n.UUID, servicePhase, fmt.Sprintf("Failed to tear down from service for node %s, reason: %v", n.UUID, err), false)
		}
		events = append(events, c.newEvent(n.UUID, "INFO", "servicing", "left the agent ramdisk; the node boots its instance again"))
	}
	// the steps (bios.apply_configuration, firmware.update) may have changed them
	refreshBIOSAndFirmware(ctx, c.st, c.log, n, d)
	_, err := c.transition(ctx, n.UUID, state.Servicing, state.EvDone, func(m *store.Node) error {
		m.ServiceStep = map[string]any{}
		clearService(&m.Operation)
		if agent {
			wipeAgent(m)
			m.PowerState = strp(PowerOn)
		}
		return nil
	}, events...)
	return err
}

func clearService(op *store.Operation) {
	op.Service, op.UserServiceSteps, op.ServiceDisableRamdisk = nil, nil, false
}

// inService reports whether s is one of the servicing states, whose
// failures and aborts leave the node's power alone.
func inService(s state.State) bool {
	switch s {
	case state.Servicing, state.ServiceWait, state.ServiceFailed, state.ServiceHold:
		return true
	}
	return false
}

// prepareService records a service request in the write that accepts it.
// The agent of a held service stays up and serves the new steps.
func prepareService(n *store.Node, req ProvisionRequest) {
	op := &n.Operation
	clearService(op)
	op.UserServiceSteps = append([]protocol.Step{}, req.ServiceSteps...)
	op.ServiceDisableRamdisk = req.DisableRamdisk
	n.ServiceStep = map[string]any{}
}

// abortService is Ironic's abort of a service (manager._do_abort): in
// service wait or service hold a step that is not abortable is marked to
// abort once it ends (abort_after); otherwise the service fails and is
// aborted at once to active. From service failed the abort returns the
// node to active, outside maintenance only. A node whose agent ramdisk
// was booted for the service is rebooted into its instance (Ironic's
// do_node_service_abort powers it off and on with the instance's boot).
func (c *requests) abortService(n *store.Node, d Driver) error {
	cur := state.State(n.ProvisionState)
	if cur == state.ServiceFailed && n.Maintenance {
		return Invalid("Can not abort service on node \"%s\" while it is in maintenance mode. Please remove the node from maintenance prior to issuing the request to abort the service operation.", n.UUID)
	}
	if cur != state.ServiceFailed {
		if step := n.ServiceStep; len(step) > 0 {
			if abortable, _ := step["abortable"].(bool); !abortable {
				step["abort_after"] = true
				return nil
			}
		}
		c.applyState(n, state.ServiceFailed, state.EvFail)
	}
	msg := "By request, the service operation was aborted"
	if step := n.ServiceStep; len(step) > 0 {
		msg += fmt.Sprintf(" during or after the completion of step %q", fmt.Sprintf("%v.%v", step["interface"], step["step"]))
	}
	ramdisk := len(inbandServiceSteps(n, d, n.Operation.UserServiceSteps)) > 0 && !n.Operation.ServiceDisableRamdisk
	c.applyState(n, state.Active, state.EvAbort)
	wipeAgent(n)
	n.ServiceStep = map[string]any{}
	clearService(&n.Operation)
	n.LastError = strp(msg)
	if ramdisk && UsesAgent(n) {
		// the engine's power action takes the ramdisk's media out first
		n.TargetPowerState, n.Reservation = strp(Rebooting), strp(c.cfg.Host)
	}
	return nil
}

// abortServiceAfter ends a service whose step, marked abort_after, has
// just finished with more steps to come: failed, then aborted out of
// service failed to active as abortService does (two transitions, as
// Ironic's continue_node_service makes them, in one write: a crash
// between them would leave a node in service failed that nobody failed;
// called by the step runner's completion).
func (c *stepRunner) abortServiceAfter(ctx context.Context, n *store.Node, stepKey string, extra []*store.Event, mut func(m *store.Node)) error {
	msg := fmt.Sprintf("By request, the service operation was aborted during or after the completion of step %q", stepKey)
	ramdisk := false
	_, err := c.transitionThrough(ctx, n.UUID, state.ServiceWait, []hop{
		{state.EvFail, func(m *store.Node) error {
			mut(m)
			ramdisk = m.Operation.Agent.Booted || m.Operation.Agent.Token != ""
			wipeAgent(m)
			m.ServiceStep = map[string]any{}
			m.LastError = strp(msg)
			return nil
		}},
		{state.EvAbort, func(m *store.Node) error {
			clearService(&m.Operation)
			if ramdisk && UsesAgent(m) {
				m.TargetPowerState, m.Reservation = strp(Rebooting), strp(c.cfg.Host)
			}
			return nil
		}},
	}, append(extra, c.newEvent(n.UUID, "INFO", "servicing", msg))...)
	return err
}

// ejectAfterFailedService takes the agent's ISO out of a node whose
// service failed while it ran the ramdisk: the failure keeps the node's
// power (it holds an instance), but the media goes, as Ironic's
// tear_down_inband_service cleans the ramdisk up; left in, it would also
// refuse every cdrom request of the vmedia API.
func (c *stepRunner) ejectAfterFailedService(ctx context.Context, nodeUUID string) {
	n, err := c.st.GetNode(ctx, nodeUUID)
	if err != nil || !c.agents.mediaActive(n) {
		return
	}
	if d, ok := c.drivers[n.Driver]; ok {
		c.agents.ejectMedia(ctx, n, d, "servicing failed, leaving the ramdisk's media", true)
	}
}
