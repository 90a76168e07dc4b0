package conductor

// The runtime: the work queue, its workers and the processing of one node
// (leases.go: node leases among controllers; powersync.go: power sync).

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/anvil-metal/anvil/controller/store"
)

// runtime runs the work: a queue of nodes to process, a bounded pool of
// workers taking one node at a time, the node leases that say which
// controller works on which node, and the takeover of work nobody holds.
// What processing a node means is the engine's (advance).
type runtime struct {
	*core
	holder   string         // this process in node leases
	started  time.Time      // when this process's conductor was built
	leases   leaseTable     // what this process holds
	notifier store.Notifier // nil for a store with a single controller

	// advance does the next piece of a node's work (engine.advance).
	advance func(ctx context.Context, n *store.Node, d Driver) (again bool, err error)
	// checkTimers fails nodes that waited too long (stops.checkTimeouts).
	checkTimers func(ctx context.Context)
	// background are further loops run beside the workers until ctx
	// ends (the allocator's).
	background []func(ctx context.Context)

	mu      sync.Mutex
	cond    *sync.Cond
	holds   map[string]int // nodes an API action holds reserved here (nodeCalls.hold)
	queue   []string
	queued  map[string]bool
	running map[string]bool
	dirty   map[string]bool
	stopped bool
	wg      sync.WaitGroup
}

func newRuntime(co *core) *runtime {
	c := &runtime{core: co, holder: newHolder(co.cfg.Host), started: co.now(), leases: leaseTable{held: map[string]time.Time{}},
		queued: map[string]bool{}, running: map[string]bool{}, dirty: map[string]bool{}, holds: map[string]int{}}
	c.notifier, _ = co.st.(store.Notifier)
	c.cond = sync.NewCond(&c.mu)
	return c
}

// Run starts the workers, takes over interrupted work (its own after a
// restart, and that of dead controllers sharing the database) and checks
// wait-state timeouts until ctx ends; it returns once every worker has
// finished its current node and this controller's leases are released.
func (c *runtime) Run(ctx context.Context) error {
	if c.cfg.SoleController {
		if err := c.st.ClearLeases(ctx); err != nil {
			return fmt.Errorf("clearing the leases of a previous run: %w", err)
		}
	}
	for i := 0; i < c.cfg.Workers; i++ {
		c.wg.Add(1)
		go c.worker(ctx)
	}
	var bg sync.WaitGroup
	for _, loop := range append([]func(context.Context){c.runLeases, c.listen, c.runPowerSync}, c.background...) {
		bg.Add(1)
		go func() { defer bg.Done(); loop(ctx) }()
	}
	t := time.NewTicker(c.cfg.CheckInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			c.mu.Lock()
			c.stopped = true
			c.cond.Broadcast()
			c.mu.Unlock()
			c.wg.Wait()
			bg.Wait()
			c.releaseAll()
			return nil
		case <-t.C:
			c.checkTimers(ctx)
		}
	}
}

// Kick schedules processing of a node. A node is processed by one worker at
// a time; a kick during processing makes it run again afterwards.
func (c *runtime) Kick(nodeUUID string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.running[nodeUUID] {
		c.dirty[nodeUUID] = true
		return
	}
	if c.queued[nodeUUID] {
		return
	}
	c.queued[nodeUUID] = true
	c.queue = append(c.queue, nodeUUID)
	c.cond.Signal()
}

// Idle reports whether no node is queued or being processed (for tests and
// benchmarks that wait for the fleet to settle).
func (c *runtime) Idle() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.queue) == 0 && len(c.running) == 0
}

func (c *runtime) worker(ctx context.Context) {
	defer c.wg.Done()
	for {
		c.mu.Lock()
		for len(c.queue) == 0 && !c.stopped {
			c.cond.Wait()
		}
		if c.stopped {
			c.mu.Unlock()
			return
		}
		id := c.queue[0]
		c.queue = c.queue[1:]
		delete(c.queued, id)
		c.running[id] = true
		c.mu.Unlock()

		c.process(ctx, id)

		c.mu.Lock()
		delete(c.running, id)
		again := c.dirty[id]
		delete(c.dirty, id)
		c.mu.Unlock()
		if again && ctx.Err() == nil {
			c.Kick(id)
		}
	}
}

// maxHops bounds state changes per processing round, so a bug in a phase can
// never spin a worker forever.
const maxHops = 64

// process advances one node as far as it can go without waiting.
func (c *runtime) process(ctx context.Context, nodeUUID string) {
	for hop := 0; hop < maxHops; hop++ {
		if ctx.Err() != nil {
			return
		}
		n, err := c.st.GetNode(ctx, nodeUUID)
		if err != nil {
			if !errors.Is(err, store.ErrNotFound) {
				c.log.Error("loading node failed", "node", nodeUUID, "err", err)
			}
			return
		}
		if !needsWork(n) {
			c.clearStaleReservation(ctx, n)
			c.release(ctx, nodeUUID)
			return // resting: nothing to do
		}
		d, ok := c.drivers[n.Driver]
		if !ok {
			c.log.Error("node uses a hardware type this controller does not enable", "node", nodeUUID, "driver", n.Driver)
			return
		}
		if !c.lease(ctx, n) {
			return // another controller works on it
		}
		again, err := c.advance(c.fenced(ctx), n, d)
		if errors.Is(err, errStale) {
			c.log.Debug("node moved on while processing", "node", nodeUUID, "err", err)
			return
		}
		if isLeaseLost(err) {
			c.leases.drop(nodeUUID)
			c.log.Warn("node lease lost while working; another controller carries on", "node", nodeUUID, "err", err)
			return
		}
		if err != nil {
			c.log.Error("processing node failed", "node", nodeUUID, "state", n.ProvisionState, "err", err)
			return
		}
		if !again {
			return
		}
	}
	c.log.Error("node processing stopped after too many state changes", "node", nodeUUID)
}
