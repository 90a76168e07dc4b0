package generic

import (
	"context"
	"fmt"

	"github.com/anvil-metal/anvil/hardware"
	"github.com/anvil-metal/anvil/hardware/burnin"
	"github.com/anvil-metal/anvil/protocol"
)

// burnin runs a burn-in step. The arguments are the node's agent_burnin_*
// driver_info keys, which the controller copies into the command (the
// agent never sees the rest of driver_info: it holds BMC credentials).
func (m *Manager) burnin(ctx context.Context, step string, args map[string]any, progress hardware.ProgressFunc) (any, error) {
	invalid := func(err error) error {
		return &protocol.Error{Type: protocol.ErrTypeInvalidArgs, Code: 400, Message: fmt.Sprintf("%s: %v", step, err)}
	}
	switch step {
	case "burnin_cpu":
		o, err := burnin.CPUArgs(args)
		if err != nil {
			return nil, invalid(err)
		}
		o.Root = m.cfg.Root
		return burnin.CPU(ctx, o, progress)
	case "burnin_memory":
		avail, err := burnin.MemAvailable(m.cfg.Root)
		if err != nil {
			return nil, &protocol.Error{Type: protocol.ErrTypeInternal, Code: 500, Message: fmt.Sprintf("%s: %v", step, err)}
		}
		// A percentage is of the memory the agent can give away.
		avail = max(avail, burnin.AgentReserve) - burnin.AgentReserve
		o, err := burnin.MemoryArgs(args, avail)
		if err != nil {
			return nil, invalid(err)
		}
		o.Root = m.cfg.Root
		return burnin.Memory(ctx, o, progress)
	case "burnin_disk":
		o, err := burnin.DiskArgs(args)
		if err != nil {
			return nil, invalid(err)
		}
		disks, err := m.disks(ctx)
		if err != nil {
			return nil, err
		}
		// Every disk, as IPA's fio job list; the guard (the opener) keeps
		// the test to the disks this agent may write, as for an erase.
		o.Skip, o.Serials = map[string]string{}, map[string]string{}
		for _, d := range disks {
			o.Devices = append(o.Devices, d.Path)
			o.Serials[d.Path] = d.Serial
			switch {
			case d.Optical:
				o.Skip[d.Path] = "optical drive"
			case d.ReadOnly:
				o.Skip[d.Path] = "read-only"
			}
		}
		o.Opener = m.opener()
		return burnin.Disk(ctx, o, progress)
	case "burnin_network":
		o, err := burnin.NetworkArgs(args)
		if err != nil {
			return nil, invalid(err)
		}
		return burnin.Network(ctx, o, progress)
	}
	return nil, fmt.Errorf("%s: %w", step, hardware.ErrNotSupported)
}
