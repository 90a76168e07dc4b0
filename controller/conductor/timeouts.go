package conductor

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/anvil-metal/anvil/controller/state"
	"github.com/anvil-metal/anvil/controller/store"
)

// checkTimeouts fails nodes that waited too long for their agent. It reads
// only nodes in wait states (an indexed filter), never the whole table.
func (c *Conductor) checkTimeouts(ctx context.Context) {
	waits := []struct {
		st      state.State
		timeout time.Duration
		msg     func(n *store.Node) string
	}{
		{state.CleanWait, c.cfg.CleanWaitTimeout, func(n *store.Node) string {
			return fmt.Sprintf("Timeout reached while cleaning the node. Please check if the ramdisk responsible for the cleaning is running on the node. Failed on step %v.", n.CleanStep)
		}},
		{state.DeployWait, c.cfg.DeployWaitTimeout, func(n *store.Node) string {
			return fmt.Sprintf("Timeout reached while waiting for callback for node %s", n.UUID)
		}},
		{state.InspectWait, c.cfg.InspectWaitTimeout, func(n *store.Node) string {
			return fmt.Sprintf("Timeout reached while inspecting the node %s", n.UUID)
		}},
		{state.RescueWait, c.cfg.RescueWaitTimeout, func(n *store.Node) string {
			return fmt.Sprintf("Timeout reached while waiting for rescue ramdisk callback for node %s", n.UUID)
		}},
	}
	no := false
	for _, w := range waits {
		if w.timeout <= 0 {
			continue
		}
		st := string(w.st)
		nodes, err := c.st.ListNodes(ctx, store.NodeFilter{ProvisionState: &st, Maintenance: &no}, store.Page{})
		if err != nil {
			c.log.Error("listing waiting nodes failed", "state", st, "err", err)
			continue
		}
		deadline := c.now().Add(-w.timeout)
		for _, n := range nodes {
			if n.ProvisionUpdatedAt == nil || n.ProvisionUpdatedAt.After(deadline) {
				continue
			}
			msg := w.msg(n)
			stepRunning := len(n.CleanStep) > 0
			_, err := c.transition(ctx, n.UUID, w.st, state.EvFail, func(m *store.Node) error {
				m.LastError = strp(msg)
				if w.st == state.CleanWait && stepRunning {
					cleanPhase.onFailure(m, msg)
				}
				return nil
			})
			if err != nil && !errors.Is(err, errStale) {
				c.log.Error("failing timed-out node failed", "node", n.UUID, "err", err)
				continue
			}
			c.log.Warn("wait state timed out", "node", n.UUID, "state", st, "timeout", w.timeout)
		}
	}
}
