package conductor

// The VIFs of a node's ports and port groups (Ironic's vif_attach,
// vif_list, vif_detach).

import (
	"context"
	"errors"
	"fmt"
	"sort"

	"github.com/anvil-metal/anvil/controller/store"
)

// TenantVIFKey is where Ironic records a port's or port group's VIF.
const TenantVIFKey = "tenant_vif_port_id"

// vifs attaches virtual interfaces to a node's ports and port groups as
// Ironic's VIF-port-ID network interfaces do without Neutron (there are no
// physical networks to learn from it, so every port's physical network
// is allowed): a port group is preferred to a port, a PXE-enabled port to
// another, in the order the node's ports and port groups were created.
// Each write is conditional on the port's revision, so two VIFs never get
// one port.
type vifs struct {
	*core
}

// portLike is a port or a port group, as Ironic's port_like_obj.
type portLike struct {
	port *store.Port
	pg   *store.Portgroup
}

func (p portLike) uuid() string {
	if p.pg != nil {
		return p.pg.UUID
	}
	return p.port.UUID
}

func (p portLike) kind() string {
	if p.pg != nil {
		return "Portgroup"
	}
	return "Port"
}

func (p portLike) info() map[string]any {
	if p.pg != nil {
		return p.pg.InternalInfo
	}
	return p.port.InternalInfo
}

func (p portLike) vif() string {
	v, _ := p.info()[TenantVIFKey].(string)
	return v
}

// node's ports and port groups, in creation order.
func (v *vifs) portsOf(ctx context.Context, nodeUUID string) ([]*store.Port, []*store.Portgroup, error) {
	f := store.ResourceFilter{NodeUUID: &nodeUUID}
	var ports []*store.Port
	var pgs []*store.Portgroup
	err := store.EachPage(ctx, 1000, func(p store.Page) ([]*store.Port, error) { return v.st.ListPorts(ctx, f, p) },
		func(p *store.Port) string { return p.UUID }, func(p *store.Port) error { ports = append(ports, p); return nil })
	if err != nil {
		return nil, nil, err
	}
	err = store.EachPage(ctx, 1000, func(p store.Page) ([]*store.Portgroup, error) { return v.st.ListPortgroups(ctx, f, p) },
		func(pg *store.Portgroup) string { return pg.UUID }, func(pg *store.Portgroup) error { pgs = append(pgs, pg); return nil })
	if err != nil {
		return nil, nil, err
	}
	return ports, pgs, nil
}

// ListVIFs is Ironic's vif_list: the VIFs of the node's ports, then of its
// port groups.
func (v *vifs) ListVIFs(ctx context.Context, nodeUUID string) ([]string, error) {
	ports, pgs, err := v.portsOf(ctx, nodeUUID)
	if err != nil {
		return nil, err
	}
	out := []string{}
	for _, pl := range portLikes(ports, pgs) {
		if id := pl.vif(); id != "" {
			out = append(out, id)
		}
	}
	return out, nil
}

// VIFTarget optionally names the port or port group to attach to (1.67).
type VIFTarget struct {
	PortUUID, PortgroupUUID string
}

// freePortLike is Ironic's get_free_port_like_object.
func freePortLike(vif string, ports []*store.Port, pgs []*store.Portgroup, to VIFTarget) (portLike, error) {
	var free []portLike
	byGroup := map[string][]portLike{}
	unusable := map[string]bool{}
	for _, p := range ports {
		pl := portLike{port: p}
		if to.PortUUID != "" && to.PortUUID != p.UUID {
			continue
		}
		if id := pl.vif(); id != "" {
			if id == vif {
				return portLike{}, Conflict("Unable to attach VIF because VIF %s is already attached to Ironic Port %s", vif, p.UUID)
			}
			unusable[deref(p.PortgroupUUID)] = true
			continue
		}
		if p.PortgroupUUID == nil && to.PortgroupUUID == "" {
			free = append(free, pl)
		} else {
			byGroup[deref(p.PortgroupUUID)] = append(byGroup[deref(p.PortgroupUUID)], pl)
		}
	}
	if to.PortUUID == "" {
		for _, pg := range pgs {
			pl := portLike{pg: pg}
			if to.PortgroupUUID != "" && to.PortgroupUUID != pg.UUID {
				continue
			}
			if id := pl.vif(); id == vif {
				return portLike{}, Conflict("Unable to attach VIF because VIF %s is already attached to Ironic Portgroup %s", vif, pg.UUID)
			} else if id != "" {
				continue
			}
			switch {
			case unusable[pg.UUID]:
				// A VIF is on one of its ports: use its other ports.
				if to.PortgroupUUID == "" {
					free = append(free, byGroup[pg.UUID]...)
				}
			case len(byGroup[pg.UUID]) > 0: // empty groups are no use
				free = append(free, pl)
			}
		}
	}
	if len(free) == 0 {
		return portLike{}, Invalid("Unable to attach VIF %s, not enough free physical ports.", vif)
	}
	// Port groups first, then PXE-enabled ports; otherwise as listed.
	sort.SliceStable(free, func(i, j int) bool { return rank(free[i]) > rank(free[j]) })
	return free[0], nil
}

func rank(p portLike) int {
	switch {
	case p.pg != nil:
		return 2
	case p.port.PXEEnabled:
		return 1
	}
	return 0
}

// setVIF writes (vif != "") or clears a port's or port group's VIF, at the
// revision read.
func (v *vifs) setVIF(ctx context.Context, p portLike, vif string) error {
	info := make(map[string]any, len(p.info())+1)
	for k, val := range p.info() {
		info[k] = val
	}
	delete(info, TenantVIFKey)
	if vif != "" {
		info[TenantVIFKey] = vif
	}
	if p.pg != nil {
		pg := *p.pg
		pg.InternalInfo = info
		if vif == "" {
			pg.Extra = withoutKey(pg.Extra, "vif_port_id")
		}
		return v.st.UpdatePortgroup(ctx, &pg)
	}
	port := *p.port
	port.InternalInfo = info
	if vif == "" {
		port.Extra = withoutKey(port.Extra, "vif_port_id")
	}
	return v.st.UpdatePort(ctx, &port)
}

// AttachVIF is Ironic's vif_attach for a node that no work is running on.
func (v *vifs) AttachVIF(ctx context.Context, n *store.Node, vif string, to VIFTarget) error {
	if err := CheckUnlocked(n); err != nil {
		return err
	}
	var target portLike
	noop := false
	err := retryVIFWrite(func() (bool, error) {
		ports, pgs, err := v.portsOf(ctx, n.UUID)
		if err != nil {
			return false, err
		}
		if noop = noopVIFs(n, ports, pgs); noop {
			return false, nil
		}
		if target, err = freePortLike(vif, ports, pgs, to); err != nil {
			return false, err
		}
		if err := v.setVIF(ctx, target, vif); err != nil {
			return true, fmt.Errorf("attach VIF %s to %s %s: %w", vif, target.kind(), target.uuid(), err)
		}
		return true, nil
	})
	if err != nil || noop {
		return err
	}
	if err := v.undoDuplicate(ctx, n.UUID, vif, target.uuid()); err != nil {
		return err
	}
	v.log.Info("VIF attached", "node", n.UUID, "vif", vif, "to", target.kind(), "uuid", target.uuid())
	return nil
}

// retryVIFWrite runs attempt again while its write fails with
// store.ErrConflict (another request wrote the port or port group it
// read), at most 21 times. attempt reports whether it got as far as the
// write: an error before it is final.
func retryVIFWrite(attempt func() (wrote bool, err error)) error {
	for n := 0; ; n++ {
		wrote, err := attempt()
		if !wrote || !errors.Is(err, store.ErrConflict) || n >= 20 {
			return err
		}
	}
}

// undoDuplicate takes the VIF off mine again if another request attached
// it elsewhere at the same time. Of two racing attaches the one that reads
// after the other wrote sees both and yields (both may yield, none stays
// twice): Ironic serializes them under the node's lock instead.
func (v *vifs) undoDuplicate(ctx context.Context, nodeUUID, vif, mine string) error {
	ports, pgs, err := v.portsOf(ctx, nodeUUID)
	if err != nil {
		return err
	}
	var own, other *portLike
	for _, pl := range append(portLikes(ports, nil), portLikes(nil, pgs)...) {
		if pl.vif() != vif {
			continue
		}
		if pl.uuid() == mine {
			own = &pl
		} else {
			other = &pl
		}
	}
	if own == nil || other == nil {
		return nil
	}
	if err := v.setVIF(ctx, *own, ""); err != nil {
		return err
	}
	return Conflict("Unable to attach VIF because VIF %s is already attached to Ironic %s %s", vif, other.kind(), other.uuid())
}

// noopVIFs: n has the noop network interface and neither ports nor port
// groups, so a VIF is attached and detached as Ironic's noop interface
// does it: accepted, recorded nowhere (and so never listed). With ports,
// anvil records VIFs on them, as Ironic's port-based interfaces do.
func noopVIFs(n *store.Node, ports []*store.Port, pgs []*store.Portgroup) bool {
	return n.Interfaces.Network == "noop" && len(ports) == 0 && len(pgs) == 0
}

func portLikes(ports []*store.Port, pgs []*store.Portgroup) []portLike {
	out := make([]portLike, 0, len(ports)+len(pgs))
	for _, p := range ports {
		out = append(out, portLike{port: p})
	}
	for _, pg := range pgs {
		out = append(out, portLike{pg: pg})
	}
	return out
}

// DetachVIF is Ironic's vif_detach.
func (v *vifs) DetachVIF(ctx context.Context, n *store.Node, vif string) error {
	if err := CheckUnlocked(n); err != nil {
		return err
	}
	return retryVIFWrite(func() (bool, error) {
		ports, pgs, err := v.portsOf(ctx, n.UUID)
		if err != nil {
			return false, err
		}
		if noopVIFs(n, ports, pgs) {
			return false, nil
		}
		// Port groups first, as Ironic looks.
		for _, pl := range append(portLikes(nil, pgs), portLikes(ports, nil)...) {
			if pl.vif() == vif {
				return true, v.setVIF(ctx, pl, "")
			}
		}
		return false, Invalid("Unable to detach VIF %s from node %s because it is not attached to it.", vif, n.UUID)
	})
}

// removeVIFs detaches every VIF of the node (Ironic's
// remove_vifs_from_node, when an instance is torn down).
func (v *vifs) removeVIFs(ctx context.Context, nodeUUID string) error {
	ports, pgs, err := v.portsOf(ctx, nodeUUID)
	if err != nil {
		return err
	}
	var errs []error
	for _, pl := range portLikes(ports, pgs) {
		if pl.vif() != "" {
			errs = append(errs, v.setVIF(ctx, pl, ""))
		}
	}
	return errors.Join(errs...)
}
