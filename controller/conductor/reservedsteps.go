package conductor

// Steps the conductor runs itself, which no driver or agent offers
// (Ironic 22.1, with parent_node at API 1.83): the power pseudo-steps
// power_on, power_off and reboot (Ironic's RESERVED_STEP_HANDLER_MAPPING,
// accepted on any interface as hold is), and any step requested with
// execute_on_child_nodes, which runs on the node's child nodes instead of
// on the node. This file owns both; the hold step is hold.go's.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/anvil-metal/anvil/controller/store"
	"github.com/anvil-metal/anvil/protocol"
)

// powerStepTargets maps the power pseudo-steps to the power target each
// asks for.
func powerStepTarget(name string) (string, bool) {
	switch name {
	case "power_on":
		return PowerOn, true
	case "power_off":
		return PowerOff, true
	case "reboot":
		return Rebooting, true
	}
	return "", false
}

// isPowerStep reports whether s is a power pseudo-step.
func isPowerStep(s protocol.Step) bool {
	_, ok := powerStepTarget(s.Step)
	return ok
}

// conductorStep reports whether the conductor runs s itself: the hold
// step, a power pseudo-step, or a step for the child nodes. Such steps are
// planned as requested (their checks happen when they run, as Ironic's)
// and never go to the agent.
func conductorStep(s protocol.Step) bool {
	return isHoldStep(s) || isPowerStep(s) || s.ExecuteOnChildNodes
}

// plannedConductorStep is the planned form of a requested conductor step.
func plannedConductorStep(r protocol.Step) protocol.Step {
	if isHoldStep(r) {
		return holdStep(r)
	}
	return protocol.Step{Interface: r.Interface, Step: r.Step, Priority: r.Priority, Args: r.Args,
		ExecuteOnChildNodes: r.ExecuteOnChildNodes, LimitChildNodeExecution: r.LimitChildNodeExecution}
}

// powerStep runs a power pseudo-step on the node. On an agent node whose
// ramdisk runs, a power-off or reboot leaves it (the agent's token is
// revoked first); a reboot or power-on followed by steps that need the
// agent boots the ramdisk again instead, with a new session, and the step
// ends when the agent is back. With disable_power_off, power_off fails as
// a power-off request does.
func (c *stepRunner) powerStep(ctx context.Context, n *store.Node, d Driver, kind string, step protocol.Step) (StepStatus, error) {
	target, _ := powerStepTarget(step.Step)
	if err := refusePowerOff(n, target); err != nil {
		return StepDone, err
	}
	a := n.Operation.Agent
	if UsesAgent(n) && target != PowerOff && laterStepsNeedAgent(n, d, kind) && (a.Booted || a.LeftRamdisk) {
		return c.backToRamdisk(ctx, n, d, step.Key(), "", nil)
	}
	if UsesAgent(n) && target != PowerOn && a.Booted && !a.LeftRamdisk {
		if err := c.leaveRamdisk(ctx, n.UUID, step.Key()); err != nil {
			return StepDone, err
		}
	}
	if err := d.SetPower(ctx, n, target); err != nil {
		return StepDone, fmt.Errorf("%s: %w", target, err)
	}
	_, err := store.MutateNode(ctx, c.st, n.UUID, func(m *store.Node) error {
		m.PowerState = strp(resultingPower(target)) // our own action: not a drift for power sync
		return nil
	})
	return StepDone, err
}

// childSteps runs a step on a node's child nodes: each child is reserved
// and leased as a synchronous API action holds a node (a child busy with
// its own operation fails the step, as Ironic's NodeLocked does), and the
// step runs there out of band, synchronously: a child has no agent of
// this operation, so a step that would wait (in band, or asynchronous) is
// refused, as Ironic's permit_child_node_step_async_result default.
type childSteps struct {
	*core
	// hold reserves and leases a node (nodeCalls.hold).
	hold func(ctx context.Context, ident string, check func(n *store.Node) error) (*store.Node, func(), error)
}

// run executes step on parent's children (those of LimitChildNodeExecution
// when it names any; names of nodes that are not children are ignored, as
// Ironic filters by parent) and returns what ran, for the history.
func (c *childSteps) run(ctx context.Context, parent *store.Node, kind string, step protocol.Step) (string, error) {
	var children []*store.Node
	err := store.EachPage(ctx, 500, func(p store.Page) ([]*store.Node, error) {
		return c.st.ListNodes(ctx, store.NodeFilter{ParentNode: &parent.UUID}, p)
	}, func(n *store.Node) string { return n.UUID }, func(n *store.Node) error {
		if len(step.LimitChildNodeExecution) == 0 || slices.Contains(step.LimitChildNodeExecution, n.UUID) {
			children = append(children, n)
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	if len(children) == 0 {
		return "no child node to run it on", nil
	}
	var done []string
	for _, ch := range children {
		if err := c.runOn(ctx, ch.UUID, kind, step); err != nil {
			return "", fmt.Errorf("while executing step %s on child node %s, %w", step.Key(), ch.UUID, err)
		}
		done = append(done, ch.UUID)
	}
	return "ran on child nodes " + strings.Join(done, ", "), nil
}

// runOn runs step on one child under its reservation and lease, as a
// synchronous API action on the child would: the parent's fenced context
// is not the child's (its reservation is written before its lease is
// taken).
func (c *childSteps) runOn(ctx context.Context, ident, kind string, step protocol.Step) error {
	ctx = store.WithLease(ctx, "")
	child, release, err := c.hold(ctx, ident, func(*store.Node) error { return nil })
	if err != nil {
		return err
	}
	defer release()
	d, ok := c.drivers[child.Driver]
	if !ok {
		return fmt.Errorf("its driver %s is not enabled here", child.Driver)
	}
	if target, ok := powerStepTarget(step.Step); ok {
		if err := refusePowerOff(child, target); err != nil {
			return err
		}
		if err := d.SetPower(ctx, child, target); err != nil {
			return err
		}
		_, err := store.MutateNode(ctx, c.st, child.UUID, func(m *store.Node) error {
			m.PowerState = strp(resultingPower(target))
			return nil
		})
		return err
	}
	oob := d.CleanSteps(child)
	if kind == "deploy" {
		oob = d.DeploySteps(child)
	}
	planned := protocol.Step{Interface: step.Interface, Step: step.Step, Args: step.Args}
	found := false
	for _, s := range oob {
		if s.Key() == planned.Key() {
			if err := s.CheckArgs(step.Args); err != nil {
				return err
			}
			planned.Priority, planned.Abortable, found = s.Priority, s.Abortable, true
		}
	}
	if !found {
		return fmt.Errorf("the step is not an out-of-band step of its driver %s (a child node's steps run out of band)", child.Driver)
	}
	status, err := d.ExecuteStep(ctx, child, kind, planned)
	if err != nil {
		return err
	}
	if status != StepDone {
		return errors.New("step returned invalid value: it did not finish at once")
	}
	return nil
}
