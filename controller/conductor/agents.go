package conductor

// The agent's boots and commands: the controller reboots a node into the
// agent ramdisk (PXE or virtual media, vmedia.go) with a new agent
// session, leaves steps for the agent to run (behind the disk guard's
// check for the steps that write disks, diskguard.go), runs the direct
// deploy interface's steps (agentdeploy.go), and tears the agent down
// when its operation failed or was aborted. What the agent's reports mean
// for the node is agentwait.go's; the session itself (lookup, heartbeats,
// tokens) is session.go's.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/anvil-metal/anvil/controller/state"
	"github.com/anvil-metal/anvil/controller/store"
	"github.com/anvil-metal/anvil/protocol"
)

// agents boots nodes into the agent ramdisk and leaves commands for the
// agent.
type agents struct {
	*core
}

// awaitBoot records in m that the controller (re)booted the node into the
// ramdisk: the agent of the new boot (started by bootRamdisk) is awaited
// and no command is pending.
func awaitBoot(m *store.Node, aw *store.Await) {
	m.Operation.Agent.Await, m.Operation.Agent.Command = aw, nil
	// the node has been reset into the new boot: a ramdisk that came up
	// by itself before (LeftRamdisk) is gone, lookups are answered again
	m.Operation.Agent.LeftRamdisk = false
}

// bootRamdisk sets PXE (or, for virtual media, inserts the node's ISO and
// sets the CD) for the next boot and reboots the node into the agent
// ramdisk; the caller moves the node to a wait state with the await
// record this returns. The new boot's agent session, with its nonce, is
// stored before the node is powered: there is no moment in which the
// node boots and a lookup without the nonce could get its token.
func (c *agents) bootRamdisk(ctx context.Context, n *store.Node, d Driver, reason, step string) (*store.Await, error) {
	oldBoot := n.Operation.Agent.BootID
	if _, err := store.MutateNode(ctx, c.st, n.UUID, func(m *store.Node) error {
		left := m.Operation.Agent.LeftRamdisk
		newBoot(&m.Operation.Agent, c.nonceVia(m), c.now())
		// A ramdisk that came up by itself after a driver step's reboot
		// may still be polling lookup until the reset below: it stays
		// refused until awaitBoot, written once the node was reset.
		m.Operation.Agent.LeftRamdisk = left
		m.Operation.Agent.Command = nil
		return nil
	}); err != nil {
		return nil, fmt.Errorf("start the agent session of the new boot: %w", err)
	}
	c.stage(n.UUID, store.BootStage{Stage: store.StageBoot, Detail: bootDetail(n, reason, step)})
	dev := "pxe"
	if usesVirtualMedia(n) {
		if err := c.insertMedia(ctx, n, d); err != nil {
			return nil, err
		}
		dev = "cdrom"
	}
	err := d.SetBootDevice(ctx, n, dev, false)
	c.stage(n.UUID, store.BootStage{Stage: store.StageBootDevice, Detail: dev + ", next boot only", Outcome: outcomeOf(err)})
	if err != nil {
		return nil, fmt.Errorf("set boot device %s: %w", dev, err)
	}
	err = d.SetPower(ctx, n, Rebooting)
	c.stage(n.UUID, store.BootStage{Stage: store.StagePower, Detail: Rebooting, Outcome: outcomeOf(err)})
	if err != nil {
		return nil, fmt.Errorf("reboot into the agent ramdisk: %w", err)
	}
	return &store.Await{Reason: reason, Since: c.now(), OldBootID: oldBoot, Step: step}, nil
}

// tearDownAgent ends an agent operation that failed or was aborted, as
// Ironic tears cleaning down: the agent's token dies (it can no longer act)
// and the node is powered off by the worker (the power action holds the
// reservation until done). A failed service keeps its power: the node
// holds an instance (Ironic's poweroff_in_servicefail is off).
func (c *agents) tearDownAgent(n *store.Node) {
	wipeAgent(n)
	if inService(state.State(n.ProvisionState)) {
		return
	}
	if UsesAgent(n) || usesAgentInspect(n) {
		n.TargetPowerState = strp(offTarget(n))
		n.Reservation = strp(c.cfg.Host)
	}
}

// inbandStep starts a step on the agent: the command is left for the next
// heartbeat and the node waits.
func (c *agents) inbandStep(ctx context.Context, n *store.Node, kind string, step protocol.Step) (StepStatus, error) {
	name := protocol.CmdExecuteCleanStep
	if kind == "deploy" {
		name = protocol.CmdExecuteDeployStep
	}
	inspected, err := c.inspectionFor(ctx, n, step)
	if err != nil {
		return StepDone, err
	}
	_, err = store.MutateNode(ctx, c.st, n.UUID, func(m *store.Node) error {
		step := withBurninArgs(m.DriverInfo, step)
		// Resuming after a restart may run this again: a command already
		// issued for this step keeps its id, so the agent (which never
		// re-runs an id) cannot execute the step twice. Completing a step
		// clears its command, so a later identical step gets a new one.
		if guardedStep(kind, step) {
			issueGuardedStep(m, name, step, c.now())
			return nil
		}
		if p := m.Operation.Agent.Command; p != nil && p.Name == name && p.Step != nil && p.Step.Key() == step.Key() {
			return nil
		}
		s := step
		issueCommand(m, name, &s, c.now())
		if inspected != nil {
			m.Operation.Agent.Command.Node["inventory"] = inspected
		}
		return nil
	})
	if err != nil {
		return StepDone, err
	}
	c.stage(n.UUID, store.BootStage{Stage: store.StageStepStart, Detail: kind + " " + step.Key()})
	return StepWait, nil
}

// inspectionFor is the node's last inspection inventory for the one step
// that compares the machine with it (deploy.verify_hardware), sent in the
// command's node context; nil for other steps and for a node never
// inspected (the agent then checks properties only).
func (c *agents) inspectionFor(ctx context.Context, n *store.Node, step protocol.Step) (json.RawMessage, error) {
	if step.Key() != "deploy.verify_hardware" {
		return nil, nil
	}
	raw, err := c.st.GetInventory(ctx, n.UUID)
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the inspection inventory for verify_hardware: %w", err)
	}
	return json.RawMessage(raw), nil
}
