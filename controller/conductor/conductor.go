// Package conductor runs the work behind the API: provision state changes,
// steps and power actions. Every change is committed to the store before it
// is reported; the work itself runs in a bounded pool of workers, never in an
// HTTP handler. Processing is driven by the persisted node state, so a node
// whose work was interrupted (controller restart) resumes where it stood.
package conductor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/anvil-metal/anvil/controller/state"
	"github.com/anvil-metal/anvil/controller/store"
)

// Config tunes the conductor. Zero values get defaults in New.
type Config struct {
	Host    string // holder name written into node reservations
	Workers int    // concurrent node operations
	// AutomatedClean is the fleet default; a node's automated_clean overrides it.
	AutomatedClean bool
	// PriorityOverrides maps "interface.step" to a clean priority (0 disables).
	PriorityOverrides map[string]int
	// Wait-state timeouts; 0 disables.
	CleanWaitTimeout   time.Duration
	DeployWaitTimeout  time.Duration
	InspectWaitTimeout time.Duration
	RescueWaitTimeout  time.Duration
	CheckInterval      time.Duration // how often wait-state timeouts are checked
	Agent              AgentConfig
	PowerSync          PowerSyncConfig
	// LeaseTTL is how long a node stays owned by this controller without a
	// renewal (renewed every LeaseTTL/4); a dead controller's nodes are
	// taken over by the others after it. Default 20 s.
	LeaseTTL time.Duration
	// SoleController says no other controller can use the store (SQLite):
	// leases left by a previous run are then cleared at start instead of
	// waited out.
	SoleController bool
	Logger         *slog.Logger
	Now            func() time.Time
}

// Conductor owns node operations.
type Conductor struct {
	cfg      Config
	st       store.Store
	drivers  map[string]Driver
	log      *slog.Logger
	holder   string         // this process in node leases
	leases   leaseTable     // what this process holds
	notifier store.Notifier // nil for a store with a single controller

	mu      sync.Mutex
	cond    *sync.Cond
	queue   []string
	queued  map[string]bool
	running map[string]bool
	dirty   map[string]bool
	stopped bool
	wg      sync.WaitGroup
}

// New builds a conductor over st with the given hardware types.
func New(st store.Store, cfg Config, drivers ...Driver) *Conductor {
	if cfg.Workers <= 0 {
		cfg.Workers = 16
	}
	if cfg.Host == "" {
		cfg.Host = "anvil"
	}
	if cfg.CheckInterval <= 0 {
		cfg.CheckInterval = 10 * time.Second
	}
	if cfg.LeaseTTL <= 0 {
		cfg.LeaseTTL = 20 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	cfg.Agent.defaults()
	c := &Conductor{cfg: cfg, st: st, drivers: map[string]Driver{}, log: cfg.Logger,
		queued: map[string]bool{}, running: map[string]bool{}, dirty: map[string]bool{},
		holder: newHolder(cfg.Host), leases: leaseTable{held: map[string]time.Time{}}}
	c.notifier, _ = st.(store.Notifier)
	c.cond = sync.NewCond(&c.mu)
	for _, d := range drivers {
		c.drivers[d.Name()] = d
	}
	return c
}

// Host is the name this conductor writes into reservations.
func (c *Conductor) Host() string { return c.cfg.Host }

// Driver returns a hardware type by name.
func (c *Conductor) Driver(name string) (Driver, bool) {
	d, ok := c.drivers[name]
	return d, ok
}

// DriverNames lists the enabled hardware types, sorted.
func (c *Conductor) DriverNames() []string {
	out := make([]string, 0, len(c.drivers))
	for n := range c.drivers {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

func (c *Conductor) now() time.Time { return c.cfg.Now().UTC() }

// Run starts the workers, takes over interrupted work (its own after a
// restart, and that of dead controllers sharing the database) and checks
// wait-state timeouts until ctx ends; it returns once every worker has
// finished its current node and this controller's leases are released.
func (c *Conductor) Run(ctx context.Context) error {
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
	for _, loop := range []func(context.Context){c.runLeases, c.listen, c.runPowerSync} {
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
			c.checkTimeouts(ctx)
		}
	}
}

// Kick schedules processing of a node. A node is processed by one worker at
// a time; a kick during processing makes it run again afterwards.
func (c *Conductor) Kick(nodeUUID string) {
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
func (c *Conductor) Idle() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.queue) == 0 && len(c.running) == 0
}

func (c *Conductor) worker(ctx context.Context) {
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

// newEvent builds a history entry for the node.
func (c *Conductor) newEvent(nodeUUID, severity, typ, msg string) *store.Event {
	return &store.Event{UUID: uuid.NewString(), NodeUUID: nodeUUID, CreatedAt: c.now(), Severity: severity,
		EventType: typ, Event: msg, Conductor: c.cfg.Host}
}

// event appends to the node's history on its own; failures are logged, never
// fatal. Events describing a node change go with the change instead.
func (c *Conductor) event(ctx context.Context, nodeUUID, severity, typ, msg string) {
	if err := c.st.AppendEvent(ctx, c.newEvent(nodeUUID, severity, typ, msg)); err != nil {
		c.log.Warn("recording node event failed", "node", nodeUUID, "err", err)
	}
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func strp(s string) *string { return &s }

// errStale means the node moved on (abort, another request) while we worked.
var errStale = errors.New("node state changed concurrently")

// transition moves the node from `from` by event ev, applying mut in the same
// write, together with the transition's history entry and any extra events.
// Targets follow Ironic: entering a non-stable state shows its default
// target, except that wait/resume/fail/abort keep the operation's target
// (manual cleaning targets manageable); a stable state clears it.
func (c *Conductor) transition(ctx context.Context, nodeUUID string, from state.State, ev state.Event, mut func(n *store.Node) error, extra ...*store.Event) (*store.Node, error) {
	var to state.State
	n, err := store.MutateNodeEvents(ctx, c.st, nodeUUID, func(n *store.Node) ([]*store.Event, error) {
		if state.State(n.ProvisionState) != from {
			return nil, fmt.Errorf("%w: expected %q, found %q", errStale, from, n.ProvisionState)
		}
		next, err := state.Next(from, ev)
		if err != nil {
			return nil, err
		}
		to = next
		c.applyState(n, next, ev)
		if mut != nil {
			if err := mut(n); err != nil {
				return nil, err
			}
		}
		return append(extra, c.newEvent(nodeUUID, "INFO", "provisioning", fmt.Sprintf("%s -> %s (%s)", from, to, ev))), nil
	})
	if err != nil {
		return nil, err
	}
	c.log.Info("provision state changed", "node", nodeUUID, "from", from, "event", ev, "to", to)
	if n.TargetPowerState != nil {
		c.Kick(nodeUUID) // e.g. the power-off of a torn-down agent operation
	}
	return n, nil
}

func (c *Conductor) applyState(n *store.Node, next state.State, ev state.Event) {
	now := c.now()
	n.ProvisionState = string(next)
	n.ProvisionUpdatedAt = &now
	switch {
	case state.Stable(next):
		n.TargetProvisionState = nil
	case n.TargetProvisionState != nil && (ev == state.EvWait || ev == state.EvResume || ev == state.EvFail || ev == state.EvAbort):
		// same operation continues or fails: keep its target
	default:
		n.TargetProvisionState = strp(string(state.DefaultTarget(next)))
	}
	if state.Working(next) {
		n.Reservation = strp(c.cfg.Host)
	} else if n.TargetPowerState == nil {
		n.Reservation = nil
	}
}
