// Command anvil-agent is the in-band agent that runs from the anvil ramdisk:
// it brings the network up, looks its node up on the controller and
// heartbeats, running the commands the controller answers with.
//
// Configuration comes from the kernel command line (anvil.api=,
// anvil.token=, anvil.node=, anvil.interface=, anvil.devices=,
// anvil.debug); flags override it. In the ramdisk the agent never exits on
// an error, only on SIGTERM or SIGINT.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/anvil-metal/anvil/agent"
	"github.com/anvil-metal/anvil/hardware"
	"github.com/anvil-metal/anvil/hardware/erase"
	"github.com/anvil-metal/anvil/hardware/generic"
	"github.com/anvil-metal/anvil/protocol"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stderr))
}

// options are the flags after the kernel command line was merged in.
type options struct {
	api     string
	node    string
	token   string
	devices []string
	root    string
	macs    []string
	ifaces  []string
	logFile string
	cmdline string
	proc    string
	debug   bool
}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("anvil-agent", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.api, "api", "", "controller URL (default: anvil.api= from the kernel command line)")
	fs.StringVar(&o.node, "node", "", "node UUID to look up (default: anvil.node=)")
	devices := fs.String("devices", "", "comma-separated devices destructive steps may write, even outside the ramdisk (default: anvil.devices=)")
	fs.StringVar(&o.root, "root", "/", "root of /sys, /proc and /dev for hardware discovery")
	macs := fs.String("macs", "", "comma-separated MACs to look up with, instead of discovering interfaces (and without configuring the network)")
	fs.StringVar(&o.logFile, "log-file", "", "also write the log here, for collect_logs (default in the ramdisk: /var/log/anvil-agent.log)")
	fs.StringVar(&o.cmdline, "cmdline", "/proc/cmdline", "kernel command line to read defaults from")
	fs.StringVar(&o.proc, "proc", "/proc", "procfs used to detect the ramdisk and read the uptime")
	fs.BoolVar(&o.debug, "debug", false, "debug logging (default: anvil.debug)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })

	var boot agent.BootConfig
	if raw, err := os.ReadFile(o.cmdline); err == nil {
		boot = agent.ParseCmdline(string(raw))
	} else if set["cmdline"] {
		return o, fmt.Errorf("read kernel command line: %w", err)
	}
	if !set["api"] {
		o.api = boot.API
	}
	if !set["node"] {
		o.node = boot.Node
	}
	if !set["debug"] {
		o.debug = boot.Debug
	}
	o.devices = boot.Devices
	if set["devices"] {
		o.devices = hardware.ParseAllowList(*devices)
	}
	for _, m := range strings.Split(*macs, ",") {
		if m = strings.ToLower(strings.TrimSpace(m)); m != "" {
			o.macs = append(o.macs, m)
		}
	}
	o.token, o.ifaces = boot.Token, boot.Interfaces
	return o, nil
}

func run(ctx context.Context, args []string, stderr io.Writer) int {
	o, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "anvil-agent:", err)
		if env := hardware.DetectEnvironment("/proc", os.Getpid()); env.InRamdisk {
			stayUp(ctx, slog.New(slog.NewTextHandler(stderr, nil)), "bad arguments in the ramdisk's init configuration", err)
			return 0
		}
		return 2
	}
	env := hardware.DetectEnvironment(o.proc, os.Getpid())
	if o.logFile == "" && env.InRamdisk {
		o.logFile = "/var/log/anvil-agent.log"
	}
	log, closeLog := newLogger(o, env, stderr)
	defer closeLog()
	log.Info("anvil-agent", "version", agent.Version, "in_ramdisk", env.InRamdisk, "environment", env.Evidence,
		"api", o.api, "root", o.root, "devices", o.devices)

	// anvil.token= is the per-boot nonce the controller put in the node's
	// iPXE script; lookups carry it so only the machine that booted that
	// script can obtain the agent token.
	if env.InRamdisk {
		assembleArrays(log)
	}
	client, err := agent.NewClient(agent.ClientConfig{API: o.api, Version: agent.Version, NodeUUID: o.node, Nonce: o.token})
	if err != nil {
		if !env.InRamdisk {
			fmt.Fprintln(stderr, "anvil-agent:", err, "(set --api or anvil.api= on the kernel command line)")
			return 2
		}
		stayUp(ctx, log, "no usable controller URL; set anvil.api= on the kernel command line", err)
		return 0
	}

	guard := hardware.NewGuard(env, o.devices)
	log.Info("device guard", "mode", guard.String())
	root := o.root
	a := &agent.Agent{
		Controller: client,
		Hardware:   hardwareFor(root, guard, log),
		Network:    network(o, env, log),
		Inventory:  func(ctx context.Context) (protocol.Inventory, error) { return hardware.Inventory(ctx, root) },
		Logs:       agent.SystemLogs{LogFile: o.logFile, Kmsg: "/dev/kmsg"},
		Log:        log,
		Version:    agent.Version,
	}
	if env.InRamdisk {
		a.Power = agent.SystemPower{}
	} else {
		log.Warn("power_off and reboot commands will fail: not running in the agent ramdisk", "environment", env.Evidence)
	}
	if up, err := agent.ReadUptime(filepath.Join(o.proc, "uptime")); err != nil {
		log.Warn("boot timings without kernel uptime", "err", err)
	} else {
		a.KernelUptime = up
	}
	// One boot id per process, kept across restarts of the loop.
	a.BootID = agent.NewBootID()
	runForever(ctx, a, log)
	log.Info("shutting down")
	return 0
}

// stayUp logs a configuration error every minute until ctx is done.
// Exiting in the ramdisk leaves a dead machine (init may even panic the
// kernel); staying up keeps the console and the log readable.
func stayUp(ctx context.Context, log *slog.Logger, msg string, err error) {
	for {
		log.Error(msg, "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Minute):
		}
	}
}

// runForever runs the agent, restarting it (same boot id) if it panics: an
// agent bug must not leave the machine unmanageable.
func runForever(ctx context.Context, a *agent.Agent, log *slog.Logger) {
	for ctx.Err() == nil {
		func() {
			defer func() {
				if r := recover(); r != nil {
					log.Error("agent panicked; restarting", "panic", r)
				}
			}()
			if err := a.Run(ctx); err != nil {
				log.Error("agent stopped", "err", err)
			}
		}()
		select {
		case <-ctx.Done():
		case <-time.After(5 * time.Second):
		}
	}
}

func newLogger(o options, env hardware.Environment, stderr io.Writer) (*slog.Logger, func()) {
	level := slog.LevelInfo
	if o.debug {
		level = slog.LevelDebug
	}
	w, closeFn := stderr, func() {}
	if o.logFile != "" {
		if err := os.MkdirAll(filepath.Dir(o.logFile), 0o755); err == nil {
			if f, err := os.OpenFile(o.logFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644); err == nil {
				w, closeFn = io.MultiWriter(stderr, f), func() { f.Close() }
			} else {
				fmt.Fprintln(stderr, "anvil-agent: log file:", err)
			}
		}
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: level})), closeFn
}

func network(o options, env hardware.Environment, log *slog.Logger) agent.Network {
	if len(o.macs) > 0 {
		return agent.StaticMACs(o.macs)
	}
	n := &agent.Interfaces{Links: agent.SysfsLinks{Root: o.root}, Hints: o.ifaces, Log: log}
	if env.InRamdisk {
		n.DHCP = agent.DHCPv4Client{Log: log}
	}
	return n
}

// hardwareFor builds the dispatcher for the node a lookup found, with the
// controller's erase policy and the node's root device hints.
func hardwareFor(root string, guard *hardware.Guard, log *slog.Logger) agent.HardwareFunc {
	return func(ctx context.Context, lr *protocol.LookupResponse) (agent.Hardware, error) {
		cfg := generic.Config{Root: root, Guard: guard, Logger: log, Policy: erasePolicy(lr.Config.Erase)}
		if hints, ok := lr.Node.Properties["root_device"].(map[string]any); ok {
			cfg.RootDeviceHints = hints
		}
		d, err := hardware.NewDispatcher(ctx, generic.New(cfg))
		if err != nil {
			return nil, fmt.Errorf("hardware managers: %w", err)
		}
		return d, nil
	}
}

// erasePolicy maps the controller's erase knobs onto the erase package's
// policy; nil keeps IPA's defaults.
func erasePolicy(p *protocol.ErasePolicy) *erase.Policy {
	if p == nil {
		return nil
	}
	pol := erase.DefaultPolicy()
	if p.Concurrency > 0 {
		pol.Concurrency = p.Concurrency
	}
	if p.Iterations >= 0 {
		pol.Iterations = p.Iterations
	}
	pol.Zeroize = p.Zeroize
	pol.SkipReadOnly = p.SkipReadOnly
	pol.AllowDiscard = p.AllowDiscard
	pol.EnableNVMeSecureErase = p.EnableNVMeFormat
	pol.EnableATASecureErase = p.EnableATAErase
	pol.ContinueIfSecureEraseFailed = p.ContinueOnSecureErr
	return &pol
}

// assembleArrays starts the software RAID arrays found on the disks. A
// ramdisk has no udev to do it, and without it an array built in an
// earlier boot would be invisible to the inventory and to
// delete_configuration. Best effort: no arrays is the common case.
func assembleArrays(log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "mdadm", "--assemble", "--scan", "--run").CombinedOutput()
	log.Info("assembled software RAID arrays found on the disks", "output", strings.TrimSpace(string(out)), "err", err)
}
