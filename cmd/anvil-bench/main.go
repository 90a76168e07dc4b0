// Command anvil-bench measures anvil-controller from another process over
// loopback: node creation, list latency, a 100-node lifecycle, deletion and
// resident memory. Every loop is bounded in count, and the whole run in time.
//
// "anvil-bench load" is the fleet load test (load.go): thousands of nodes,
// hundreds cleaning at once with simulated agents, API traffic alongside,
// on one or more controllers.
//
// "anvil-bench ironic" runs one workload against the controller and
// against stock Ironic 21.4 and prints them side by side (ironic.go).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/anvil-metal/anvil/controller/client"
	"github.com/anvil-metal/anvil/internal/cli"
)

func main() {
	os.Exit(cli.Exit(os.Stdout, os.Stderr, "anvil-bench", run(os.Args[1:], os.Stdout)))
}

const usage = `usage: anvil-bench [flags]
       anvil-bench load [flags]
       anvil-bench ironic [flags]

The first form measures anvil-controller from another process over
loopback: node creation, list latency, a 100-node lifecycle, deletion and
resident memory. "load" is the fleet load test: thousands of nodes, hundreds
cleaning at once with simulated agents, API traffic alongside, on one or
more controllers. "ironic" runs one workload against the controller and
against stock Ironic 21.4 and prints them side by side.
"anvil-bench load --help" and "anvil-bench ironic --help" list their flags.
`

type bench struct {
	c    *client.Client
	hc   *http.Client
	url  string
	pid  int
	out  io.Writer
	conc int
}

func run(args []string, out io.Writer) error {
	if len(args) > 0 && args[0] == "load" {
		return runLoad(args[1:], out)
	}
	if len(args) > 0 && args[0] == "soak" {
		return runSoak(args[1:], out)
	}
	if len(args) > 0 && args[0] == "ironic" {
		return runIronic(args[1:], out)
	}
	// Parsed before anything starts: "help" or a misspelt subcommand must
	// not start a whole benchmark run.
	fs := flag.NewFlagSet("anvil-bench", flag.ContinueOnError)
	self, _ := os.Executable()
	bin := fs.String("controller", filepath.Join(filepath.Dir(self), "anvil-controller"), "anvil-controller binary")
	conc := fs.Int("concurrency", 8, "concurrent keep-alive clients")
	big := fs.Int("big", 10000, "fleet size for the large RSS measurement (0 skips)")
	timeout := fs.Duration("timeout", 10*time.Minute, "abort the run after this long")
	if _, err := cli.Parse(fs, usage, args); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	dir, err := os.MkdirTemp("", "anvil-bench")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	proc, url, err := start(*bin, dir)
	if err != nil {
		return err
	}
	defer func() {
		_ = proc.Process.Signal(syscall.SIGTERM)
		_, _ = proc.Process.Wait()
	}()
	hc := &http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: *conc, MaxConnsPerHost: *conc}}
	b := &bench{c: client.New(url, hc), hc: hc, url: url, pid: proc.Process.Pid, out: out, conc: *conc}
	fmt.Fprintf(out, "anvil-bench: controller pid %d at %s, database %s/anvil.db (SQLite, synchronous=FULL), %d clients\n\n",
		b.pid, url, dir, *conc)
	return b.all(ctx, *big)
}

func (b *bench) report(name string, v string) { fmt.Fprintf(b.out, "%-52s %s\n", name, v) }

func (b *bench) all(ctx context.Context, big int) error {
	time.Sleep(500 * time.Millisecond)
	b.report("controller RSS, idle", b.rss())

	t := time.Now()
	ids, err := b.create(ctx, 1000, "n")
	if err != nil {
		return err
	}
	b.report("create 1000 nodes", fmtDur(time.Since(t)))
	b.report("controller RSS, 1000 nodes", b.rss())

	for _, path := range []string{"/v1/nodes", "/v1/nodes/detail"} {
		seq, err := b.latency(ctx, path, 1, 100)
		if err != nil {
			return err
		}
		par, err := b.latency(ctx, path, b.conc, 400)
		if err != nil {
			return err
		}
		b.report("GET "+path+" (1000 nodes), sequential p50/p99", seq)
		b.report(fmt.Sprintf("GET %s (1000 nodes), %d concurrent p50/p99", path, b.conc), par)
	}

	t = time.Now()
	if err := b.each(ctx, ids, func(id string) error { return b.c.DeleteNode(ctx, id) }); err != nil {
		return err
	}
	b.report("delete 1000 nodes", fmtDur(time.Since(t)))

	ids, err = b.create(ctx, 100, "life")
	if err != nil {
		return err
	}
	t = time.Now()
	for _, step := range []struct{ verb, state string }{{"manage", "manageable"}, {"provide", "available"}, {"active", "active"}} {
		if err := b.each(ctx, ids, func(id string) error { return b.c.Provision(ctx, id, step.verb, nil) }); err != nil {
			return fmt.Errorf("%s: %w", step.verb, err)
		}
		if err := b.waitAll(ctx, step.state, len(ids)); err != nil {
			return err
		}
	}
	b.report("100 nodes enroll -> manageable -> available -> active", fmtDur(time.Since(t)))

	if big > 0 {
		t = time.Now()
		if _, err := b.create(ctx, big, "big"); err != nil {
			return err
		}
		b.report(fmt.Sprintf("create %d more nodes", big), fmtDur(time.Since(t)))
		b.report(fmt.Sprintf("controller RSS, %d nodes", big+100), b.rss())
		seq, err := b.latency(ctx, "/v1/nodes/detail", 1, 20)
		if err != nil {
			return err
		}
		b.report(fmt.Sprintf("GET /v1/nodes/detail (first 1000 of %d) p50/p99", big+100), seq)
	}
	return nil
}

// each runs fn over ids with b.conc workers and returns the first error.
func (b *bench) each(ctx context.Context, ids []string, fn func(string) error) error {
	return forEach(ctx, b.conc, ids, fn)
}

// forEach runs fn over items with conc workers and returns the first error.
func forEach[T any](ctx context.Context, conc int, items []T, fn func(T) error) error {
	work := make(chan T)
	errs := make(chan error, conc)
	var wg sync.WaitGroup
	for i := 0; i < conc; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for it := range work {
				if err := fn(it); err != nil {
					errs <- fmt.Errorf("%v: %w", it, err)
					return
				}
			}
		}()
	}
	var err error
feed:
	for _, it := range items {
		select {
		case work <- it:
		case err = <-errs:
			break feed
		case <-ctx.Done():
			err = ctx.Err()
			break feed
		}
	}
	close(work)
	go func() { wg.Wait(); close(errs) }()
	for e := range errs {
		if err == nil {
			err = e
		}
	}
	return err
}

func (b *bench) create(ctx context.Context, n int, prefix string) ([]string, error) {
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("%s-%05d", prefix, i)
	}
	err := b.each(ctx, names, func(name string) error {
		_, err := b.c.CreateNode(ctx, map[string]any{"driver": "fake-hardware", "name": name,
			"properties":  map[string]any{"cpus": 32, "memory_mb": 262144, "local_gb": 960, "cpu_arch": "x86_64"},
			"driver_info": map[string]any{"ipmi_address": "127.0.0.1", "ipmi_username": "admin", "ipmi_password": "x"}})
		return err
	})
	return names, err
}

// latency issues total GETs of path with conc workers; returns p50/p99.
func (b *bench) latency(ctx context.Context, path string, conc, total int) (string, error) {
	var mu sync.Mutex
	var d []time.Duration
	idx := make([]string, total)
	saved := b.conc
	b.conc = conc
	defer func() { b.conc = saved }()
	err := b.each(ctx, idx, func(string) error {
		req, err := http.NewRequestWithContext(ctx, "GET", b.url+path, nil)
		if err != nil {
			return err
		}
		req.Header.Set("X-OpenStack-Ironic-API-Version", client.Version)
		t := time.Now()
		res, err := b.hc.Do(req)
		if err != nil {
			return err
		}
		_, err = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		el := time.Since(t)
		if res.StatusCode != 200 {
			return fmt.Errorf("GET %s: HTTP %d", path, res.StatusCode)
		}
		mu.Lock()
		d = append(d, el)
		mu.Unlock()
		return err
	})
	if err != nil {
		return "", err
	}
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	return fmt.Sprintf("%s / %s", fmtDur(d[len(d)/2]), fmtDur(d[(len(d)*99)/100])), nil
}

// waitAll polls a filtered list until want nodes show the state.
func (b *bench) waitAll(ctx context.Context, st string, want int) error {
	q := "provision_state=" + strings.ReplaceAll(st, " ", "%20") + "&fields=uuid,reservation"
	for {
		var page struct {
			Nodes []struct {
				Reservation *string `json:"reservation"`
			} `json:"nodes"`
		}
		if err := b.c.Do(ctx, "GET", "/v1/nodes?"+q, nil, &page); err != nil {
			return err
		}
		ready := 0
		for _, n := range page.Nodes {
			if n.Reservation == nil {
				ready++
			}
		}
		if ready >= want {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %d nodes in %s: %w", want, st, ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
}

func (b *bench) rss() string {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", b.pid))
	if err != nil {
		return "unknown: " + err.Error()
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(rest)
			kb, _ := strconv.Atoi(f[0])
			return fmt.Sprintf("%.1f MB", float64(kb)/1024)
		}
	}
	return "unknown"
}

func fmtDur(d time.Duration) string {
	switch {
	case d < time.Millisecond:
		return fmt.Sprintf("%.0f µs", float64(d.Microseconds()))
	case d < time.Second:
		return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000)
	}
	return fmt.Sprintf("%.2f s", d.Seconds())
}

// start runs the controller on a free loopback port, logging only
// warnings so logging cost does not distort the numbers.
func start(bin, dir string) (*exec.Cmd, string, error) {
	return startWith(bin, []string{"--database", "sqlite://" + filepath.Join(dir, "anvil.db"), "--log-level", "warn"}, os.Stderr, nil)
}

// startWith runs the controller with args on a free loopback port, its
// stderr to logs; prepare may adjust the command before it starts.
func startWith(bin string, args []string, logs io.Writer, prepare func(*exec.Cmd)) (*exec.Cmd, string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, "", err
	}
	addr := ln.Addr().String()
	ln.Close()
	cmd := exec.Command(bin, append([]string{"--listen", addr}, args...)...)
	cmd.Env = append(os.Environ(), "GOMAXPROCS=2")
	cmd.Stderr = logs
	if prepare != nil {
		prepare(cmd)
	}
	if err := cmd.Start(); err != nil {
		return nil, "", fmt.Errorf("start %s: %w", bin, err)
	}
	url := "http://" + addr
	for i := 0; i < 200; i++ {
		if res, err := http.Get(url + "/"); err == nil {
			res.Body.Close()
			return cmd, url, nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	return nil, "", errors.New("controller did not start within 10s")
}

// printReport ends a subcommand's run: the report as a table for people,
// then the same report as one line of JSON for scripts that compare runs.
func printReport(out io.Writer, rep interface{ print(io.Writer) }) error {
	rep.print(out)
	b, err := json.Marshal(rep)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(out, "%s\n", b)
	return err
}
