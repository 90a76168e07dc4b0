package conductor

// Node health (API 1.109): read with the power state by power sync, as
// Ironic's sync_power_state caches it (conductor/utils.py
// node_cache_health), and written only when it changes.

import (
	"context"
	"fmt"

	"github.com/anvil-metal/anvil/bmc"
	"github.com/anvil-metal/anvil/controller/store"
)

// healthReader is a Driver that reads the BMC's health in the same BMC
// operation as the power state. known is false when the driver has no
// health at all (the stored value is then left alone); "" means the BMC
// reported none (Ironic's None).
type healthReader interface {
	PowerHealth(ctx context.Context, n *store.Node) (power, health string, known bool, err error)
}

// readPowerHealth reads the power state, and the health if d can.
func readPowerHealth(ctx context.Context, d Driver, n *store.Node) (power, health string, known bool, err error) {
	if hr, ok := d.(healthReader); ok {
		return hr.PowerHealth(ctx, n)
	}
	power, err = d.PowerState(ctx, n)
	return power, "", false, err
}

// healthEvent records health on m and returns Ironic's history entry for
// the change (event type "monitoring", not an error).
func healthEvent(newEvent func(node, severity, typ, msg string) *store.Event, m *store.Node, health string) *store.Event {
	old := deref(m.Health)
	m.Health = nil
	if health != "" {
		m.Health = strp(health)
	}
	return newEvent(m.UUID, "INFO", "monitoring", fmt.Sprintf("Node health status changed: health='%s' (previously '%s')", noneIfEmpty(health), noneIfEmpty(old)))
}

func noneIfEmpty(s string) string {
	if s == "" {
		return "None"
	}
	return s
}

// PowerHealth implements healthReader: the health comes from the BMC
// operation that reads the power state. IPMI has none (as Ironic's
// ipmitool management, which does not implement get_node_health).
func (d *BMCDriver) PowerHealth(ctx context.Context, n *store.Node) (string, string, bool, error) {
	t, err := d.target(n)
	if err != nil {
		return "", "", false, err
	}
	ps, h, _, err := d.m.PowerHealth(ctx, t)
	return string(ps), string(h), d.hw != bmc.HardwareIPMI, err
}
