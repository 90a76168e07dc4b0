package conductor

// Power sync: the runtime's periodic check of every node's power state
// against its BMC.

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/anvil-metal/anvil/controller/state"
	"github.com/anvil-metal/anvil/controller/store"
)

// powerSync walks the fleet page by page and keeps per-node failure state
// for backoff. Its state lives only in memory: after a restart the walk
// starts over, which costs one extra round of reads.
type powerSync struct {
	mu       sync.Mutex
	marker   string
	failures map[string]int
	next     map[string]time.Time // backoff: not before
}

func (c *runtime) runPowerSync(ctx context.Context) {
	cfg := c.cfg.PowerSync
	if cfg.Interval <= 0 {
		return
	}
	ps := &powerSync{failures: map[string]int{}, next: map[string]time.Time{}}
	tick := cfg.Interval / time.Duration(cfg.Ticks)
	// jitter the start so controllers restarted together do not poll in step
	select {
	case <-ctx.Done():
		return
	case <-time.After(time.Duration(rand.Int64N(int64(tick) + 1))):
	}
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		c.powerSyncTick(ctx, ps, cfg)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// powerSyncTick checks the next page of nodes.
func (c *runtime) powerSyncTick(ctx context.Context, ps *powerSync, cfg PowerSyncConfig) {
	counts, err := c.st.CountNodesByState(ctx)
	if err != nil {
		c.log.Warn("power sync: counting nodes failed", "err", err)
		return
	}
	total := 0
	for _, n := range counts {
		total += n
	}
	page := total/cfg.Ticks + 1
	ps.mu.Lock()
	marker := ps.marker
	ps.mu.Unlock()
	nodes, err := c.st.ListNodes(ctx, store.NodeFilter{}, store.Page{Limit: page, Marker: marker, SortKey: "uuid"})
	if errors.Is(err, store.ErrNotFound) && marker != "" {
		// the node we stopped at was deleted: start the walk over (a few
		// nodes get an extra read this interval)
		c.log.Debug("power sync: page marker was deleted; starting over", "marker", marker)
		ps.mu.Lock()
		ps.marker = ""
		ps.mu.Unlock()
		return
	}
	if err != nil {
		c.log.Warn("power sync: listing nodes failed", "err", err)
		ps.mu.Lock()
		ps.marker = ""
		ps.mu.Unlock()
		return
	}
	ps.mu.Lock()
	if len(nodes) < page {
		ps.marker = ""
	} else {
		ps.marker = nodes[len(nodes)-1].UUID
	}
	ps.mu.Unlock()
	share := c.syncShare(ctx)
	sem := make(chan struct{}, max(cfg.Workers, 1))
	var wg sync.WaitGroup
	for _, n := range nodes {
		if !share(n.UUID) {
			continue
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			c.syncNodePower(ctx, ps, cfg, n)
		}()
	}
	wg.Wait()
}

// syncShare splits the fleet's power sync among the live controllers: each
// node belongs to one of them by a hash of its UUID over the sorted list
// all controllers read, so each BMC is polled once per interval whatever
// the number of controllers. A controller missing from the list (its
// registration failed) polls every node rather than leave some unpolled.
func (c *runtime) syncShare(ctx context.Context) func(node string) bool {
	live, err := c.st.LiveControllers(ctx)
	idx := slices.Index(live, c.holder)
	if err != nil || idx < 0 || len(live) < 2 {
		return func(string) bool { return true }
	}
	return func(node string) bool {
		h := fnv.New32a()
		_, _ = h.Write([]byte(node))
		return int(h.Sum32()%uint32(len(live))) == idx
	}
}

func (c *runtime) syncNodePower(ctx context.Context, ps *powerSync, cfg PowerSyncConfig, n *store.Node) {
	st := state.State(n.ProvisionState)
	if st == state.Enroll || n.Reservation != nil || n.TargetPowerState != nil || n.Operation.Firmware != nil {
		return // not verified yet, or work on it is running (a firmware update above all: a power action would cut a flash)
	}
	d, ok := c.drivers[n.Driver]
	if !ok {
		return
	}
	ps.mu.Lock()
	notBefore := ps.next[n.UUID]
	ps.mu.Unlock()
	if c.now().Before(notBefore) {
		return
	}
	actual, health, healthKnown, err := readPowerHealth(ctx, d, n)
	if err != nil {
		ps.mu.Lock()
		ps.failures[n.UUID]++
		fails := ps.failures[n.UUID]
		// back off exponentially (capped) from an unhealthy BMC
		ps.next[n.UUID] = c.now().Add(min(time.Duration(1<<min(fails, 6))*time.Second, 5*time.Minute))
		ps.mu.Unlock()
		c.log.Warn("power sync: reading power state failed", "node", n.UUID, "failures", fails, "err", err)
		if fails == cfg.MaxFailures && !n.Maintenance {
			msg := fmt.Sprintf("During sync_power_state, max retries exceeded for node %s, node state %s does not match expected state '%s'. Updating DB state to 'None' Switching node to maintenance mode. Error: %v",
				n.UUID, deref(n.PowerState), deref(n.PowerState), err)
			_, _ = store.MutateNodeEvents(ctx, c.st, n.UUID, func(m *store.Node) ([]*store.Event, error) {
				m.Maintenance, m.MaintenanceReason, m.Fault, m.PowerState = true, strp(msg), strp("power failure"), nil
				return []*store.Event{c.newEvent(n.UUID, "ERROR", "power", msg)}, nil
			})
		}
		return
	}
	ps.mu.Lock()
	delete(ps.failures, n.UUID)
	delete(ps.next, n.UUID)
	ps.mu.Unlock()
	recorded := deref(n.PowerState)
	healthChanged := healthKnown && health != deref(n.Health)
	drift := actual != recorded && actual != ""
	if !drift && !healthChanged {
		return // the common case: nothing is written
	}
	// A node with disable_power_off is never forced (Ironic's
	// force_power_state_during_sync): its recorded state follows the BMC.
	// An agent left running (fast track) is not powered back on: a
	// power-off outside the controller ends its fast track instead.
	enforce := drift && cfg.Enforce && !n.Maintenance && !n.DisablePowerOff && state.Stable(st) && recorded != "" && !idleAgent(n)
	if enforce {
		if err := d.SetPower(ctx, n, recorded); err == nil {
			c.event(ctx, n.UUID, "WARNING", "power", fmt.Sprintf("power state was %q, expected %q: restored %q", actual, recorded, recorded))
			drift = false
		} else {
			c.log.Warn("power sync: restoring power state failed", "node", n.UUID, "err", err)
		}
	}
	if !drift && !healthChanged {
		return
	}
	_, err = store.MutateNodeEvents(ctx, c.st, n.UUID, func(m *store.Node) ([]*store.Event, error) {
		var events []*store.Event
		if drift {
			if m.Reservation != nil || m.TargetPowerState != nil || deref(m.PowerState) != recorded {
				return nil, errStale // someone acted meanwhile; next round decides
			}
			m.PowerState = &actual
			events = append(events, c.newEvent(n.UUID, "WARNING", "power",
				fmt.Sprintf("power state changed outside the controller: recorded %q, BMC reports %q", recorded, actual)))
			if idleAgent(m) {
				events = append(events, c.endFastTrack(m, "the node's power changed outside the controller"))
			}
		}
		if healthChanged && health != deref(m.Health) {
			events = append(events, healthEvent(c.newEvent, m, health))
		}
		if len(events) == 0 {
			return nil, errStale
		}
		return events, nil
	})
	if err != nil && err != errStale {
		c.log.Warn("power sync: recording power state failed", "node", n.UUID, "err", err)
	}
}
