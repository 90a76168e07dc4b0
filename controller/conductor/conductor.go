// Package conductor runs the work behind the API: provision state changes,
// steps and power actions. Every change is committed to the store before it
// is reported; the work itself runs in a bounded pool of workers, never in an
// HTTP handler. Processing is driven by the persisted node state, so a node
// whose work was interrupted (controller restart) resumes where it stood.
//
// A Conductor is four parts over one store:
//   - the runtime (runtime.go, leases.go, powersync.go): the work queue and
//     its workers, node leases among controllers, takeover of interrupted
//     work, fleet-wide power sync;
//   - the lifecycle engine (engine.go and its parts: machine.go, the state
//     machine's writes; provision.go, the requests; steps.go, async.go,
//     results.go, records.go, the step runner; agents.go, agentdeploy.go,
//     vmedia.go, diskguard.go, agentwait.go, the agent's boots, commands and
//     reports; timeouts.go, abort.go, the stops; clean.go, deploy.go,
//     deploysteps.go, inspect.go, the flows);
//   - the agent-session service (session.go): lookup, heartbeats, tokens and
//     the commands left for the agent;
//   - the allocator (allocations.go): allocations completed in the
//     background, as Ironic's conductor does; beside it the VIFs of a
//     node's ports (vifs.go).
//
// A node's working state is its store.Operation record.
package conductor

import (
	"context"
	"log/slog"
	"sort"
	"time"

	"github.com/google/uuid"

	"github.com/anvil-metal/anvil/controller/store"
)

// core is what the three parts share: configuration, store, hardware
// types, log and clock.
type core struct {
	cfg     Config
	st      store.Store
	drivers map[string]Driver
	log     *slog.Logger
}

// Conductor owns node operations: the public face of its four parts.
type Conductor struct {
	*runtime
	*requests   // Provision, SetPower
	*stepRunner // CompleteAsyncStep, CleanStepsFor
	*sessions
	*allocator
	*vifs
	*nodeCalls // the vmedia API and vendor passthru (vmediaapi.go, vendorpassthru.go)
	core       *core
	engine     *engine
}

// New builds a conductor over st with the given hardware types.
func New(st store.Store, cfg Config, drivers ...Driver) *Conductor {
	cfg.defaults()
	co := &core{cfg: cfg, st: st, drivers: map[string]Driver{}, log: cfg.Logger}
	for _, d := range drivers {
		co.drivers[d.Name()] = d
	}
	rt := newRuntime(co)
	eng, req := newEngine(co, rt.Kick, rt)
	rt.advance = eng.advance
	rt.checkTimers = func(ctx context.Context) {
		eng.stops.checkTimeouts(ctx)
		eng.firmware.kickUpdates(ctx)
	}
	al := newAllocator(co, rt.holder)
	rt.background = append(rt.background, al.run)
	calls := &nodeCalls{core: co, rt: rt}
	eng.steps.children = &childSteps{core: co, hold: calls.hold}
	return &Conductor{runtime: rt, requests: req, stepRunner: eng.steps, sessions: newSessionService(co, rt.Kick), allocator: al,
		vifs: &vifs{core: co}, nodeCalls: calls, core: co, engine: eng}
}

// Host is the name this conductor writes into reservations.
func (c *Conductor) Host() string { return c.core.cfg.Host }

// Driver returns a hardware type by name.
func (c *Conductor) Driver(name string) (Driver, bool) {
	d, ok := c.core.drivers[name]
	return d, ok
}

// DriverNames lists the enabled hardware types, sorted.
func (c *Conductor) DriverNames() []string {
	out := make([]string, 0, len(c.core.drivers))
	for n := range c.core.drivers {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

func (c *core) now() time.Time { return c.cfg.Now().UTC() }

// newEvent builds a history entry for the node.
func (c *core) newEvent(nodeUUID, severity, typ, msg string) *store.Event {
	return &store.Event{UUID: uuid.NewString(), NodeUUID: nodeUUID, CreatedAt: c.now(), Severity: severity,
		EventType: typ, Event: msg, Conductor: c.cfg.Host}
}

// event appends to the node's history on its own; failures are logged, never
// fatal. Events describing a node change go with the change instead.
func (c *core) event(ctx context.Context, nodeUUID, severity, typ, msg string) {
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
