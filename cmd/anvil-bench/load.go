package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/anvil-metal/anvil/controller/client"
	"github.com/anvil-metal/anvil/controller/simagent"
	"github.com/anvil-metal/anvil/controller/store/postgres/pgserver"
	"github.com/anvil-metal/anvil/internal/cli"
	"github.com/anvil-metal/anvil/internal/pause"
)

// loadConfig are the knobs of one load run.
type loadConfig struct {
	bin         string
	database    string // sqlite or postgres
	controllers int
	nodes       int
	cleaning    int
	duration    time.Duration
	heartbeat   time.Duration
	stepRuns    int
	apiClients  int
	apiRate     float64
	enrolConc   int
	workers     int
	leaseTTL    time.Duration
	timeout     time.Duration
	logDir      string
	pgOptions   string
}

const loadUsage = `usage: anvil-bench load [flags]

The fleet load test: -nodes nodes enrolled and made manageable, -cleaning of
them kept cleaning at once with simulated agents, API clients reading
alongside, for -duration, on -controllers controllers sharing -database.
Prints a report, then the same as JSON.
`

func parseLoad(args []string) (loadConfig, error) {
	fs := flag.NewFlagSet("anvil-bench load", flag.ContinueOnError)
	self, _ := os.Executable()
	var c loadConfig
	fs.StringVar(&c.bin, "controller", filepath.Join(filepath.Dir(self), "anvil-controller"), "anvil-controller binary")
	fs.StringVar(&c.database, "database", "sqlite", "sqlite (a file in a temp dir; one controller) or postgres (a throwaway server; any number)")
	fs.IntVar(&c.controllers, "controllers", 1, "controller processes sharing the database, behind a round-robin balancer")
	fs.IntVar(&c.nodes, "nodes", 10000, "nodes enrolled (one port each) and made manageable before the load")
	fs.IntVar(&c.cleaning, "cleaning", 500, "nodes kept cleaning at once, each with a simulated agent")
	fs.DurationVar(&c.duration, "duration", 3*time.Minute, "how long the load runs (after enrolment)")
	fs.DurationVar(&c.heartbeat, "heartbeat-interval", 2*time.Second, "agents' heartbeat interval (the controller's --heartbeat-interval); real fleets use 10-30 s")
	fs.IntVar(&c.stepRuns, "step-heartbeats", 5, "heartbeats each clean step stays running")
	fs.IntVar(&c.apiClients, "api-clients", 4, "concurrent API clients (list, detailed list, show)")
	fs.Float64Var(&c.apiRate, "api-rate", 20, "API requests per second over all clients (at most)")
	fs.IntVar(&c.enrolConc, "enrol-concurrency", 16, "concurrent requests while enrolling")
	fs.IntVar(&c.workers, "workers", 0, "the controllers' --workers (0: their default)")
	fs.DurationVar(&c.leaseTTL, "lease-ttl", 0, "the controllers' --lease-ttl (0: not passed)")
	fs.DurationVar(&c.timeout, "timeout", 20*time.Minute, "abort the whole run after this long")
	fs.StringVar(&c.pgOptions, "pg-options", "", "extra options of the PostgreSQL URL, e.g. pool_max_conns=16")
	fs.StringVar(&c.logDir, "log-dir", "", "keep the controllers' logs (level warn) in this directory (default: a temp dir, removed)")
	if _, err := cli.Parse(fs, loadUsage, args); err != nil {
		return c, err
	}
	switch {
	case c.database != "sqlite" && c.database != "postgres":
		return c, fmt.Errorf("-database %q: want sqlite or postgres", c.database)
	case c.database == "sqlite" && c.controllers != 1:
		return c, errors.New("SQLite is one controller's database: use -database postgres for several")
	case c.controllers < 1 || c.nodes < 1 || c.cleaning < 1 || c.cleaning > c.nodes:
		return c, errors.New("want -controllers >= 1 and 1 <= -cleaning <= -nodes")
	case c.heartbeat <= 0 || c.duration <= 0 || c.apiRate <= 0:
		return c, errors.New("-heartbeat-interval, -duration and -api-rate must be positive")
	}
	return c, nil
}

func runLoad(args []string, out io.Writer) error {
	cfg, err := parseLoad(args)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), cfg.timeout)
	defer cancel()
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	res, err := loadTest(ctx, cfg, out)
	if err != nil {
		return err
	}
	return printReport(out, res)
}

// balancer spreads requests over the controllers round-robin, as an HTTP
// load balancer in front of them would: requests go to http://anvil/...
type balancer struct {
	hosts []string
	next  atomic.Uint64
	rt    http.RoundTripper
}

func newBalancer(urls []string, conns int) *balancer {
	b := &balancer{rt: &http.Transport{MaxIdleConns: conns * len(urls), MaxIdleConnsPerHost: conns, IdleConnTimeout: time.Minute}}
	for _, u := range urls {
		b.hosts = append(b.hosts, strings.TrimPrefix(u, "http://"))
	}
	return b
}

func (b *balancer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context()) // a RoundTripper must not modify its request
	r.URL.Host = b.hosts[b.next.Add(1)%uint64(len(b.hosts))]
	r.Host = ""
	return b.rt.RoundTrip(r)
}

const lbURL = "http://anvil"

// fleet is the controllers of a run, their database and temp dir.
type fleet struct {
	dir   string
	pg    *pgserver.Server
	procs []*exec.Cmd
	urls  []string
	logs  []string
}

func startFleet(cfg loadConfig) (f *fleet, err error) {
	f = &fleet{}
	defer func() {
		if err != nil {
			f.stop()
		}
	}()
	if f.dir, err = os.MkdirTemp("", "anvil-load"); err != nil {
		return f, err
	}
	if cfg.logDir != "" {
		if err = os.MkdirAll(cfg.logDir, 0o755); err != nil {
			return f, err
		}
	}
	db := "sqlite://" + filepath.Join(f.dir, "anvil.db")
	if cfg.database == "postgres" {
		if f.pg, err = pgserver.Start(pgserver.Options{MaxConnections: 100, SharedBuffers: "128MB"}); err != nil {
			return f, err
		}
		if db, err = f.pg.CreateDatabase(""); err != nil {
			return f, err
		}
		if cfg.pgOptions != "" {
			db += "&" + cfg.pgOptions
		}
	}
	for i := range cfg.controllers {
		args := []string{"--database", db, "--log-level", "warn", "--host", fmt.Sprintf("load-%d", i),
			"--heartbeat-interval", cfg.heartbeat.String()}
		if cfg.workers > 0 {
			args = append(args, "--workers", strconv.Itoa(cfg.workers))
		}
		if cfg.leaseTTL > 0 {
			args = append(args, "--lease-ttl", cfg.leaseTTL.String())
		}
		logPath := filepath.Join(cmp.Or(cfg.logDir, f.dir), fmt.Sprintf("controller-%d.log", i))
		logs, err := os.Create(logPath)
		if err != nil {
			return f, err
		}
		// Its own process group, so stop reaches anything it starts; and
		// killed with us if we die without cleaning up.
		proc, url, err := startWith(cfg.bin, args, logs, func(c *exec.Cmd) {
			c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
		})
		logs.Close() // the child has its own descriptor
		if err != nil {
			b, _ := os.ReadFile(logPath)
			return f, fmt.Errorf("controller %d: %w\n%s", i, err, b)
		}
		f.procs, f.urls, f.logs = append(f.procs, proc), append(f.urls, url), append(f.logs, logPath)
	}
	return f, nil
}

// stop ends the controllers (SIGTERM, then SIGKILL after 10 s), the
// database server and removes the temp dir.
func (f *fleet) stop() {
	var wg sync.WaitGroup
	for _, p := range f.procs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			done := make(chan struct{})
			go func() { _ = p.Wait(); close(done) }()
			_ = syscall.Kill(-p.Process.Pid, syscall.SIGTERM)
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				_ = syscall.Kill(-p.Process.Pid, syscall.SIGKILL)
				<-done
			}
		}()
	}
	wg.Wait()
	if f.pg != nil {
		f.pg.Stop()
	}
	if f.dir != "" {
		os.RemoveAll(f.dir)
	}
}

type loadNode struct {
	uuid, mac string
	cleaned   bool // since enrolment: manageable again only after manage
}

// loadRun is the state shared by the goroutines of one run.
type loadRun struct {
	cfg         loadConfig
	api         *client.Client
	agentHTTP   *http.Client
	nodes       []*loadNode
	pool        chan *loadNode
	hb, lookups recorder
	apiRec      map[string]*recorder
	afterEnd    atomic.Int64
	reboots     atomic.Int64 // agents restarted by a controller's reboot
	cleanFailed atomic.Int64
	mu          sync.Mutex
	cleanTimes  []time.Duration
}

func loadTest(ctx context.Context, cfg loadConfig, out io.Writer) (*loadResult, error) {
	if _, err := os.Stat(cfg.bin); err != nil {
		return nil, fmt.Errorf("controller binary: %w (make build)", err)
	}
	f, err := startFleet(cfg)
	if err != nil {
		return nil, err
	}
	defer f.stop()
	conns := cfg.cleaning/len(f.urls) + 8
	l := &loadRun{cfg: cfg, pool: make(chan *loadNode, cfg.nodes),
		api:       client.New(lbURL, &http.Client{Timeout: 30 * time.Second, Transport: newBalancer(f.urls, 32)}),
		agentHTTP: &http.Client{Timeout: 10 * time.Second, Transport: newBalancer(f.urls, conns)},
		apiRec:    map[string]*recorder{}}
	for _, k := range []string{"list", "detail", "show", "provide", "manage"} {
		l.apiRec[k] = &recorder{}
	}
	fmt.Fprintf(out, "anvil-bench load: %d controller(s) on %s (%s), enrolling %d nodes\n", len(f.urls), cfg.database, strings.Join(f.urls, " "), cfg.nodes)
	t0 := time.Now()
	if err := l.enrol(ctx); err != nil {
		return nil, fmt.Errorf("enrol: %w", err)
	}
	enrolled := time.Since(t0)
	fmt.Fprintf(out, "enrolled in %s; %d nodes cleaning at once for %s, heartbeats every %s, API at most %.0f req/s\n",
		fmtDur(enrolled), cfg.cleaning, cfg.duration, cfg.heartbeat, cfg.apiRate)

	before, err := sampleAll(f)
	if err != nil {
		return nil, err
	}
	lctx, stopLoad := context.WithTimeout(ctx, cfg.duration)
	defer stopLoad()
	start := time.Now()
	var wg sync.WaitGroup
	for range cfg.cleaning {
		wg.Go(func() { l.slot(lctx) })
	}
	tick := time.NewTicker(time.Duration(float64(time.Second) / cfg.apiRate))
	defer tick.Stop()
	for i := range cfg.apiClients {
		wg.Go(func() { l.apiClient(lctx, tick.C, i) })
	}
	<-lctx.Done()
	elapsed := time.Since(start)
	wg.Wait()
	if ctx.Err() != nil {
		return nil, fmt.Errorf("aborted during the load: %w", ctx.Err())
	}
	after, err := sampleAll(f)
	if err != nil {
		return nil, err
	}
	return l.result(f, elapsed, enrolled, before, after), nil
}

// enrol creates the nodes with a port each and manages them.
func (l *loadRun) enrol(ctx context.Context) error {
	idx := make([]int, l.cfg.nodes)
	for i := range idx {
		idx[i] = i
	}
	l.nodes = make([]*loadNode, l.cfg.nodes)
	err := forEach(ctx, l.cfg.enrolConc, idx, func(i int) error {
		n, err := l.api.CreateNode(ctx, map[string]any{"driver": "fake-hardware", "name": fmt.Sprintf("load-%05d", i),
			"deploy_interface": "direct",
			"properties":       map[string]any{"cpus": 32, "memory_mb": 262144, "local_gb": 960, "cpu_arch": "x86_64"},
			"driver_info":      map[string]any{"ipmi_address": fmt.Sprintf("127.1.%d.%d", i>>8&0xff, i&0xff), "ipmi_username": "admin", "ipmi_password": "x"}})
		if err != nil {
			return err
		}
		mac := fmt.Sprintf("52:54:%02x:%02x:%02x:%02x", i>>24&0xff, i>>16&0xff, i>>8&0xff, i&0xff)
		if err := l.api.CreatePort(ctx, n.UUID, mac); err != nil {
			return err
		}
		l.nodes[i] = &loadNode{uuid: n.UUID, mac: mac}
		return l.api.Provision(ctx, n.UUID, "manage", nil)
	})
	if err != nil {
		return err
	}
	for { // verification runs in the controllers' workers
		left, err := l.api.ListNodes(ctx, "provision_state=verifying&fields=uuid", false)
		if err != nil {
			return err
		}
		if len(left) == 0 {
			break
		}
		if !pause.For(ctx, 200*time.Millisecond) {
			return ctx.Err()
		}
	}
	ready, err := l.api.ListNodes(ctx, "provision_state=manageable&fields=uuid", false)
	if err != nil {
		return err
	}
	if len(ready) != l.cfg.nodes {
		return fmt.Errorf("%d of %d nodes manageable", len(ready), l.cfg.nodes)
	}
	for _, n := range l.nodes {
		l.pool <- n
	}
	return nil
}

// slot keeps one node cleaning: it provides a manageable node, runs its
// agent until the node is available (or failed), and moves on.
func (l *loadRun) slot(ctx context.Context) {
	for {
		var n *loadNode
		select {
		case <-ctx.Done():
			return
		case n = <-l.pool:
		}
		if n.cleaned {
			if err := l.manage(ctx, n); err != nil {
				l.pool <- n
				if !pause.For(ctx, l.cfg.heartbeat) {
					return
				}
				continue
			}
		}
		start := time.Now()
		if err := l.timed(ctx, "provide", func() error { return l.api.Provision(ctx, n.uuid, "provide", nil) }); err != nil {
			l.pool <- n
			if !pause.For(ctx, l.cfg.heartbeat) {
				return
			}
			continue
		}
		switch l.agent(ctx, n) {
		case "":
			return // the run ended
		case "available":
			l.mu.Lock()
			l.cleanTimes = append(l.cleanTimes, time.Since(start))
			l.mu.Unlock()
		default:
			l.cleanFailed.Add(1)
		}
		n.cleaned = true
		l.pool <- n // room for every node: never blocks
	}
}

// manage brings a cleaned (available or clean failed) node back to
// manageable so it can be cleaned again.
func (l *loadRun) manage(ctx context.Context, n *loadNode) error {
	err := l.timed(ctx, "manage", func() error { return l.api.Provision(ctx, n.uuid, "manage", nil) })
	if err != nil {
		return err
	}
	_, err = l.api.WaitForState(ctx, n.uuid, "manageable", 100*time.Millisecond, nil)
	return err
}

// timed runs one API call and records it under kind; failures that only
// mean the run ended are not counted.
func (l *loadRun) timed(ctx context.Context, kind string, call func() error) error {
	t := time.Now()
	err := call()
	switch {
	case ctx.Err() != nil:
		return ctx.Err()
	case err != nil:
		l.apiRec[kind].fail(err)
	default:
		l.apiRec[kind].ok(time.Since(t))
	}
	return err
}

// agent runs a simulated agent for a node being cleaned, as the ramdisk
// would: look up until the node expects it, then heartbeat every interval
// and run the steps it is handed. The fake power driver cannot switch the
// agent off, so the first heartbeat refused after the node left cleaning
// ends it. Returns the node's final state, "" if the run ended first.
func (l *loadRun) agent(ctx context.Context, n *loadNode) string {
	a := simagent.New(lbURL, n.mac)
	a.HTTP = l.agentHTTP
	for _, k := range []string{"deploy.erase_devices_metadata", "deploy.erase_devices"} {
		a.Outcomes[k] = simagent.Outcome{Runs: l.cfg.stepRuns}
	}
	// A ramdisk takes a while to boot, and boots do not line up.
	if !pause.For(ctx, rand.N(l.cfg.heartbeat)) {
		return ""
	}
	t := time.NewTicker(l.cfg.heartbeat)
	defer t.Stop()
	lookedUp := false
	var lookedUpAt time.Time
	for {
		start := time.Now()
		if !lookedUp {
			err := a.Lookup(ctx)
			if ctx.Err() != nil {
				return ""
			}
			if err != nil {
				l.lookups.fail(err) // e.g. the node does not expect an agent yet
			} else {
				l.lookups.ok(time.Since(start))
				// after the answer: a reboot event later than this is a
				// reboot of the boot whose token the agent holds
				lookedUp, lookedUpAt = true, time.Now()
				continue // heartbeat right away
			}
		} else {
			_, err := a.Heartbeat(ctx)
			switch {
			case ctx.Err() != nil:
				return ""
			case err == nil:
				l.hb.ok(time.Since(start))
			case errors.Is(err, simagent.ErrUnauthorized):
				st := l.finished(ctx, n)
				if st != "" {
					l.afterEnd.Add(1)
					return st
				}
				if ctx.Err() != nil {
					// The run ended while the node's state was being read
					// (finished gives up then): the refusal was most likely
					// of a node that had just finished, and nothing was
					// dropped that the run could still see.
					return ""
				}
				lookedUp = false // as a real agent does: look up again
				if l.rebootedSince(ctx, n, lookedUpAt) {
					// The controller rebooted the node into a new boot of the
					// ramdisk, which revokes the token; fake power cannot stop
					// this agent, so it does what the reboot does to a real
					// one: a new process of a new boot, looking up again.
					a.Boot()
					l.reboots.Add(1)
					continue
				}
				l.hb.fail(err)
			default:
				l.hb.fail(err)
			}
		}
		select {
		case <-ctx.Done():
			return ""
		case <-t.C:
		}
	}
}

// rebootedSince reads in the node's history whether the controller
// rebooted it (into a new boot of the ramdisk, which revokes the agent's
// token) since the agent looked up.
func (l *loadRun) rebootedSince(ctx context.Context, n *loadNode, since time.Time) bool {
	hist, err := l.api.History(ctx, n.uuid)
	if err != nil {
		return false
	}
	for _, e := range hist {
		at, err := time.Parse(time.RFC3339Nano, e.CreatedAt)
		if err == nil && at.After(since) && strings.Contains(e.Event, "rebooted") {
			return true
		}
	}
	return false
}

// finished reads whether the node left cleaning: "available", "clean
// failed", or "" while it is still cleaning. A read that fails (the API
// under the run's own load may time out) is tried again a few times: an
// unread state would count a refused heartbeat of a finished node as a
// dropped one.
func (l *loadRun) finished(ctx context.Context, n *loadNode) string {
	for try := range 5 {
		if try > 0 && !pause.For(ctx, time.Duration(try)*100*time.Millisecond) {
			return ""
		}
		node, err := l.api.GetNode(ctx, n.uuid)
		if err != nil {
			continue
		}
		switch node.ProvisionState {
		case "available", "clean failed":
			return node.ProvisionState
		}
		return ""
	}
	return ""
}

// apiClient sends the operators' reads at the rate the shared ticker
// allows: list and detailed list pages from a random marker, and node show.
func (l *loadRun) apiClient(ctx context.Context, tick <-chan time.Time, i int) {
	kinds := []string{"list", "detail", "show"}
	for k := i; ; k++ {
		select {
		case <-ctx.Done():
			return
		case <-tick:
		}
		kind := kinds[k%len(kinds)]
		node := l.nodes[rand.IntN(len(l.nodes))].uuid
		path := map[string]string{"list": "/v1/nodes?limit=100&marker=" + node,
			"detail": "/v1/nodes/detail?limit=100&marker=" + node, "show": "/v1/nodes/" + node}[kind]
		_ = l.timed(ctx, kind, func() error { return l.api.Do(ctx, http.MethodGet, path, nil, nil) })
	}
}
