package main

// anvil-bench soak: simulated machines (a Redfish BMC each, whose power
// actions boot a simulated agent) go through whole lifecycles while
// controllers are SIGKILLed at random and restarted; at the end every
// node is checked against invariants that a crash must not break. The
// controllers, their database and the balancer in front are set up here;
// the lifecycles and the checks are in soakcheck.go.

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/anvil-metal/anvil/controller/client"
	"github.com/anvil-metal/anvil/controller/simagent"
	"github.com/anvil-metal/anvil/controller/simfleet"
	"github.com/anvil-metal/anvil/controller/store/postgres/pgserver"
	"github.com/anvil-metal/anvil/internal/cli"
	"github.com/anvil-metal/anvil/internal/pause"
	"github.com/anvil-metal/anvil/internal/roundrobin"
)

type soakConfig struct {
	bin         string
	database    string
	controllers int
	nodes       int
	duration    time.Duration
	killEvery   time.Duration
	heartbeat   time.Duration
	leaseTTL    time.Duration
	settle      time.Duration
	timeout     time.Duration
	seed        uint64
	logDir      string
	hangEvery   int
	stepTimeout time.Duration
}

const soakUsage = `usage: anvil-bench soak [flags]

The crash soak: -nodes simulated machines (a Redfish BMC each, a simulated
agent their power actions boot) go through manage, inspect, provide,
deploy, undeploy, retire and unretire over and over for -duration, on
-controllers controllers sharing -database, one of which is SIGKILLed about
every -kill-every and restarted. Then the fleet settles and every node is
checked: a stable state that its history ends in, every agent step finished
once or failed with a result, a record for every erase, no lease of a dead
controller, nothing stuck. Exits non-zero on any violation.
`

func parseSoak(args []string) (soakConfig, error) {
	fs := flag.NewFlagSet("anvil-bench soak", flag.ContinueOnError)
	self, _ := os.Executable()
	var c soakConfig
	fs.StringVar(&c.bin, "controller", filepath.Join(filepath.Dir(self), "anvil-controller"), "anvil-controller binary")
	fs.StringVar(&c.database, "database", "sqlite", "sqlite (one controller) or postgres (a throwaway server; any number)")
	fs.IntVar(&c.controllers, "controllers", 1, "controller processes sharing the database")
	fs.IntVar(&c.nodes, "nodes", 50, "simulated machines")
	fs.DurationVar(&c.duration, "duration", time.Minute, "how long lifecycles are started and controllers killed")
	fs.DurationVar(&c.killEvery, "kill-every", 10*time.Second, "mean time between SIGKILLs of a random controller (0: none)")
	fs.DurationVar(&c.heartbeat, "heartbeat-interval", 500*time.Millisecond, "agents' heartbeat interval")
	fs.DurationVar(&c.leaseTTL, "lease-ttl", 3*time.Second, "the controllers' --lease-ttl")
	fs.DurationVar(&c.settle, "settle", 2*time.Minute, "how long the fleet may take to come to rest after -duration")
	fs.DurationVar(&c.timeout, "timeout", time.Hour, "abort the whole run after this long")
	fs.Uint64Var(&c.seed, "seed", 0, "random seed of lifecycles and kills (0: from the clock; printed)")
	fs.StringVar(&c.logDir, "log-dir", "", "keep the controllers' logs (and the SQLite database) here (default: a temp dir, removed)")
	fs.IntVar(&c.hangEvery, "hang-every", 5, "every Nth machine's erase never finishes, so the controllers time it out (0: none)")
	fs.DurationVar(&c.stepTimeout, "step-timeout", 15*time.Second, "the controllers' --step-timeout, which ends those erases")
	if _, err := cli.Parse(fs, soakUsage, args); err != nil {
		return c, err
	}
	switch {
	case c.database != "sqlite" && c.database != "postgres":
		return c, fmt.Errorf("-database %q: want sqlite or postgres", c.database)
	case c.database == "sqlite" && c.controllers != 1:
		return c, errors.New("SQLite is one controller's database: use -database postgres for several")
	case c.controllers < 1 || c.nodes < 1:
		return c, errors.New("want -controllers >= 1 and -nodes >= 1")
	case c.duration <= 0 || c.heartbeat <= 0 || c.leaseTTL <= 0 || c.settle <= 0 || c.stepTimeout <= 0:
		return c, errors.New("-duration, -heartbeat-interval, -lease-ttl, -settle and -step-timeout must be positive")
	case c.hangEvery < 0:
		return c, errors.New("-hang-every must be >= 0")
	}
	if c.seed == 0 {
		c.seed = uint64(time.Now().UnixNano())
	}
	return c, nil
}

func runSoak(args []string, out io.Writer) error {
	cfg, err := parseSoak(args)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), cfg.timeout)
	defer cancel()
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep, err := soak(ctx, cfg, out)
	if err != nil {
		return err
	}
	if err := printReport(out, rep); err != nil {
		return err
	}
	if len(rep.Violations) > 0 {
		return fmt.Errorf("soak: %d invariant violations (seed %d)", len(rep.Violations), cfg.seed)
	}
	return nil
}

// soakCtl is one controller process, restartable with the same arguments.
type soakCtl struct {
	i       int
	args    []string
	logPath string
	mu      sync.Mutex
	cmd     *exec.Cmd
	url     string
	done    chan struct{}
}

func (c *soakCtl) start(bin string) error {
	logs, err := os.OpenFile(c.logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer logs.Close() // the child has its own descriptor
	cmd, url, err := startWith(bin, c.args, logs, func(cmd *exec.Cmd) {
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	})
	if err != nil {
		return fmt.Errorf("controller %d: %w", c.i, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	c.mu.Lock()
	c.cmd, c.url, c.done = cmd, url, done
	c.mu.Unlock()
	return nil
}

// kill SIGKILLs the controller and waits for it to be gone.
func (c *soakCtl) kill() {
	c.mu.Lock()
	cmd, done := c.cmd, c.done
	c.url = ""
	c.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	<-done
}

// stop ends the controller cleanly (SIGTERM, then SIGKILL after 10 s).
func (c *soakCtl) stop() {
	c.mu.Lock()
	cmd, done := c.cmd, c.done
	c.url = ""
	c.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
	}
}

func (c *soakCtl) addr() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.url
}

// soakRun is the state of one soak.
type soakRun struct {
	cfg      soakConfig
	out      io.Writer
	db       string // the database URL the controllers share
	ctls     []*soakCtl
	api      *client.Client
	fleet    *simfleet.Fleet
	mu       sync.Mutex
	nodes    map[string]*soakNode // by machine name
	kills    atomic.Int64
	lastKill atomic.Int64 // unix nanoseconds
}

func soak(ctx context.Context, cfg soakConfig, out io.Writer) (*soakReport, error) {
	if _, err := os.Stat(cfg.bin); err != nil {
		return nil, fmt.Errorf("controller binary: %w (make build)", err)
	}
	dir, err := os.MkdirTemp("", "anvil-soak")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	logDir := dir
	if cfg.logDir != "" {
		logDir = cfg.logDir
		if err := os.MkdirAll(logDir, 0o755); err != nil {
			return nil, err
		}
	}
	// with -log-dir the SQLite database is kept there too, for a look
	// at what a violation left
	r := &soakRun{cfg: cfg, out: out, db: "sqlite://" + filepath.Join(logDir, "anvil.db"), nodes: map[string]*soakNode{}}
	if cfg.database == "postgres" {
		pg, err := pgserver.Start(pgserver.Options{MaxConnections: 100})
		if err != nil {
			return nil, err
		}
		defer pg.Stop()
		if r.db, err = pg.CreateDatabase(""); err != nil {
			return nil, err
		}
	}
	for i := range cfg.controllers {
		c := &soakCtl{i: i, logPath: filepath.Join(logDir, fmt.Sprintf("soak-controller-%d.log", i)),
			args: []string{"--database", r.db, "--host", fmt.Sprintf("soak-%d", i), "--log-level", "info",
				"--heartbeat-interval", cfg.heartbeat.String(), "--lease-ttl", cfg.leaseTTL.String(),
				"--bmc-min-interval", "0", "--timeout-check-interval", "500ms", "--step-timeout", cfg.stepTimeout.String(),
				// every agent comes from the balancer's one loopback address
				"--max-unauth-conns-per-source", "0"}}
		if err := c.start(cfg.bin); err != nil {
			return nil, err
		}
		defer c.stop()
		r.ctls = append(r.ctls, c)
	}
	front := httptest.NewServer(&roundrobin.Balancer{Client: &http.Client{Timeout: 30 * time.Second}, Backends: func() []string {
		urls := make([]string, len(r.ctls))
		for i, c := range r.ctls {
			urls[i] = c.addr() // "" while it is down
		}
		return urls
	}})
	defer front.Close()
	r.api = client.New(front.URL, &http.Client{Timeout: 30 * time.Second})

	fctx, stopFleet := context.WithCancel(context.Background())
	defer stopFleet()
	machines := 0
	r.fleet = simfleet.New(fctx, simfleet.Config{API: front.URL, Interval: cfg.heartbeat, BootDelay: 100 * time.Millisecond,
		Prepare: func(m *simfleet.Machine) {
			// Steps that last a few heartbeats, so that kills land in them;
			// an erase that erased one device, so that it has a record.
			m.Agent.Outcomes["deploy.erase_devices_metadata"] = simagent.Outcome{Runs: 2}
			m.Agent.Outcomes["deploy.erase_devices"] = simagent.Outcome{Runs: 4, Result: simulatedErase(m.Name)}
			m.Agent.Outcomes["deploy.write_image"] = simagent.Outcome{Runs: 3}
			if cfg.hangEvery > 0 && machines%cfg.hangEvery == 0 {
				// never released: the controller's step timeout ends it,
				// the path whose result was once a second write
				m.Agent.Outcomes["deploy.erase_devices"] = simagent.Outcome{Release: make(chan struct{})}
			}
			machines++
		}}, "soak", cfg.nodes)
	defer r.fleet.Close()
	fmt.Fprintf(out, "anvil-bench soak: %d nodes, %d controller(s) on %s, %s of lifecycles, a SIGKILL about every %s, seed %d\n",
		cfg.nodes, cfg.controllers, cfg.database, cfg.duration, cfg.killEvery, cfg.seed)
	if err := r.enrol(ctx); err != nil {
		return nil, fmt.Errorf("enrol: %w", err)
	}

	lctx, stopLoad := context.WithTimeout(ctx, cfg.duration)
	defer stopLoad()
	var wg sync.WaitGroup
	for i, m := range r.fleet.Machines {
		rng := rand.New(rand.NewPCG(cfg.seed, uint64(i)))
		wg.Go(func() { r.drive(lctx, r.nodes[m.Name], rng) })
	}
	if cfg.killEvery > 0 {
		wg.Go(func() { r.killer(lctx, rand.New(rand.NewPCG(cfg.seed, 1<<40))) })
	}
	<-lctx.Done()
	wg.Wait()
	if ctx.Err() != nil {
		return nil, fmt.Errorf("aborted during the soak: %w", ctx.Err())
	}
	for _, c := range r.ctls { // every controller up for the settling
		if c.addr() == "" {
			if err := c.start(cfg.bin); err != nil {
				return nil, err
			}
		}
	}
	fmt.Fprintf(out, "lifecycles stopped after %s (%d controller kills); settling\n", cfg.duration, r.kills.Load())
	settled := r.settle(ctx)
	return r.check(ctx, settled), nil
}

// simulatedErase is the erase result of a machine's one disk, as the real
// agent reports an erased device.
func simulatedErase(name string) map[string]any {
	return map[string]any{"policy": map[string]any{"iterations": 1}, "devices": []any{map[string]any{
		"plan": map[string]any{"device": "/dev/nvme0n1", "size": 64 << 30, "action": "erase", "rotational": false, "controller": "nvme",
			"nvme": map[string]any{"model": "Simulated NVMe", "serial": "SIM-" + name}},
		"status": "erased", "method": "nvme_format_crypto_erase", "bytes": 64 << 30, "seconds": 0.1}}}
}

// enrol creates a node per machine, with its port.
func (r *soakRun) enrol(ctx context.Context) error {
	return forEach(ctx, 8, r.fleet.Machines, func(m *simfleet.Machine) error {
		n, err := r.api.CreateNode(ctx, map[string]any{"driver": "redfish", "name": m.Name, "deploy_interface": "direct",
			"driver_info": m.DriverInfo(),

			"properties": map[string]any{"cpus": 4, "memory_mb": 8192, "local_gb": 64, "cpu_arch": "x86_64"}})
		if err != nil {
			return err
		}
		if err := r.api.CreatePort(ctx, n.UUID, m.MAC); err != nil {
			return err
		}
		sn := &soakNode{name: m.Name, uuid: n.UUID, machine: m}
		r.mu.Lock()
		r.nodes[m.Name] = sn
		r.mu.Unlock()
		return nil
	})
}

// killer SIGKILLs a random running controller about every killEvery
// and restarts it after a moment, until ctx ends.
func (r *soakRun) killer(ctx context.Context, rng *rand.Rand) {
	for {
		wait := r.cfg.killEvery/2 + time.Duration(rng.Int64N(int64(r.cfg.killEvery)))
		if !pause.For(ctx, wait) {
			return
		}
		c := r.ctls[rng.IntN(len(r.ctls))]
		c.kill()
		r.kills.Add(1)
		r.lastKill.Store(time.Now().UnixNano())
		fmt.Fprintf(r.out, "  %s killed soak-%d\n", time.Now().Format("15:04:05.000"), c.i)
		pause.For(ctx, 200*time.Millisecond+time.Duration(rng.Int64N(int64(time.Second))))
		for try := 0; ; try++ {
			err := c.start(r.cfg.bin)
			if err == nil {
				break
			}
			fmt.Fprintf(r.out, "  restarting soak-%d failed: %v\n", c.i, err)
			if try == 5 {
				return
			}
		}
	}
}
