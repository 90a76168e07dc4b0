package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/anvil-metal/anvil/internal/cli"
	"github.com/anvil-metal/anvil/internal/ironicserver"

	"github.com/anvil-metal/anvil/internal/pause"
)

// "anvil-bench ironic" runs the same workload, over the HTTP API only,
// against anvil-controller (SQLite) and against Debian's stock Ironic 21.4
// (standalone, noauth, SQLite), one after the other in one run, and prints
// them side by side with the ratios issue #22 sets as targets. Both use
// the fake-hardware type with fake boot, power, management and deploy
// interfaces, which both implement, so 100 nodes go enroll -> manageable ->
// available -> active without hardware or an agent.

// ironicConfig are the knobs of one side-by-side run.
type ironicConfig struct {
	bin          string
	nodes        int // created by -concurrency clients, listed, then deleted
	lifecycle    int // taken enroll -> active (and listed too)
	deleteIronic int // of the nodes, how many Ironic deletes (about 4 a second)
	requests     int // timed full listings per client count
	clients      int // the concurrent client count
	conc         int // concurrent requests while enrolling and acting
	timeout      time.Duration
	only         string // "", "anvil" or "ironic"
}

const ironicUsage = `usage: anvil-bench ironic [flags]

One workload against anvil-controller and against Debian's stock Ironic 21.4
(python3-ironic), side by side with the ratios: enrolment, detailed node
lists with one and -clients clients, -lifecycle nodes taken to active with
CPU and memory measured. Prints a report, then the same as JSON.
`

func parseIronic(args []string) (ironicConfig, error) {
	fs := flag.NewFlagSet("anvil-bench ironic", flag.ContinueOnError)
	self, _ := os.Executable()
	var c ironicConfig
	fs.StringVar(&c.bin, "controller", filepath.Join(filepath.Dir(self), "anvil-controller"), "anvil-controller binary")
	fs.IntVar(&c.nodes, "nodes", 1000, "nodes created by -concurrency clients (timed), listed with the lifecycle's, then deleted (timed)")
	fs.IntVar(&c.deleteIronic, "delete-ironic", 100, "of the -nodes, how many Ironic deletes (it deletes about 4 a second; anvil deletes them all; the ratio is per node)")
	fs.IntVar(&c.lifecycle, "lifecycle", 100, "nodes enrolled and taken to active while CPU and memory are measured")
	fs.IntVar(&c.requests, "requests", 15, "rounds of one full listing of /v1/nodes/detail per side, alternating sides; then 2 rounds of -clients concurrent listings (a warm-up listing is not counted)")
	fs.IntVar(&c.clients, "clients", 8, "concurrent clients of the second list measurement")
	fs.IntVar(&c.conc, "concurrency", 8, "concurrent requests while enrolling, deleting and acting on nodes")
	fs.DurationVar(&c.timeout, "timeout", 30*time.Minute, "abort the whole run after this long")
	fs.StringVar(&c.only, "only", "", "run one side only: anvil or ironic (no ratios)")
	if _, err := cli.Parse(fs, ironicUsage, args); err != nil {
		return c, err
	}
	switch {
	case c.nodes < 1 || c.lifecycle < 1 || c.requests < 1 || c.clients < 1 || c.conc < 1:
		return c, errors.New("-nodes, -lifecycle, -requests, -clients and -concurrency must be positive")
	case c.deleteIronic < 1 || c.deleteIronic > c.nodes:
		return c, errors.New("-delete-ironic must be between 1 and -nodes")
	case c.only != "" && c.only != "anvil" && c.only != "ironic":
		return c, fmt.Errorf("-only %q: want anvil or ironic", c.only)
	}
	return c, nil
}

// sideResult is what one server measured.
type sideResult struct {
	Server        string  `json:"server"`
	IdleRSSMB     float64 `json:"idle_rss_mb"`
	Writers       int     `json:"writers"`        // clients creating and deleting
	CreateSeconds float64 `json:"create_seconds"` // -nodes created by Writers clients
	CreateCPU     float64 `json:"create_cpu_seconds"`
	Deleted       int     `json:"deleted"`
	DeleteSeconds float64 `json:"delete_seconds"`
	DeleteCPU     float64 `json:"delete_cpu_seconds"`
	// RunPeakRSSMB is the summed RSS sampled every 100 ms from the idle
	// measurement to the end (lifecycle, creates, the concurrent detailed
	// lists, deletes): the peak a user sees.
	RunPeakRSSMB float64    `json:"run_peak_rss_mb"`
	List1        latencies  `json:"list_1_client"`
	ListN        latencies  `json:"list_n_clients"`
	ListCPUms    float64    `json:"list_cpu_ms"` // server CPU per single-client listing: what load from others does not change
	Lifecycle    float64    `json:"lifecycle_seconds"`
	CPUSeconds   float64    `json:"lifecycle_cpu_seconds"`
	PeakRSSMB    float64    `json:"lifecycle_peak_rss_mb"`
	HWMMB        float64    `json:"lifecycle_hwm_mb"`
	Processes    int        `json:"processes"`
	Conflicts    int64      `json:"conflicts_retried"`
	LoadAverage  [2]string  `json:"load_average"` // 1-minute, at start and at end
	Phases       []phaseLog `json:"phases,omitempty"`
}

type latencies struct {
	Clients  int     `json:"clients"`
	Listings int     `json:"listings"`
	Requests int     `json:"requests"` // HTTP requests per listing (pages, incl. the last, empty one)
	P50ms    float64 `json:"p50_ms"`
	P95ms    float64 `json:"p95_ms"`
}

type phaseLog struct {
	Name    string  `json:"name"`
	Seconds float64 `json:"seconds"`
}

// ironicReport is the whole run: both sides and the ratios.
type ironicReport struct {
	Nodes     int                `json:"nodes"`
	Lifecycle int                `json:"lifecycle_nodes"`
	Sides     []sideResult       `json:"sides"`
	Ratios    map[string]float64 `json:"ratios,omitempty"`
	Targets   map[string]bool    `json:"targets,omitempty"`
}

func runIronic(args []string, out io.Writer) error {
	cfg, err := parseIronic(args)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), cfg.timeout)
	defer cancel()
	rep, err := ironicBench(ctx, cfg, out)
	if err != nil {
		return err
	}
	return printReport(out, rep)
}

func ironicBench(ctx context.Context, cfg ironicConfig, out io.Writer) (*ironicReport, error) {
	rep := &ironicReport{Nodes: cfg.nodes, Lifecycle: cfg.lifecycle}
	var sides []*side
	defer func() {
		for _, sd := range sides {
			sd.close()
		}
	}()
	if cfg.only != "ironic" {
		if _, err := os.Stat(cfg.bin); err != nil {
			return nil, fmt.Errorf("controller binary: %w (make build)", err)
		}
		sd, err := prepareSide(ctx, cfg, out, startAnvil)
		if sd != nil {
			sides = append(sides, sd)
		}
		if err != nil {
			return nil, fmt.Errorf("anvil: %w", err)
		}
	}
	if cfg.only != "anvil" {
		sd, err := prepareSide(ctx, cfg, out, startIronic)
		if sd != nil {
			sides = append(sides, sd)
		}
		if err != nil {
			return nil, fmt.Errorf("ironic: %w", err)
		}
	}
	if err := listSides(ctx, cfg, out, sides); err != nil {
		return nil, err
	}
	for _, sd := range sides {
		n := len(sd.ids)
		if sd.srv.name != "anvil" {
			n = cfg.deleteIronic
		}
		if err := sd.deleteNodes(ctx, out, sd.ids[:n]); err != nil {
			return nil, fmt.Errorf("%s: %w", sd.r.Server, err)
		}
		peak, _ := sd.run.stop()
		sd.run = nil
		sd.r.RunPeakRSSMB = kbToMB(peak)
	}
	for _, sd := range sides {
		sd.r.Conflicts = sd.w.conflicts.Load()
		sd.r.LoadAverage[1] = loadAverage()
		rep.Sides = append(rep.Sides, sd.r)
	}
	if len(rep.Sides) == 2 {
		rep.ratios()
	}
	return rep, nil
}

// listSides times full detailed listings on every side, in alternating
// rounds (one side's round, then the other's), so that both see the same
// share of a machine whose load from others comes and goes: cfg.requests
// rounds of one listing, then two rounds of cfg.clients concurrent ones.
func listSides(ctx context.Context, cfg ironicConfig, out io.Writer, sides []*side) error {
	one := make([][]time.Duration, len(sides))
	many := make([][]time.Duration, len(sides))
	cpu := make([]time.Duration, len(sides)) // over the single-client rounds
	for _, sd := range sides {
		req, err := sd.w.warmUp(ctx, cfg.nodes+cfg.lifecycle)
		if err != nil {
			return fmt.Errorf("%s: warm-up listing: %w", sd.r.Server, err)
		}
		sd.r.List1.Requests, sd.r.ListN.Requests = req, req
		sd.r.List1.Clients, sd.r.ListN.Clients = 1, cfg.clients
	}
	t := time.Now()
	for round := 0; round < cfg.requests+2; round++ {
		clients := 1
		if round >= cfg.requests {
			clients = cfg.clients
		}
		for i, sd := range sides {
			before := sumProcs(sd.srv.pids(), sd.srv.leader)
			d, err := sd.w.listRound(ctx, clients, cfg.nodes+cfg.lifecycle)
			if err != nil {
				return fmt.Errorf("%s: listing: %w", sd.r.Server, err)
			}
			if clients == 1 {
				cpu[i] += sumProcs(sd.srv.pids(), sd.srv.leader).cpu - before.cpu
			}
			if clients == 1 && round < cfg.requests {
				one[i] = append(one[i], d...)
			} else {
				many[i] = append(many[i], d...)
			}
		}
	}
	for i, sd := range sides {
		sd.r.List1.summarise(one[i])
		sd.r.ListN.summarise(many[i])
		sd.r.ListCPUms = float64(cpu[i].Microseconds()) / 1000 / float64(len(one[i]))
	}
	fmt.Fprintf(out, "== GET /v1/nodes/detail, alternating rounds: %s (load average %s)\n", fmtDur(time.Since(t)), loadAverage())
	return nil
}

// side is one server prepared for the listings: started, measured idle
// and through the lifecycle, its fleet enrolled.
type side struct {
	srv *server
	w   *workload
	r   sideResult
	dir string
	ids []string // the -nodes created, deleted at the end
	run *sampler // RSS through the whole run
}

func (sd *side) close() {
	if sd.run != nil {
		sd.run.stop()
	}
	if sd.srv != nil {
		sd.srv.stop()
	}
	os.RemoveAll(sd.dir)
}

// server is one side while it runs: where to reach it, which processes
// are it, and how to stop it.
type server struct {
	name   string
	url    string
	leader int
	pids   func() []int
	stop   func()
	logs   func() string
}

func startAnvil(cfg ironicConfig, dir string) (*server, error) {
	proc, url, err := startWith(cfg.bin, []string{"--database", "sqlite://" + filepath.Join(dir, "anvil.db"), "--log-level", "warn"}, os.Stderr, nil)
	if err != nil {
		return nil, err
	}
	pid := proc.Process.Pid
	return &server{name: "anvil", url: url, leader: pid, pids: func() []int { return []int{pid} },
		stop: func() {
			_ = proc.Process.Signal(os.Interrupt)
			_, _ = proc.Process.Wait()
		},
		logs: func() string { return "" }}, nil
}

func startIronic(_ ironicConfig, dir string) (*server, error) {
	srv, err := ironicserver.Start(dir, ironicserver.Options{Quiet: true})
	if err != nil {
		return nil, err
	}
	return &server{name: "ironic 21.4", url: srv.URL, leader: srv.Pid, pids: srv.Pids, stop: srv.Stop,
		logs: func() string { return srv.LogTail(3000) }}, nil
}

// prepareSide starts one server and runs the first part of the workload
// against it: idle memory, the measured lifecycle, enrolment of the rest
// of the fleet. The returned side, even with an error, must be closed.
func prepareSide(ctx context.Context, cfg ironicConfig, out io.Writer, start func(ironicConfig, string) (*server, error)) (*side, error) {
	dir, err := os.MkdirTemp("", "anvil-bench-ironic")
	if err != nil {
		return nil, err
	}
	sd := &side{dir: dir}
	t0 := time.Now()
	srv, err := start(cfg, dir)
	if err != nil {
		return sd, err
	}
	sd.srv = srv
	r := &sd.r
	r.Server = srv.name
	r.LoadAverage[0] = loadAverage()
	fmt.Fprintf(out, "== %s at %s (started in %s), load average %s\n", srv.name, srv.url, fmtDur(time.Since(t0)), r.LoadAverage[0])
	w := newWorkload(srv.url, cfg.conc)
	sd.w = w
	phase := func(name string, f func() error) error {
		t := time.Now()
		if err := f(); err != nil {
			if l := srv.logs(); l != "" {
				return fmt.Errorf("%s: %w\nserver log:\n%s", name, err, l)
			}
			return fmt.Errorf("%s: %w", name, err)
		}
		d := time.Since(t)
		r.Phases = append(r.Phases, phaseLog{Name: name, Seconds: d.Seconds()})
		fmt.Fprintf(out, "   %-44s %s (load average %s)\n", name, fmtDur(d), loadAverage())
		return nil
	}

	// Idle: after start-up has settled, before any request but the
	// readiness probe.
	if !pause.For(ctx, 3*time.Second) {
		return sd, ctx.Err()
	}
	idle := sumProcs(srv.pids(), srv.leader)
	r.IdleRSSMB = kbToMB(idle.rssKB)
	sd.run = startSampler(srv.pids, 100*time.Millisecond)

	// The lifecycle: CPU is the servers' utime+stime over it, memory the
	// peak of the summed RSS sampled every 20 ms and the summed VmHWM,
	// reset first (clear_refs 5) so it is this phase's peak.
	pids := srv.pids()
	for _, pid := range pids {
		_ = os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0)
	}
	before := sumProcs(pids, srv.leader)
	sampler := startSampler(srv.pids, 20*time.Millisecond)
	err = phase(fmt.Sprintf("%d nodes enroll -> active", cfg.lifecycle), func() error { return w.lifecycle(ctx, "life", cfg.lifecycle) })
	peak, procs := sampler.stop()
	if err != nil {
		return sd, err
	}
	after := sumProcs(srv.pids(), srv.leader)
	r.Lifecycle = r.Phases[len(r.Phases)-1].Seconds
	r.CPUSeconds = (after.cpu - before.cpu).Seconds()
	r.PeakRSSMB = kbToMB(max(peak, after.rssKB))
	r.HWMMB = kbToMB(after.hwmKB)
	r.Processes = procs

	// The fleet the lists read: -nodes created by -concurrency clients,
	// beside the lifecycle's active ones.
	c0 := sumProcs(srv.pids(), srv.leader)
	err = phase(fmt.Sprintf("create %d nodes, %d clients", cfg.nodes, cfg.conc), func() error {
		var err error
		sd.ids, err = w.enrol(ctx, "n", cfg.nodes)
		return err
	})
	if err != nil {
		return sd, err
	}
	r.CreateSeconds, r.Writers = r.Phases[len(r.Phases)-1].Seconds, cfg.conc
	r.CreateCPU = (sumProcs(srv.pids(), srv.leader).cpu - c0.cpu).Seconds()
	return sd, nil
}

// deleteNodes deletes ids with the workload's concurrency, timed, with
// the server's CPU.
func (sd *side) deleteNodes(ctx context.Context, out io.Writer, ids []string) error {
	c0 := sumProcs(sd.srv.pids(), sd.srv.leader)
	t := time.Now()
	if err := sd.w.remove(ctx, ids); err != nil {
		return fmt.Errorf("delete: %w", err)
	}
	sd.r.Deleted, sd.r.DeleteSeconds = len(ids), time.Since(t).Seconds()
	sd.r.DeleteCPU = (sumProcs(sd.srv.pids(), sd.srv.leader).cpu - c0.cpu).Seconds()
	fmt.Fprintf(out, "   %-44s %s (load average %s)\n", fmt.Sprintf("%s: delete %d nodes, %d clients", sd.r.Server, len(ids), sd.w.conc),
		fmtDur(time.Since(t)), loadAverage())
	return nil
}

func kbToMB(kb int) float64 { return float64(kb) / 1024 }

func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	return strings.Join(strings.Fields(string(b))[:3], " ")
}

// sumProcs adds up the processes' memory and CPU; the leader's reaped
// children count too (a worker that exited keeps its CPU time).
func sumProcs(pids []int, leader int) procStat {
	var total procStat
	for _, pid := range pids {
		s, err := readProc(pid, pid == leader)
		if err != nil {
			continue // exited meanwhile
		}
		total.rssKB += s.rssKB
		total.hwmKB += s.hwmKB
		total.cpu += s.cpu
	}
	return total
}

// sampler records the peak of the summed RSS of a changing set of processes.
type sampler struct {
	done  chan struct{}
	peak  chan [2]int
	pids  func() []int
	every time.Duration
}

func startSampler(pids func() []int, every time.Duration) *sampler {
	s := &sampler{done: make(chan struct{}), peak: make(chan [2]int, 1), pids: pids, every: every}
	go func() {
		peak, procs := 0, 0
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			p := pids()
			peak, procs = max(peak, sumProcs(p, 0).rssKB), max(procs, len(p))
			select {
			case <-s.done:
				s.peak <- [2]int{peak, procs}
				return
			case <-t.C:
			}
		}
	}()
	return s
}

// stop ends sampling and returns the peak summed RSS (kB) and the most
// processes seen at once.
func (s *sampler) stop() (int, int) {
	close(s.done)
	p := <-s.peak
	return p[0], p[1]
}
