package conductor

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
	for p := (store.Page{Limit: 1000}); ; {
		list, err := v.st.ListPorts(ctx, f, p)
		if err != nil {
			return nil, nil, err
		}
		ports = append(ports, list...)
		if len(list) < p.Limit {
			break
		}
		p.Marker = list[len(list)-1].UUID
	}
	for p := (store.Page{Limit: 1000}); ; {
		list, err := v.st.ListPortgroups(ctx, f, p)
		if err != nil {
			return nil, nil, err
		}
		pgs = append(pgs, list...)
		if len(list) < p.Limit {
			break
		}
		p.Marker = list[len(list)-1].UUID
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
	for _, p := range ports {
		if id := (portLike{port: p}).vif(); id != "" {
			out = append(out, id)
		}
	}
	for _, pg := range pgs {
		if id := (portLike{pg: pg}).vif(); id != "" {
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
	for attempt := 0; ; attempt++ {
		ports, pgs, err := v.portsOf(ctx, n.UUID)
		if err != nil {
			return err
		}
		target, err := freePortLike(vif, ports, pgs, to)
		if err != nil {
			return err
		}
		err = v.setVIF(ctx, target, vif)
		if !errors.Is(err, store.ErrConflict) || attempt >= 20 {
			if err != nil {
				return fmt.Errorf("attach VIF %s to %s %s: %w", vif, target.kind(), target.uuid(), err)
			}
			v.log.Info("VIF attached", "node", n.UUID, "vif", vif, "to", target.kind(), "uuid", target.uuid())
			return nil
		}
	}
}

// DetachVIF is Ironic's vif_detach.
func (v *vifs) DetachVIF(ctx context.Context, n *store.Node, vif string) error {
	if err := CheckUnlocked(n); err != nil {
		return err
	}
	for attempt := 0; ; attempt++ {
		ports, pgs, err := v.portsOf(ctx, n.UUID)
		if err != nil {
			return err
		}
		var target *portLike
		for _, pg := range pgs {
			if pl := (portLike{pg: pg}); pl.vif() == vif {
				target = &pl
				break
			}
		}
		for _, p := range ports {
			if pl := (portLike{port: p}); target == nil && pl.vif() == vif {
				target = &pl
			}
		}
		if target == nil {
			return Invalid("Unable to detach VIF %s from node %s because it is not attached to it.", vif, n.UUID)
		}
		err = v.setVIF(ctx, *target, "")
		if !errors.Is(err, store.ErrConflict) || attempt >= 20 {
			return err
		}
	}
}

// removeVIFs detaches every VIF of the node (Ironic's
// remove_vifs_from_node, when an instance is torn down).
func (v *vifs) removeVIFs(ctx context.Context, nodeUUID string) error {
	ports, pgs, err := v.portsOf(ctx, nodeUUID)
	if err != nil {
		return err
	}
	var errs []error
	for _, p := range ports {
		if pl := (portLike{port: p}); pl.vif() != "" {
			errs = append(errs, v.setVIF(ctx, pl, ""))
		}
	}
	for _, pg := range pgs {
		if pl := (portLike{pg: pg}); pl.vif() != "" {
			errs = append(errs, v.setVIF(ctx, pl, ""))
		}
	}
	return errors.Join(errs...)
}
