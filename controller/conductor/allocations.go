package conductor

// The allocator: allocations (Ironic's) completed in the background by a
// few workers, taken over from controllers that are gone, backfilled for
// deployed nodes and removed with their node's instance.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/anvil-metal/anvil/controller/state"
	"github.com/anvil-metal/anvil/controller/store"
	"github.com/anvil-metal/anvil/internal/pause"
)

// Allocation states, as Ironic names them.
const (
	AllocAllocating = "allocating"
	AllocActive     = "active"
	AllocError      = "error"
)

// allocator completes allocations in the background, as Ironic's
// conductor/allocations.py does: the API records an allocation in state
// allocating with this controller as its affinity and hands it here; a
// worker picks a matching node at random and reserves it. Every write is a
// compare-and-swap (the node's revision, the allocation's revision and
// affinity), so two allocations never get one node and an allocation
// taken over by another controller is finished by that one only.
type allocator struct {
	*core
	holder string
	queue  chan string
	// retries and retryWait are Ironic's node_locked_retry_attempts and
	// node_locked_retry_interval: rounds over the nodes that were busy.
	retries   int
	retryWait time.Duration

	mu       sync.Mutex
	inFlight map[string]bool // queued or being processed here
}

// allocationScan is how often allocations left in allocating by a
// controller that is gone are looked for (Ironic's
// check_allocations_interval).
const allocationScan = time.Minute

// allocationWorkers bounds the allocations processed at once.
const allocationWorkers = 4

func newAllocator(co *core, holder string) *allocator {
	return &allocator{core: co, holder: holder, queue: make(chan string, 1024), retries: 3, retryWait: time.Second,
		inFlight: map[string]bool{}}
}

// AllocationFailed is Ironic's AllocationFailed: the allocation could not
// be satisfied; its message is what the allocation's last_error says.
type AllocationFailed struct {
	UUID, Reason string
}

func (e *AllocationFailed) Error() string {
	return fmt.Sprintf("Failed to process allocation %s: %s.", e.UUID, e.Reason)
}

// errAllocationLost: the allocation is no longer this controller's to
// finish (deleted, taken over, or finished).
var errAllocationLost = errors.New("allocation no longer processed here")

// Allocate schedules processing of an allocation this controller created
// (affinity: Holder) in state allocating.
func (a *allocator) Allocate(uuid string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.inFlight[uuid] {
		return
	}
	select {
	case a.queue <- uuid:
		a.inFlight[uuid] = true
	default:
		// Full: the next scan finds it (it is ours and not in flight).
		a.log.Warn("allocation queue full; the allocation waits for the next scan", "allocation", uuid)
	}
}

// run processes allocations until ctx ends, and takes over those of
// controllers that are gone: at start (a restart leaves its own previous
// incarnation's), and periodically when others share the store.
func (a *allocator) run(ctx context.Context) {
	var wg sync.WaitGroup
	for range allocationWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-ctx.Done():
					return
				case id := <-a.queue:
					a.processAllocation(ctx, id)
					a.mu.Lock()
					delete(a.inFlight, id)
					a.mu.Unlock()
				}
			}
		}()
	}
	t := time.NewTicker(allocationScan)
	defer t.Stop()
	for first := true; ; first = false {
		if first || !a.cfg.SoleController {
			a.ScanAllocations(ctx)
		}
		select {
		case <-ctx.Done():
			wg.Wait()
			return
		case <-t.C:
		}
	}
}

// ScanAllocations queues this controller's allocations waiting in state
// allocating and takes over those whose controller is no longer alive.
func (a *allocator) ScanAllocations(ctx context.Context) {
	live := map[string]bool{a.holder: true}
	if !a.cfg.SoleController {
		ls, err := a.st.LiveControllers(ctx)
		if err != nil {
			a.log.Error("listing live controllers failed", "err", err)
			return
		}
		for _, l := range ls {
			live[l] = true
		}
	}
	err := store.EachPage(ctx, 500, func(p store.Page) ([]*store.Allocation, error) {
		return a.st.ListAllocations(ctx, store.ResourceFilter{}, p)
	}, func(al *store.Allocation) string { return al.UUID }, func(al *store.Allocation) error {
		switch {
		case al.State != AllocAllocating:
		case al.ConductorAffinity == a.holder:
			a.Allocate(al.UUID)
		case !live[al.ConductorAffinity]:
			a.takeOver(ctx, al.UUID, al.ConductorAffinity)
		}
		return nil
	})
	if err != nil && ctx.Err() == nil {
		a.log.Error("listing allocations failed", "err", err)
	}
}

func (a *allocator) takeOver(ctx context.Context, uuid, from string) {
	_, err := store.MutateAllocation(ctx, a.st, uuid, func(al *store.Allocation) error {
		if al.State != AllocAllocating || al.ConductorAffinity != from {
			return errAllocationLost
		}
		al.ConductorAffinity = a.holder
		return nil
	})
	if err != nil {
		if !errors.Is(err, errAllocationLost) && !errors.Is(err, store.ErrNotFound) {
			a.log.Error("taking over an allocation failed", "allocation", uuid, "err", err)
		}
		return
	}
	a.log.Info("taking over an allocation left by a controller that is gone", "allocation", uuid, "previous", from)
	a.Allocate(uuid)
}

// processAllocation is Ironic's do_allocate: it never fails, it records why.
func (a *allocator) processAllocation(ctx context.Context, uuid string) {
	al, err := a.st.GetAllocation(ctx, uuid)
	if err != nil {
		if !errors.Is(err, store.ErrNotFound) {
			a.log.Error("reading an allocation failed", "allocation", uuid, "err", err)
		}
		return
	}
	if al.State != AllocAllocating || al.ConductorAffinity != a.holder {
		return
	}
	// The nodes that have the allocation's UUID as instance, read once:
	// resume finishes with the one reserved for it, reserve refuses when
	// another holds it.
	holders, err := a.instanceHolders(ctx, al.UUID)
	if err == nil {
		var done bool
		if done, err = a.resume(ctx, al, holders); done && err == nil {
			return
		}
	}
	if err != nil {
		if !errors.Is(err, errAllocationLost) && ctx.Err() == nil {
			a.log.Error("finishing an interrupted allocation failed", "allocation", uuid, "err", err)
		}
		return
	}
	nodes, err := a.candidates(ctx, al)
	if err == nil {
		err = a.reserve(ctx, al, holders, nodes)
	}
	if err == nil || errors.Is(err, errAllocationLost) || ctx.Err() != nil {
		return
	}
	a.fail(ctx, al.UUID, err)
}

// resume finishes an allocation whose node was reserved by a controller
// that stopped before it recorded the node on the allocation; holders are
// the nodes whose instance is the allocation's.
func (a *allocator) resume(ctx context.Context, al *store.Allocation, holders []*store.Node) (bool, error) {
	for _, n := range holders {
		if n.AllocationUUID == nil || *n.AllocationUUID != al.UUID {
			continue
		}
		_, err := a.mutateOwned(ctx, al.UUID, func(cur *store.Allocation) {
			cur.NodeUUID, cur.State, cur.LastError = &n.UUID, AllocActive, nil
		})
		return true, err
	}
	return false, nil
}

// fail records why an allocation failed (Ironic's _allocation_failed).
func (a *allocator) fail(ctx context.Context, uuid string, cause error) {
	var af *AllocationFailed
	msg := cause.Error()
	if errors.As(cause, &af) {
		a.log.Error(msg)
	} else {
		a.log.Error("unexpected error while processing an allocation", "allocation", uuid, "err", cause)
		msg = "Unexpected exception during allocation: " + msg
	}
	_, err := a.mutateOwned(ctx, uuid, func(al *store.Allocation) {
		al.NodeUUID, al.State, al.LastError = nil, AllocError, &msg
	})
	if err != nil && !errors.Is(err, errAllocationLost) && !errors.Is(err, store.ErrNotFound) {
		a.log.Error("could not save the failed allocation", "allocation", uuid, "err", err)
	}
}

// mutateOwned changes an allocation only while it is still allocating
// under this controller (errAllocationLost once another controller took
// it over or it finished).
func (a *allocator) mutateOwned(ctx context.Context, uuid string, fn func(*store.Allocation)) (*store.Allocation, error) {
	return store.MutateAllocation(ctx, a.st, uuid, func(cur *store.Allocation) error {
		if cur.State != AllocAllocating || cur.ConductorAffinity != a.holder {
			return errAllocationLost
		}
		fn(cur)
		return nil
	})
}

func hasAllTraits(n *store.Node, want []string) bool {
	for _, t := range want {
		if !slices.Contains(n.Traits, t) {
			return false
		}
	}
	return true
}

// candidates is Ironic's _candidate_nodes: available nodes of the
// resource class, powered (a known power state), not in maintenance,
// without instance, among the candidates and of the owner if asked, with
// every requested trait; shuffled, a node named like the allocation first.
func (a *allocator) candidates(ctx context.Context, al *store.Allocation) ([]*store.Node, error) {
	avail, no := string(state.Available), false
	want := map[string]bool{}
	for _, c := range al.CandidateNodes {
		want[c] = true
	}
	var nodes []*store.Node
	filter := store.NodeFilter{ProvisionState: &avail, Maintenance: &no, Associated: &no, ResourceClass: &al.ResourceClass}
	err := store.EachPage(ctx, 1000, func(p store.Page) ([]*store.Node, error) { return a.st.ListNodes(ctx, filter, p) },
		func(n *store.Node) string { return n.UUID }, func(n *store.Node) error {
			if n.PowerState == nil || (len(want) > 0 && !want[n.UUID]) {
				return nil
			}
			if al.Owner != nil && deref(n.Owner) != *al.Owner && deref(n.Lessee) != *al.Owner {
				return nil
			}
			nodes = append(nodes, n)
			return nil
		})
	if err != nil {
		return nil, err
	}
	if len(nodes) == 0 {
		reason := "no available nodes match the resource class " + al.ResourceClass
		if len(al.CandidateNodes) > 0 {
			reason = "none of the requested nodes are available and match the resource class " + al.ResourceClass
		}
		return nil, &AllocationFailed{UUID: al.UUID, Reason: reason}
	}
	if len(al.Traits) > 0 {
		nodes = slices.DeleteFunc(nodes, func(n *store.Node) bool { return !hasAllTraits(n, al.Traits) })
		if len(nodes) == 0 {
			return nil, &AllocationFailed{UUID: al.UUID, Reason: "no suitable nodes have the requested traits " +
				strings.Join(uniq(al.Traits), ", ")}
		}
	}
	// Parallel allocations must not try the nodes in the same order.
	rand.Shuffle(len(nodes), func(i, j int) { nodes[i], nodes[j] = nodes[j], nodes[i] })
	if al.Name != nil {
		if i := slices.IndexFunc(nodes, func(n *store.Node) bool { return deref(n.Name) == *al.Name }); i > 0 {
			n := nodes[i]
			nodes = slices.Insert(slices.Delete(nodes, i, i+1), 0, n)
		}
	}
	return nodes, nil
}

func uniq(s []string) []string {
	var out []string
	for _, v := range s {
		if !slices.Contains(out, v) {
			out = append(out, v)
		}
	}
	return out
}

var (
	errUnsuitable = errors.New("node no longer suitable")
	errNodeBusy   = errors.New("node busy")
)

// suitable is Ironic's _verify_node: the node still satisfies the request.
func suitable(n *store.Node, al *store.Allocation) bool {
	return !n.Maintenance && n.InstanceUUID == nil && n.ProvisionState == string(state.Available) &&
		deref(n.ResourceClass) == al.ResourceClass && hasAllTraits(n, al.Traits)
}

// reserve is Ironic's _allocate_node: try every node; nodes that were busy
// (work running on them) are tried again, up to retries rounds.
func (a *allocator) reserve(ctx context.Context, al *store.Allocation, holders, nodes []*store.Node) error {
	if err := instanceFree(al.UUID, "", holders); err != nil {
		return err
	}
	for round := 1; ; round++ {
		var busy []*store.Node
		for _, n := range nodes {
			err := a.claim(ctx, al, n.UUID, func(m *store.Node) error {
				switch {
				case !suitable(m, al) || m.AllocationUUID != nil:
					return errUnsuitable
				case m.Reservation != nil:
					return errNodeBusy
				}
				return nil
			})
			switch {
			case err == nil:
				a.log.Info("node reserved for allocation", "node", n.UUID, "allocation", al.UUID)
				return nil
			case errors.Is(err, errNodeBusy):
				busy = append(busy, n)
			case errors.Is(err, errUnsuitable), errors.Is(err, store.ErrNotFound):
			default:
				return err
			}
		}
		nodes = busy
		if len(nodes) == 0 {
			return &AllocationFailed{UUID: al.UUID, Reason: "all nodes were filtered out during reservation"}
		}
		if round >= a.retries {
			return &AllocationFailed{UUID: al.UUID, Reason: fmt.Sprintf("could not reserve any of %d suitable nodes", len(nodes))}
		}
		if !pause.For(ctx, a.retryWait) {
			return ctx.Err()
		}
	}
}

// instanceHolders lists (at most two of) the nodes whose instance_uuid is
// uuid.
func (a *allocator) instanceHolders(ctx context.Context, uuid string) ([]*store.Node, error) {
	return a.st.ListNodes(ctx, store.NodeFilter{InstanceUUID: &uuid}, store.Page{Limit: 2})
}

// instanceFree is Ironic's InstanceAssociated: the allocation's UUID
// becomes the node's instance_uuid, which no node but node (of holders,
// the nodes that have it) may have.
func instanceFree(uuid, node string, holders []*store.Node) error {
	for _, o := range holders {
		if o.UUID != node {
			return Conflict("Instance %s is already associated with a node, it cannot be associated with this other node %s", uuid, node)
		}
	}
	return nil
}

// claim reserves the node for the allocation if check passes on the node
// as stored, then makes the allocation active on it. The node write is
// conditional on the node's revision, the allocation's on its revision
// and on still being this controller's; if the allocation's write fails,
// the node is given back.
func (a *allocator) claim(ctx context.Context, al *store.Allocation, nodeUUID string, check func(*store.Node) error) error {
	// A few short writes that belong together: a shutdown waits for them.
	ctx = context.WithoutCancel(ctx)
	_, err := store.MutateNode(ctx, a.st, nodeUUID, func(n *store.Node) error {
		if err := check(n); err != nil {
			return err
		}
		n.AllocationUUID, n.InstanceUUID = &al.UUID, &al.UUID
		// Ironic records the allocation's traits as the instance's.
		info := make(map[string]any, len(n.InstanceInfo)+1)
		for k, v := range n.InstanceInfo {
			info[k] = v
		}
		traits := make([]any, 0, len(al.Traits))
		for _, t := range al.Traits {
			traits = append(traits, t)
		}
		info["traits"] = traits
		n.InstanceInfo = info
		return nil
	})
	if err != nil {
		return err
	}
	done, err := a.mutateOwned(ctx, al.UUID, func(cur *store.Allocation) {
		cur.NodeUUID, cur.State, cur.LastError = &nodeUUID, AllocActive, nil
	})
	if err == nil {
		*al = *done
		return nil
	}
	if _, rerr := store.MutateNode(ctx, a.st, nodeUUID, func(n *store.Node) error {
		if n.AllocationUUID == nil || *n.AllocationUUID != al.UUID {
			return errAllocationLost
		}
		freeNode(n)
		n.InstanceInfo = withoutKey(n.InstanceInfo, "traits")
		return nil
	}); rerr != nil && !errors.Is(rerr, errAllocationLost) {
		a.log.Error("giving back a node reserved for a lost allocation failed", "node", nodeUUID, "allocation", al.UUID, "err", rerr)
	}
	if errors.Is(err, store.ErrNotFound) {
		return errAllocationLost // deleted meanwhile
	}
	return err
}

// freeNode forgets the node's allocation and instance, as Ironic's
// destroy_allocation does.
func freeNode(n *store.Node) { n.AllocationUUID, n.InstanceUUID = nil, nil }

// withoutKey is m without k, m itself untouched (it may be shared).
func withoutKey(m map[string]any, k string) map[string]any {
	out := make(map[string]any, len(m))
	for kk, v := range m {
		if kk != k {
			out[kk] = v
		}
	}
	return out
}

// pyList spells a list of strings as Python's repr does, which Ironic's
// messages carry.
func pyList(s []string) string {
	q := make([]string, len(s))
	for i, v := range s {
		q[i] = "'" + v + "'"
	}
	return "[" + strings.Join(q, ", ") + "]"
}

// Backfill makes a new allocation (state allocating, this controller's)
// the record of an already deployed node, synchronously, as Ironic's
// backfill_allocation: the node must be active and match the request.
// On failure the allocation is left in state error and the error returned.
func (a *allocator) Backfill(ctx context.Context, al *store.Allocation, nodeUUID string) error {
	holders, err := a.instanceHolders(ctx, al.UUID)
	if err == nil {
		err = instanceFree(al.UUID, nodeUUID, holders)
	}
	if err == nil {
		err = a.claim(ctx, al, nodeUUID, func(n *store.Node) error {
			if n.Reservation != nil {
				return Locked(n.UUID, *n.Reservation)
			}
			var errs []string
			if n.ProvisionState != string(state.Active) {
				errs = append(errs, fmt.Sprintf(`Node must be in the "active" state, but the current state is "%s"`, n.ProvisionState))
			}
			if al.ResourceClass != "" && deref(n.ResourceClass) != al.ResourceClass {
				errs = append(errs, fmt.Sprintf("Resource class %s does not match the requested resource class %s",
					pyNone(n.ResourceClass), al.ResourceClass))
			}
			if len(al.Traits) > 0 && !hasAllTraits(n, al.Traits) {
				errs = append(errs, fmt.Sprintf("List of traits %s does not match the requested traits %s", pyList(n.Traits), pyList(al.Traits)))
			}
			if len(al.CandidateNodes) > 0 && !slices.Contains(al.CandidateNodes, n.UUID) {
				errs = append(errs, "Candidate nodes must be empty or contain the target node, but got "+pyList(al.CandidateNodes))
			}
			if len(errs) > 0 {
				return &AllocationFailed{UUID: al.UUID, Reason: fmt.Sprintf("Cannot backfill an allocation for node %s: %s",
					n.UUID, strings.Join(errs, "; "))}
			}
			if (n.InstanceUUID != nil && *n.InstanceUUID != al.UUID) || (n.AllocationUUID != nil && *n.AllocationUUID != al.UUID) {
				return Conflict("Node %s is associated with instance %s.", n.UUID, deref(n.InstanceUUID))
			}
			return nil
		})
	}
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			err = NotFound("Node %s could not be found.", nodeUUID)
		}
		// Ironic records the refusal as the allocation's last_error and
		// answers it as it is.
		a.fail(ctx, al.UUID, err)
	}
	return err
}

func pyNone(s *string) string {
	if s == nil {
		return "None"
	}
	return *s
}

// Deallocate removes an allocation, freeing its node, unless the node is
// deployed or busy (Ironic's verify_node_for_deallocation; a node in
// maintenance is always freed).
func (a *allocator) Deallocate(ctx context.Context, al *store.Allocation) error {
	if al.NodeUUID != nil {
		_, err := store.MutateNode(ctx, a.st, *al.NodeUUID, func(n *store.Node) error {
			if !n.Maintenance {
				if n.TargetProvisionState != nil && !slices.Contains(updateAllowed, state.State(n.ProvisionState)) {
					return Conflict("Cannot remove allocation %s for node %s, because the node is in state %s where updates are "+
						"not allowed (and maintenance mode is off)", al.UUID, n.UUID, n.ProvisionState)
				}
				if n.ProvisionState == string(state.Active) {
					return Conflict("Cannot remove allocation %s for node %s, because the node is active (and maintenance mode is off)",
						al.UUID, n.UUID)
				}
			}
			if n.AllocationUUID != nil && *n.AllocationUUID == al.UUID {
				freeNode(n)
			}
			return nil
		})
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return err
		}
	}
	return a.st.DeleteAllocation(ctx, al.UUID)
}

// updateAllowed is Ironic's UPDATE_ALLOWED_STATES: transitional states in
// which a node may be updated.
var updateAllowed = []state.State{state.DeployFailed, state.Inspecting, state.InspectFailed, state.InspectWait,
	state.CleanFailed, state.Error, state.Verifying, state.AdoptFailed, state.RescueFailed, state.UnrescueFailed}
