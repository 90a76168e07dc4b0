// Command anvil-demo starts anvil-controller on its embedded SQLite store
// and walks one node through its lifecycle (manage, inspect, provide, deploy,
// undeploy), printing every transition with timings and a summary table.
// It stops the controller when done and leaves nothing running.
//
// Today the node is a fake-hardware node whose agent is simulated by the
// controller (--simulate-agents): the in-band flow is real (lookup, token,
// heartbeats, steps with progress, over HTTP) but no disk is touched. The
// virtual-machine demo (QEMU node behind anvil-vbmc, real agent ramdisk)
// replaces it as those parts land.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/anvil-metal/anvil/controller/client"
	"github.com/anvil-metal/anvil/internal/cli"
)

func main() {
	// QEMU's guestfwd runs this binary as a one-connection relay.
	if len(os.Args) == 2 {
		if addr, ok := strings.CutPrefix(os.Args[1], relayFlag); ok {
			os.Exit(relay(addr))
		}
	}
	os.Exit(cli.Exit(os.Stdout, os.Stderr, "anvil-demo", run(os.Args[1:], os.Stdout)))
}

const usage = `usage: anvil-demo [flags]

Starts anvil-controller on its embedded SQLite store and walks one node
through its lifecycle (manage, inspect, provide, deploy, undeploy), printing
every transition with timings and a summary table; it stops everything it
started. The node is fake hardware whose agent the controller simulates
(seconds), or with -vm a QEMU machine behind anvil-vbmc (Redfish) booting
the real agent ramdisk of -image (make image). -dir is recreated.
`

func run(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("anvil-demo", flag.ContinueOnError)
	self, _ := os.Executable()
	controllerBin := fs.String("controller", filepath.Join(filepath.Dir(self), "anvil-controller"), "anvil-controller binary")
	workDir := fs.String("dir", "out/demo", "directory for the demo's database and logs (recreated)")
	timeout := fs.Duration("timeout", 10*time.Minute, "give up after this long")
	vm := fs.Bool("vm", false, "provision a QEMU virtual machine behind anvil-vbmc (Redfish) with the real agent ramdisk")
	imageDir := fs.String("image", "out/image", "agent ramdisk (make image) for -vm")
	// Parsed before -dir is removed: help or a typo must not delete it.
	if _, err := cli.Parse(fs, usage, args); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()

	if err := os.RemoveAll(*workDir); err != nil {
		return err
	}
	if err := os.MkdirAll(*workDir, 0o755); err != nil {
		return err
	}
	if *vm {
		abs, err := filepath.Abs(*workDir)
		if err != nil {
			return err
		}
		img, err := filepath.Abs(*imageDir)
		if err != nil {
			return err
		}
		return runVM(ctx, out, *controllerBin, img, abs)
	}
	ctl, url, err := startController(*controllerBin, *workDir, "--simulate-agents", "--heartbeat-interval", "200ms")
	if err != nil {
		return err
	}
	defer ctl.stop()
	fmt.Fprintf(out, "anvil-controller running at %s (database %s/anvil.db, log %s/controller.log)\n\n", url, *workDir, *workDir)
	return walk(ctx, client.New(url, nil), out, simulatedNode())
}

type phase struct {
	verb, from, to string
	took           time.Duration
	steps          []string
}

// demoNode is what the demo enrols and how it checks each phase.
type demoNode struct {
	fields map[string]any // POST /v1/nodes body
	mac    string
	about  string // how the node is made, for the operator
	// after runs when a verb finished (e.g. to check the disks from the host)
	after func(ctx context.Context, verb string, out io.Writer) error
}

// simulatedNode is a fake-hardware node whose agent the controller simulates.
func simulatedNode() demoNode {
	return demoNode{fields: map[string]any{"driver": "fake-hardware", "name": "demo-node",
		"deploy_interface": "direct", "inspect_interface": "agent",
		"instance_info": map[string]any{"image_source": "http://127.0.0.1:8080/demo.raw",
			"image_checksum": "sha256:5f70bf18a086007016e948b04aed3b82103a36bea41755b6cddfaf10ace3c6ef"}},
		mac: "52:54:00:de:00:01", about: "its agent is simulated by the controller"}
}

func walk(ctx context.Context, c *client.Client, out io.Writer, dn demoNode) error {
	start := time.Now()
	n, err := c.CreateNode(ctx, dn.fields)
	if err != nil {
		return fmt.Errorf("create node: %w", err)
	}
	if err := c.CreatePort(ctx, n.UUID, dn.mac); err != nil {
		return fmt.Errorf("create port: %w", err)
	}
	fmt.Fprintf(out, "[%7.3fs] created node demo-node (%s) in %s, port %s; %s\n",
		time.Since(start).Seconds(), n.UUID, n.ProvisionState, dn.mac, dn.about)

	var phases []phase
	seen := 0
	for _, p := range []struct{ verb, want string }{
		{"manage", "manageable"}, {"inspect", "manageable"}, {"provide", "available"},
		{"active", "active"}, {"deleted", "available"},
	} {
		before, err := c.GetNode(ctx, "demo-node")
		if err != nil {
			return err
		}
		ph := phase{verb: p.verb, from: before.ProvisionState}
		t0 := time.Now()
		if err := c.Provision(ctx, "demo-node", p.verb, nil); err != nil {
			return fmt.Errorf("%s: %w", p.verb, err)
		}
		last := ""
		if _, err := c.WaitForState(ctx, "demo-node", p.want, 100*time.Millisecond, func(n *client.Node) {
			if line := progressLine(n); line != last {
				fmt.Fprintf(out, "[%7.3fs] %-8s   %s\n", time.Since(start).Seconds(), p.verb, line)
				last = line
			}
		}); err != nil {
			return fmt.Errorf("%s: %w", p.verb, err)
		}
		// The history has every transition and step, even those faster
		// than any polling interval.
		events, err := c.History(ctx, "demo-node")
		if err != nil {
			return err
		}
		for _, e := range events[seen:] {
			// "clean step deploy.erase_devices finished[: what the agent did]"
			if kind, rest, ok := strings.Cut(e.Event, " step "); ok && (kind == "clean" || kind == "deploy") {
				if step, after, ok := strings.Cut(rest, " finished"); ok && (after == "" || strings.HasPrefix(after, ":")) {
					ph.steps = append(ph.steps, step)
				}
			}
		}
		seen = len(events)
		ph.to, ph.took = p.want, time.Since(t0)
		phases = append(phases, ph)
		if dn.after != nil {
			if err := dn.after(ctx, p.verb, out); err != nil {
				return fmt.Errorf("after %s: %w", p.verb, err)
			}
		}
	}

	fmt.Fprintf(out, "\nSummary (%s; total %.3fs)\n", dn.about, time.Since(start).Seconds())
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "VERB\tFROM\tTO\tTIME\tSTEPS")
	for _, p := range phases {
		steps := strings.Join(p.steps, ", ")
		if steps == "" {
			steps = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%.3fs\t%s\n", p.verb, p.from, p.to, p.took.Seconds(), steps)
	}
	return tw.Flush()
}

// progressLine shows the node's state, current step and agent progress.
func progressLine(n *client.Node) string {
	line := n.ProvisionState
	if step := client.CurrentStep(n); step != "" {
		line += "  step " + step
		if st, ok := n.DriverInternalInfo["agent_command_status"].(map[string]any); ok && st["state"] == "RUNNING" {
			if p, ok := st["progress"].(map[string]any); ok {
				line += fmt.Sprintf(" %3.0f%%", p["percent"])
			}
		}
	}
	return line
}

// controllerProc is the anvil-controller child process.
type controllerProc struct {
	cmd  *exec.Cmd
	done chan struct{}
	log  *os.File
}

func (p *controllerProc) stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(15 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
	p.log.Close()
}

var listenRE = regexp.MustCompile(`anvil-controller listening"? addr=(\S+)`)

func startController(bin, dir string, extra ...string) (*controllerProc, string, error) {
	logf, err := os.Create(filepath.Join(dir, "controller.log"))
	if err != nil {
		return nil, "", err
	}
	cmd := exec.Command(bin, append([]string{"--listen", "127.0.0.1:0", "--database", "sqlite://" + filepath.Join(dir, "anvil.db")}, extra...)...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		logf.Close()
		return nil, "", err
	}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, "", fmt.Errorf("start %s: %w (run `make build` first)", bin, err)
	}
	p := &controllerProc{cmd: cmd, done: make(chan struct{}), log: logf}
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			fmt.Fprintln(logf, sc.Text())
			if m := listenRE.FindStringSubmatch(sc.Text()); m != nil {
				select {
				case addr <- m[1]:
				default:
				}
			}
		}
	}()
	go func() { _ = cmd.Wait(); close(p.done) }()
	select {
	case a := <-addr:
		return p, "http://" + a, nil
	case <-p.done:
		logf.Close()
		return nil, "", errors.New("anvil-controller exited at start; see " + logf.Name())
	case <-time.After(20 * time.Second):
		p.stop()
		return nil, "", errors.New("anvil-controller did not start within 20s; see " + logf.Name())
	}
}
