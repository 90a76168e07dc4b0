// Package timeline records each node's boot timeline: what the controller
// saw of a boot, stage by stage (the BMC's power and boot device, DHCP,
// TFTP and HTTP downloads, the agent's lookup and first heartbeat, steps),
// so that a node that never came up says where its boot stopped.
//
// The recorder is off the hot paths: Record only queues the stage (it
// never waits for the database; a full queue drops and counts), and one
// goroutine writes what was queued, a node's stages in one transaction.
// Only enrolled nodes are recorded (the callers map MACs and addresses to
// nodes first); what the store keeps is bounded per node
// (store.MaxBootsPerNode, store.MaxStagesPerBoot), repeats of any of the
// node's last few stages are folded, and each node has a rate per kind of
// stage, so neither a stranger on the provisioning LAN nor a node's
// firmware retrying fills it. What a stranger can cause at will (refused
// lookups and boot scripts, failed downloads: store.BootStage's
// Unauthenticated) has its own smaller rate here and its own share of a
// boot in the store, so a flood never evicts the boot's chain.
package timeline

import (
	"context"
	"errors"
	"log/slog"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/anvil-metal/anvil/controller/limits"
	"github.com/anvil-metal/anvil/controller/store"
)

// Store is where the recorder writes.
type Store interface {
	AddBootStages(ctx context.Context, batch []store.NodeBootStages) error
}

// Config configures a Recorder; zero fields take the defaults.
type Config struct {
	Store  Store
	Logger *slog.Logger
	Now    func() time.Time
	// Queue is how many stages may wait to be written, over all nodes
	// (default 4096); beyond it stages are dropped (Dropped counts them).
	Queue int
	// PerNode bounds the stages of each kind a node records (default 5 a
	// second, bursts of 40): a boot has a few dozen stages.
	PerNode limits.Rate
	// Unauthenticated bounds, per node, the stages anyone on the LAN can
	// cause (default one every 5 seconds, bursts of 12).
	Unauthenticated limits.Rate
}

// Recorder queues stages and writes them. A nil *Recorder records nothing.
type Recorder struct {
	st      Store
	log     *slog.Logger
	now     func() time.Time
	queue   chan entry
	rate    *limits.Keyed
	unauth  *limits.Keyed
	dropped atomic.Int64
	pending atomic.Int64

	mu    sync.Mutex
	last  map[string]*recent // node -> the stages recorded last
	addrs map[netip.Addr]addrNode
}

type entry struct {
	node  string
	stage store.BootStage
}

// recent are the last stages a node recorded, to fold their repeats
// (against the last one only, a stranger alternating two requests
// defeated the fold): a ring of foldDepth for the boot's chain and one
// for the unauthenticated stages, so a stranger's varied requests do not
// push the chain's out.
type recent [2]ring

type ring struct {
	keys [foldDepth]string
	at   [foldDepth]time.Time
	next int
}

type addrNode struct {
	node string
	at   time.Time
}

const (
	defaultQueue = 4096
	// foldWindow: the same stage again within it (a firmware's DHCP
	// retries, a BMC re-reading the ISO's ranges) is not recorded again.
	foldWindow = time.Minute
	// foldDepth: how many of a node's last stages a new one is folded
	// against.
	foldDepth = 8
	// maxNodes bounds the fold table and the address book: only enrolled
	// nodes' addresses get in, and the book is refilled by their next
	// DHCP exchange or boot script when cleared.
	maxNodes = 16384
	// addrTTL: an address learnt longer ago is not taken for its node.
	addrTTL = time.Hour
	// batch is how many queued stages one write takes at most, and
	// linger how long the writer waits for more after the first: stages
	// show a little later, and a rack booting at once costs one write.
	batch  = 512
	linger = 20 * time.Millisecond
)

// New returns a recorder over cfg.Store; Run writes what it records.
func New(cfg Config) *Recorder {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Queue <= 0 {
		cfg.Queue = defaultQueue
	}
	if cfg.PerNode.PerSecond <= 0 {
		cfg.PerNode = limits.Rate{PerSecond: 5, Burst: 40}
	}
	if cfg.Unauthenticated.PerSecond <= 0 {
		cfg.Unauthenticated = limits.Rate{PerSecond: 0.2, Burst: store.MaxUnauthenticatedPerBoot}
	}
	return &Recorder{st: cfg.Store, log: cfg.Logger, now: cfg.Now, queue: make(chan entry, cfg.Queue),
		rate: limits.NewKeyed(cfg.PerNode, 4*maxNodes, cfg.Now), unauth: limits.NewKeyed(cfg.Unauthenticated, maxNodes, cfg.Now),
		last: map[string]*recent{}, addrs: map[netip.Addr]addrNode{}}
}

// Record queues a stage of the node's current boot (store.StageBoot: a
// new boot). It never blocks.
func (r *Recorder) Record(nodeUUID, stage, detail, outcome string) {
	r.RecordStage(nodeUUID, store.BootStage{Stage: stage, Detail: detail, Outcome: outcome})
}

// RecordStage is Record with the whole stage (its time, when zero, is now).
func (r *Recorder) RecordStage(nodeUUID string, s store.BootStage) {
	if r == nil || nodeUUID == "" {
		return
	}
	if s.At.IsZero() {
		s.At = r.now()
	}
	// Each kind of stage has its own budget per node: a flood of one
	// (a stranger's lookups with the node's MAC) cannot starve the others.
	if r.repeat(nodeUUID, s) || !r.rate.Allow(nodeUUID+"\x00"+s.Stage) {
		return
	}
	if s.Unauthenticated() && !r.unauth.Allow(nodeUUID) {
		return
	}
	r.pending.Add(1)
	select {
	case r.queue <- entry{node: nodeUUID, stage: s}:
	default:
		r.pending.Add(-1)
		if r.dropped.Add(1)%1000 == 1 {
			r.log.Warn("boot timeline: the queue is full; stages are dropped (the database is slow?)", "dropped", r.dropped.Load())
		}
	}
}

// repeat reports whether s repeats one of the node's last foldDepth
// stages within foldWindow (and remembers s otherwise). A new boot is
// never a repeat, and clears what the last boot folded.
func (r *Recorder) repeat(node string, s store.BootStage) bool {
	key := foldKey(s)
	r.mu.Lock()
	defer r.mu.Unlock()
	l := r.last[node]
	if s.Stage == store.StageBoot {
		l = nil
	}
	kind := 0
	if s.Unauthenticated() {
		kind = 1
	}
	if l != nil {
		for i := range foldDepth {
			if l[kind].keys[i] == key && s.At.Sub(l[kind].at[i]) < foldWindow {
				return true
			}
		}
	}
	if l == nil {
		if _, ok := r.last[node]; !ok && len(r.last) >= maxNodes {
			clear(r.last)
		}
		l = &recent{}
		r.last[node] = l
	}
	g := &l[kind]
	g.keys[g.next], g.at[g.next] = key, s.At
	g.next = (g.next + 1) % foldDepth
	return false
}

// foldKey is what makes two stages the same: a download's bytes and
// duration (in parentheses after the file and client) do not, so a file
// fetched again and again within the window is one stage.
func foldKey(s store.BootStage) string {
	d := s.Detail
	switch s.Stage {
	case store.StageTFTP, store.StageHTTP, store.StageISO:
		if i := strings.Index(d, " ("); i >= 0 {
			d = d[:i]
		}
	}
	return s.Stage + "\x00" + d + "\x00" + s.Outcome
}

// Learn notes that addr is now the node's (DHCP gave it, or the node
// fetched its boot script from it), so the downloads that follow from
// addr, which name no node, go into its timeline.
func (r *Recorder) Learn(addr netip.Addr, nodeUUID string) {
	if r == nil || !addr.IsValid() || nodeUUID == "" {
		return
	}
	addr = addr.Unmap()
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.addrs[addr]; !ok && len(r.addrs) >= maxNodes {
		clear(r.addrs)
	}
	r.addrs[addr] = addrNode{node: nodeUUID, at: r.now()}
}

// NodeAt is the node Learn last saw at addr within the last hour ("": none).
func (r *Recorder) NodeAt(addr netip.Addr) string {
	if r == nil || !addr.IsValid() {
		return ""
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	a, ok := r.addrs[addr.Unmap()]
	if !ok || r.now().Sub(a.at) > addrTTL {
		return ""
	}
	return a.node
}

// Dropped is how many stages a full queue dropped.
func (r *Recorder) Dropped() int64 {
	if r == nil {
		return 0
	}
	return r.dropped.Load()
}

// Run writes queued stages until ctx ends.
func (r *Recorder) Run(ctx context.Context) {
	if r == nil {
		return
	}
	for {
		select {
		case <-ctx.Done():
			return
		case e := <-r.queue:
			r.write(ctx, r.gather(ctx, e))
		}
	}
}

// gather takes first and what else is queued within linger (up to
// batch), by node in the order they came: a rack booting at once is one
// write.
func (r *Recorder) gather(ctx context.Context, first entry) []store.NodeBootStages {
	out := []store.NodeBootStages{{NodeUUID: first.node, Stages: []store.BootStage{first.stage}}}
	at := map[string]int{first.node: 0}
	t := time.NewTimer(linger)
	defer t.Stop()
	for n := 1; n < batch; n++ {
		select {
		case e := <-r.queue:
			i, ok := at[e.node]
			if !ok {
				i = len(out)
				at[e.node] = i
				out = append(out, store.NodeBootStages{NodeUUID: e.node})
			}
			out[i].Stages = append(out[i].Stages, e.stage)
		case <-t.C:
			return out
		case <-ctx.Done():
			return out
		}
	}
	return out
}

// write stores a batch; when a node in it was deleted meanwhile (the
// whole batch is refused), the others are written one by one.
func (r *Recorder) write(ctx context.Context, b []store.NodeBootStages) {
	n := 0
	for _, nb := range b {
		n += len(nb.Stages)
	}
	defer r.pending.Add(-int64(n))
	err := r.st.AddBootStages(ctx, b)
	if errors.Is(err, store.ErrNotFound) && len(b) > 1 {
		for _, nb := range b {
			err := r.st.AddBootStages(ctx, []store.NodeBootStages{nb})
			if err != nil && !errors.Is(err, store.ErrNotFound) && ctx.Err() == nil {
				r.log.Warn("boot timeline: write failed", "node", nb.NodeUUID, "stages", len(nb.Stages), "err", err)
			}
		}
		return
	}
	if err != nil && !errors.Is(err, store.ErrNotFound) && ctx.Err() == nil {
		r.log.Warn("boot timeline: write failed", "nodes", len(b), "stages", n, "err", err)
	}
}

// Flush waits until every stage recorded so far is written (or ctx ends):
// for tests, and for a reader that must see what was just recorded.
func (r *Recorder) Flush(ctx context.Context) error {
	if r == nil {
		return nil
	}
	t := time.NewTicker(2 * time.Millisecond)
	defer t.Stop()
	for r.pending.Load() > 0 {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
	return nil
}
