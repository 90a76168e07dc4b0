package conductor

// A hung node's two BMC tools: its System Event Log (GET
// /v1/nodes/{node}/sel, an anvil extension) and a non-maskable interrupt
// (Ironic's PUT /v1/nodes/{node}/management/inject_nmi, API 1.29), which
// makes a hung kernel panic and print, or kdump, its state. The NMI runs
// as Ironic's inject_nmi does, under the node's exclusive lock (here: its
// reservation and lease, hold); the SEL is a read and takes neither.

import (
	"context"
	"errors"

	"github.com/anvil-metal/anvil/bmc"
	"github.com/anvil-metal/anvil/controller/store"
)

// DiagDriver is a driver that can read a node's SEL and send it an NMI
// (ipmi, redfish). fake-hardware is not one: Ironic's fake management has
// no inject_nmi either, and answers UnsupportedDriverExtension.
type DiagDriver interface {
	SystemEventLog(ctx context.Context, n *store.Node) ([]bmc.SELEntry, error)
	InjectNMI(ctx context.Context, n *store.Node) error
}

// diagFor is n's driver as a DiagDriver, or Ironic's
// UnsupportedDriverExtension for extension.
func (v *nodeCalls) diagFor(n *store.Node, extension string) (DiagDriver, error) {
	switch d := v.drivers[n.Driver].(type) {
	case DiagDriver:
		return d, nil
	case *BMCDriver:
		return bmcDiag{d}, nil
	}
	return nil, unsupported(n, extension)
}

// InjectNMI is Ironic's inject_nmi: the BMC sends the node an NMI. The
// node is held for the call (NodeLocked while a flow works on it). What
// the OS does with it cannot be read back; the BMC's acceptance is what
// counts, and it is said in the node's history.
func (v *nodeCalls) InjectNMI(ctx context.Context, ident string) error {
	n, release, err := v.hold(ctx, ident, func(*store.Node) error { return nil })
	if err != nil {
		return err
	}
	defer release()
	d, err := v.diagFor(n, "inject_nmi")
	if err != nil {
		return err
	}
	if err := d.InjectNMI(ctx, n); err != nil {
		if errors.Is(err, bmc.ErrUnsupported) {
			return Wrap(CodeInvalid, err, "Driver %s does not support inject_nmi: %v", n.Driver, err)
		}
		return driverFailure(err, "Inject NMI failed for node %s. Error: %v", n.UUID, err)
	}
	return nil
}

// SystemEventLog reads the node's SEL live from its BMC, oldest first.
func (v *nodeCalls) SystemEventLog(ctx context.Context, ident string) ([]bmc.SELEntry, error) {
	n, err := v.st.GetNode(ctx, ident)
	if err != nil {
		return nil, err
	}
	d, err := v.diagFor(n, "sel")
	if err != nil {
		return nil, err
	}
	sel, err := d.SystemEventLog(ctx, n)
	if errors.Is(err, bmc.ErrUnsupported) {
		return nil, Wrap(CodeInvalid, err, "Driver %s cannot read the SEL of node %s: %v", n.Driver, n.UUID, err)
	}
	if err != nil {
		return nil, driverFailure(err, "Reading the SEL of node %s failed: %v", n.UUID, err)
	}
	if sel == nil {
		sel = []bmc.SELEntry{}
	}
	return sel, nil
}

// bmcDiag is the DiagDriver of the ipmi and redfish hardware types (a
// type of its own: BMCDriver has methods enough).
type bmcDiag struct{ *BMCDriver }

// SystemEventLog implements DiagDriver.
func (d bmcDiag) SystemEventLog(ctx context.Context, n *store.Node) ([]bmc.SELEntry, error) {
	t, err := d.target(n)
	if err != nil {
		return nil, Invalid("%v", err)
	}
	sel, _, err := d.m.SystemEventLog(ctx, t)
	return sel, err
}

// InjectNMI implements DiagDriver; the history says it was sent.
func (d bmcDiag) InjectNMI(ctx context.Context, n *store.Node) error {
	if _, err := d.target(n); err != nil {
		return Invalid("%v", err)
	}
	return d.do(ctx, n, "NMI injected", func(t bmc.Target) (bmc.Outcome, error) { return d.m.InjectNMI(ctx, t) })
}
