package conductor

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/anvil-metal/anvil/controller/state"
	"github.com/anvil-metal/anvil/controller/store"
)

// Several controllers may share one database. Each node's work is done by
// the controller holding the node's lease (store.Leases): the lease is
// taken when a node needs work, renewed every LeaseTTL/4 while it is held,
// and released when the node comes to rest. A controller that dies stops
// renewing; one lease period later its nodes show up in the unleased-work
// scan of the survivors, which take them over and resume each at its
// persisted step (the restart-safety logic). Writes made while working are
// fenced by the lease (store.WithLease), and a controller stops starting
// new work on a node whose lease it could not renew for half a period.

// leaseTable is what this controller believes it holds, and until when by
// its own clock (conservatively: from before the renewal was sent).
type leaseTable struct {
	mu   sync.Mutex
	held map[string]time.Time
}

func (t *leaseTable) valid(node string, now time.Time, margin time.Duration) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	until, ok := t.held[node]
	return ok && until.Sub(now) > margin
}

func (t *leaseTable) has(node string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	_, ok := t.held[node]
	return ok
}

func (t *leaseTable) set(node string, until time.Time) {
	t.mu.Lock()
	t.held[node] = until
	t.mu.Unlock()
}

// drop forgets the node and reports whether it was held.
func (t *leaseTable) drop(node string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	_, ok := t.held[node]
	delete(t.held, node)
	return ok
}

// renewed records the nodes a renewal confirmed until until, and returns
// the ones lost: held before the renewal was sent (expiring by until at
// the latest) yet not confirmed. A node acquired while the renewal was in
// flight expires after until and was not lost.
func (t *leaseTable) renewed(nodes []string, until time.Time) (lost []string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	still := make(map[string]bool, len(nodes))
	for _, n := range nodes {
		still[n] = true
	}
	for n, exp := range t.held {
		if !still[n] && !exp.After(until) {
			lost = append(lost, n)
			delete(t.held, n)
		}
	}
	for _, n := range nodes {
		if _, ok := t.held[n]; ok { // not released while the renewal ran
			t.held[n] = until
		}
	}
	return lost
}

func (t *leaseTable) nodes() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]string, 0, len(t.held))
	for n := range t.held {
		out = append(out, n)
	}
	return out
}

// newHolder names this controller process in leases: the configured host
// (shown as the node's reservation) and a random instance, so a restarted
// controller or two controllers mistakenly given one name never share
// leases.
func newHolder(host string) string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return host + "/" + hex.EncodeToString(b)
}

// A controller that is alone on its store (SQLite: one process owns the
// file) keeps its leases in memory only: nobody else could take a node,
// so lease rows, renewals and fenced writes would only cost writes. Its
// restart recovery is the takeover scan once at start.

// fenced marks ctx for writes under this controller's lease.
func (c *runtime) fenced(ctx context.Context) context.Context {
	if c.cfg.SoleController {
		return ctx
	}
	return store.WithLease(ctx, c.holder)
}

// Holder is this controller's name in node leases.
func (c *runtime) Holder() string { return c.holder }

// leaseMargin is how much lease time must be left to start work.
func (c *runtime) leaseMargin() time.Duration { return c.cfg.LeaseTTL / 2 }

// leaseWaitStates are the waiting states whose nodes are owned (an agent
// heartbeats, a timer runs) although no reservation is set: the ones
// process advances. RescueWait is not among them: nothing advances it, its
// timeout takes the lease when it fires.
var leaseWaitStates = []string{string(state.CleanWait), string(state.DeployWait), string(state.InspectWait), string(state.ServiceWait)}

// needsWork reports whether processing the node would do anything: a
// power action, a working state, or a waiting state process advances. A
// node that needs no work must not be taken over (a takeover of it would
// be released at once and found unleased again at the next scan).
func needsWork(n *store.Node) bool {
	return n.TargetPowerState != nil || state.Working(state.State(n.ProvisionState)) ||
		slices.Contains(leaseWaitStates, n.ProvisionState) || alarmPending(n)
}

// lease makes sure this controller holds the node's lease before working on
// it. When another controller holds it, that one is asked to process the
// node instead (the request arrived here, the work lands there). Taking
// over a dead controller's expired lease is recorded in the node's history.
func (c *runtime) lease(ctx context.Context, n *store.Node) bool {
	ok, _ := c.acquire(ctx, n)
	return ok
}

// acquire is lease, also saying whether the lease was newly taken (not
// already held here) from nobody (fresh) or from a holder whose lease
// expired (tookOver).
func (c *runtime) acquire(ctx context.Context, n *store.Node) (ok, fresh bool) {
	now := c.cfg.Now()
	if c.leases.valid(n.UUID, now, c.leaseMargin()) {
		return true, false
	}
	renewing := c.leases.has(n.UUID)
	if c.cfg.SoleController {
		c.leases.set(n.UUID, now.Add(100*365*24*time.Hour))
		return true, !renewing
	}
	ok, other, err := c.st.AcquireLease(ctx, n.UUID, c.holder, c.cfg.LeaseTTL)
	if err != nil {
		c.log.Error("acquiring node lease failed", "node", n.UUID, "err", err)
		return false, false
	}
	if ok {
		c.leases.set(n.UUID, now.Add(c.cfg.LeaseTTL))
		if other != "" {
			c.log.Warn("took over a node whose controller stopped renewing its lease", "node", n.UUID, "previous", other, "state", n.ProvisionState)
			c.event(ctx, n.UUID, "WARNING", "provisioning", fmt.Sprintf(
				"Controller %s took over the operation in state %q: the lease of %s expired", c.cfg.Host, n.ProvisionState, other))
			return true, false
		}
		return true, !renewing
	}
	c.leases.drop(n.UUID)
	if other == "" {
		return false, false // released meanwhile: the next kick or scan takes it
	}
	c.log.Debug("node is leased by another controller; handing it over", "node", n.UUID, "holder", other)
	if c.notifier != nil {
		if err := c.notifier.NotifyNode(ctx, n.UUID, other); err != nil {
			c.log.Warn("notifying the lease holder failed", "node", n.UUID, "holder", other, "err", err)
		}
	}
	return false, false
}

// release gives up the node's lease once it rests.
func (c *runtime) release(ctx context.Context, nodeUUID string) {
	if !c.leases.drop(nodeUUID) || c.cfg.SoleController {
		return
	}
	if err := c.st.ReleaseLease(ctx, nodeUUID, c.holder); err != nil {
		c.log.Warn("releasing node lease failed; it expires by itself", "node", nodeUUID, "err", err)
	}
}

// runLeases renews this controller's leases and takes over unleased work
// every LeaseTTL/4, until ctx ends; then it releases every lease so others
// (or this controller restarted) can carry on at once.
func (c *runtime) runLeases(ctx context.Context) {
	tick := c.cfg.LeaseTTL / 4
	t := time.NewTicker(tick)
	defer t.Stop()
	for first := true; ; first = false {
		if !c.cfg.SoleController {
			c.renewLeases(ctx)
		}
		if first || !c.cfg.SoleController {
			c.takeOver(ctx)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (c *runtime) renewLeases(ctx context.Context) {
	start := c.cfg.Now()
	if err := c.st.RecordController(ctx, c.self(), c.cfg.LeaseTTL); err != nil && ctx.Err() == nil {
		c.log.Error("registering as a live controller failed", "err", err)
	}
	nodes, err := c.st.RenewLeases(ctx, c.holder, c.cfg.LeaseTTL)
	if err != nil {
		if ctx.Err() == nil {
			c.log.Error("renewing node leases failed", "err", err)
		}
		return
	}
	for _, n := range c.leases.renewed(nodes, start.Add(c.cfg.LeaseTTL)) {
		c.log.Warn("node lease lost: another controller may have taken the node over", "node", n)
	}
}

// takeOver adopts nodes that need a controller but have none: after a
// restart, those this controller was working on; after another
// controller's death, its nodes.
func (c *runtime) takeOver(ctx context.Context) {
	nodes, err := c.st.UnleasedWork(ctx, leaseWaitStates, 500)
	if err != nil {
		if ctx.Err() == nil {
			c.log.Error("listing unleased work failed", "err", err)
		}
		return
	}
	for _, id := range nodes {
		n, err := c.st.GetNode(ctx, id)
		if err != nil {
			continue
		}
		if !needsWork(n) {
			// only a reservation brought it here: an API action that
			// never gave it back (the controller died during it)
			c.clearStaleReservation(ctx, n)
			c.release(ctx, id)
			continue
		}
		ok, fresh := c.acquire(ctx, n)
		if !ok {
			continue
		}
		if fresh {
			// Work without any lease: left by this controller's previous
			// run (its leases cleared at start) or by a controller that
			// stopped cleanly mid-operation.
			c.log.Info("resuming interrupted operation", "node", id, "state", n.ProvisionState, "holder", deref(n.Reservation))
			c.event(ctx, id, "INFO", "provisioning", fmt.Sprintf(
				"Controller %s resumed the operation in state %q after a restart", c.cfg.Host, n.ProvisionState))
		}
		c.Kick(id)
	}
}

// listen kicks the nodes other controllers hand to this one, reconnecting
// with a pause after failures; after a reconnection every held node is
// kicked once, for the notifications missed meanwhile.
func (c *runtime) listen(ctx context.Context) {
	if c.notifier == nil {
		return
	}
	for ctx.Err() == nil {
		err := c.notifier.ListenNodes(ctx, c.holder, c.Kick)
		if ctx.Err() != nil {
			return
		}
		c.log.Warn("listening for node hand-overs failed; retrying", "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
		for _, n := range c.leases.nodes() {
			c.Kick(n)
		}
	}
}

// releaseAll ends this controller's leases at shutdown.
func (c *runtime) releaseAll() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.st.ReleaseLeases(ctx, c.holder); err != nil {
		c.log.Warn("releasing node leases at shutdown failed; they expire by themselves", "err", err)
	}
	if err := c.st.UnregisterController(ctx, c.holder); err != nil {
		c.log.Warn("unregistering at shutdown failed; the registration expires by itself", "err", err)
	}
}

// isLeaseLost reports work stopped because the lease went elsewhere.
func isLeaseLost(err error) bool { return errors.Is(err, store.ErrLeaseLost) }

// holdStarted and holdEnded count the API actions that hold a node
// reserved in this process (nodeCalls.hold), so that the reservation of
// one in progress is never taken for a stale one.
func (c *runtime) holdStarted(nodeUUID string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.holds[nodeUUID]++
}

func (c *runtime) holdEnded(nodeUUID string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.holds[nodeUUID]--; c.holds[nodeUUID] <= 0 {
		delete(c.holds, nodeUUID)
	}
}

func (c *runtime) holding(nodeUUID string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.holds[nodeUUID] > 0
}

// clearStaleReservation gives back the reservation of a node that needs
// no work and that no API action of this process holds: one left by an
// action (the vmedia API, vendor passthru, a step on a child node) whose
// controller died before giving it back. Such a node would otherwise
// refuse every request as locked, for ever. The lease decides: an action
// in progress on another controller holds the node's lease, so this one
// cannot take it.
func (c *runtime) clearStaleReservation(ctx context.Context, n *store.Node) {
	if n.Reservation == nil || c.holding(n.UUID) {
		return
	}
	if ok, _ := c.acquire(ctx, n); !ok {
		return
	}
	var was string
	_, err := store.MutateNodeEvents(ctx, c.st, n.UUID, func(m *store.Node) ([]*store.Event, error) {
		if m.Reservation == nil || needsWork(m) || c.holding(m.UUID) {
			return nil, nil
		}
		was, m.Reservation = *m.Reservation, nil
		return []*store.Event{c.newEvent(m.UUID, "WARNING", "provisioning",
			fmt.Sprintf("Controller %s cleared a reservation by %s that no operation or action held (an action interrupted by a restart)", c.cfg.Host, was))}, nil
	})
	if err != nil {
		c.log.Error("clearing a stale reservation failed", "node", n.UUID, "err", err)
		return
	}
	if was != "" {
		c.log.Warn("cleared a stale reservation", "node", n.UUID, "holder", was)
	}
}
