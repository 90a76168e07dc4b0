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
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/anvil-metal/anvil/agent"
	"github.com/anvil-metal/anvil/hardware"
	"github.com/anvil-metal/anvil/hardware/erase"
	"github.com/anvil-metal/anvil/hardware/generic"
	"github.com/anvil-metal/anvil/hardware/kmod"
	"github.com/anvil-metal/anvil/internal/cli"
	"github.com/anvil-metal/anvil/internal/textlist"
	"github.com/anvil-metal/anvil/protocol"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	// The image links /sbin/modprobe and /bin/coldplug to this binary.
	switch filepath.Base(os.Args[0]) {
	case "modprobe":
		os.Exit(modprobe(os.Args[1:], os.Stderr))
	case "coldplug":
		coldplug(ctx, slog.New(slog.NewTextHandler(os.Stderr, nil)))
		return
	}
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

const usage = `usage: anvil-agent [flags]

The in-band agent of the anvil ramdisk: it brings the network up, looks its
node up on the controller (or, in discovery mode, reports the machine for
enrolment) and heartbeats, running the commands the controller answers
with. Its settings come from the kernel command line (anvil.api=,
anvil.token=, anvil.node=, anvil.interface=, anvil.devices=, anvil.debug,
...); flags override them. Outside the ramdisk, destructive steps write only
to the devices of --devices.
`

// Defaults of --proc and --root: only these describe the machine the agent
// runs on, so only with them may it act as the ramdisk's agent.
const (
	systemProc = "/proc"
	systemRoot = "/"
)

// options are the flags after the kernel command line was merged in.
type options struct {
	api     string
	apiPin  string // the controller certificate's fingerprint
	node    string
	token   string
	devices []string
	// devicesSet: --devices or anvil.devices= was given, even empty. An
	// explicitly empty list denies every device; only an absent one leaves
	// the ramdisk free to erase all disks.
	devicesSet bool
	root       string
	macs       []string
	ifaces     []string
	logFile    string
	cmdline    string
	bootConfig string
	proc       string
	debug      bool
	// discovery: anvil.discovery or --discovery: report the machine for
	// enrolment instead of looking a node up.
	discovery bool
	lldpWait  time.Duration
	// ipa: booted by a stock Ironic (ipa-api-url= without anvil.api=, and
	// no --api): speak ironic-python-agent's protocol (agent/ipa).
	ipa     bool
	ipaArgs agent.IPAArgs
	// From the kernel command line only: a static address, a VLAN, the
	// boot interface, and parameters that did not parse.
	static      *agent.StaticIP
	vlan        *agent.VLAN
	bond        *agent.Bond
	netNotes    []string
	bootIF      string
	netProblems []string
}

func parseFlags(args []string) (options, error) {
	var o options
	fs := flag.NewFlagSet("anvil-agent", flag.ContinueOnError)
	fs.StringVar(&o.api, "api", "", "controller URL (default: anvil.api= from the kernel command line)")
	fs.StringVar(&o.apiPin, "api-fingerprint", "", "accept only a controller whose TLS certificate has this SHA-256 fingerprint, sha256:<hex> (default: anvil.api_fingerprint=)")
	fs.StringVar(&o.node, "node", "", "node UUID to look up (default: anvil.node=)")
	devices := fs.String("devices", "", "comma-separated devices destructive steps may write, even outside the ramdisk (default: anvil.devices=)")
	fs.StringVar(&o.root, "root", systemRoot, "root of /sys, /proc and /dev for hardware discovery (another root never gets ramdisk powers)")
	macs := fs.String("macs", "", "comma-separated MACs to look up with, instead of discovering interfaces (and without configuring the network)")
	fs.StringVar(&o.logFile, "log-file", "", "also write the log here, for collect_logs (default in the ramdisk: /var/log/anvil-agent.log)")
	fs.StringVar(&o.cmdline, "cmdline", "/proc/cmdline", "kernel command line to read defaults from")
	fs.StringVar(&o.bootConfig, "boot-config", "/"+protocol.BootConfigPath, "per-node boot config a virtual-media ISO puts into the ramdisk (read if present)")
	fs.StringVar(&o.proc, "proc", systemProc, "procfs used to detect the ramdisk and read the uptime (another procfs never gets ramdisk powers)")
	fs.BoolVar(&o.debug, "debug", false, "debug logging (default: anvil.debug)")
	fs.BoolVar(&o.discovery, "discovery", false, "discovery mode: report this machine's inventory for enrolment as a new node (default: anvil.discovery)")
	fs.DurationVar(&o.lldpWait, "lldp-wait", 0, "how long to listen for the switches' LLDP frames, 0 not at all (default: anvil.lldp_wait= seconds; else 30s in discovery mode, 0 otherwise)")
	if _, err := cli.Parse(fs, usage, args); err != nil {
		return o, err
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })

	raw, err := os.ReadFile(o.cmdline)
	if err != nil && set["cmdline"] {
		return o, fmt.Errorf("read kernel command line: %w", err)
	}
	bootConfig, err := os.ReadFile(o.bootConfig)
	if err != nil && set["boot-config"] {
		return o, fmt.Errorf("read boot config: %w", err)
	}
	boot := agent.ParseBoot(string(raw), bootConfig)
	if !set["api"] {
		o.api = boot.API
	}
	if !set["api-fingerprint"] {
		o.apiPin = boot.Fingerprint
	}
	if !set["node"] {
		o.node = boot.Node
	}
	if !set["discovery"] {
		o.discovery = boot.Discovery
	}
	if !set["debug"] {
		o.debug = boot.Debug || boot.IPA.Debug
	}
	switch {
	case set["lldp-wait"]:
	case boot.LLDPWaitSet:
		o.lldpWait = boot.LLDPWait
	case o.discovery:
		o.lldpWait = defaultLLDPWait
	}
	o.ipa, o.ipaArgs = boot.IPAMode() && !set["api"], boot.IPA
	o.devices, o.devicesSet = boot.Devices, boot.DevicesSet
	if set["devices"] {
		o.devices, o.devicesSet = hardware.ParseAllowList(*devices), true
	}
	for _, m := range textlist.Split(*macs, ",") {
		o.macs = append(o.macs, strings.ToLower(m))
	}
	o.token, o.ifaces = boot.Token, boot.Interfaces
	o.static, o.vlan, o.bond, o.bootIF, o.netProblems, o.netNotes = boot.Static, boot.VLAN, boot.Bond, boot.BootIF, boot.Problems, boot.NetNotes
	return o, nil
}

// allowList is the device allow-list for the guard: nil when none was
// given, non-nil (possibly empty: deny all) when one was.
func (o options) allowList() []string {
	if o.devicesSet && o.devices == nil {
		return []string{}
	}
	return o.devices
}

// ramdiskPowers decides whether the agent may act as the ramdisk's agent:
// erase any disk without an allow-list, power the machine off, configure
// the network, assemble RAID arrays. DetectEnvironment only reads the
// --proc it is given, so a fixture procfs (testdata/.../uroot-initramfs)
// "proves" a ramdisk on any workstation, and with a fixture --root the
// disk names it finds still open the host's /dev. Only the system's own
// /proc and / are evidence; the reason is for the log and refusals.
func ramdiskPowers(o options, env hardware.Environment) (bool, string) {
	if !env.InRamdisk {
		return false, "not running in the agent ramdisk (" + env.Evidence + ")"
	}
	if filepath.Clean(o.proc) != systemProc || filepath.Clean(o.root) != systemRoot {
		return false, fmt.Sprintf("ramdisk evidence (%s) comes from --proc %s and --root %s, not the system's %s and %s, so it is not trusted",
			env.Evidence, o.proc, o.root, systemProc, systemRoot)
	}
	return true, ""
}

// deviceGuard builds the guard destructive steps write through. Without
// ramdisk powers the detected environment counts as "not the ramdisk", so
// only an explicit allow-list lets anything be written.
func deviceGuard(o options, env hardware.Environment, powers bool, why string) *hardware.Guard {
	if !powers && env.InRamdisk {
		env = hardware.Environment{Evidence: why}
	}
	return hardware.NewGuard(env, o.allowList())
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o, err := parseFlags(args)
	if err != nil {
		code := cli.Exit(stdout, stderr, "anvil-agent", err)
		if env := hardware.DetectEnvironment("/proc", os.Getpid()); code != 0 && env.InRamdisk {
			stayUp(ctx, slog.New(slog.NewTextHandler(stderr, nil)), "bad arguments in the ramdisk's init configuration", err)
			return 0
		}
		return code
	}
	env := hardware.DetectEnvironment(o.proc, os.Getpid())
	powers, why := ramdiskPowers(o, env)
	if o.logFile == "" && powers {
		o.logFile = "/var/log/anvil-agent.log"
	}
	if powers {
		stderr = withConsoles(ctx, stderr)
	}
	log, closeLog := newLogger(o, env, stderr)
	defer closeLog()
	log.Info("anvil-agent", "version", agent.Version, "in_ramdisk", env.InRamdisk, "ramdisk_powers", powers,
		"environment", env.Evidence, "api", o.api, "proc", o.proc, "root", o.root, "devices", o.allowList())
	if env.InRamdisk && !powers {
		log.Warn("ramdisk detected but not trusted: destructive steps only on the device allow-list, no power actions, no network configuration, no RAID assembly",
			"reason", why)
	}

	gates := openGates()
	if powers {
		gates = startBoot(ctx, log)
	}
	// The guard resolves its allow-list's names (/dev/disk/by-id/...)
	// when made, so it is made once the disks' drivers are loaded; every
	// user of it waits for that anyway.
	var guard *hardware.Guard
	// mdadm --assemble writes superblocks and may start a resync on every
	// member it finds, so it runs only where every disk is ours to write.
	// It runs beside the network bring-up, once the disks are there; the
	// inventory and the step dispatcher wait for it, as both must see the
	// arrays.
	arrays := make(chan struct{})
	go func() {
		defer close(arrays)
		if wait(ctx, gates.disks) != nil {
			return
		}
		guard = deviceGuard(o, env, powers, why)
		log.Info("device guard", "mode", guard.String())
		if powers && o.allowList() == nil {
			assembleArrays(ctx, log)
		} else if powers {
			log.Info("not assembling software RAID arrays: mdadm would write to disks outside the device allow-list",
				"devices", o.allowList())
		}
	}()
	// disksReady returns the guard once the disks and arrays are there.
	disksReady := func(ctx context.Context) (*hardware.Guard, error) {
		if err := wait(ctx, arrays); err != nil {
			return nil, err
		}
		return guard, nil
	}

	if o.ipa {
		g, err := disksReady(ctx)
		if err != nil {
			return 0
		}
		return runIPA(ctx, o, env, powers, why, g, log, stderr)
	}

	// anvil.token= is the per-boot nonce the controller put in the node's
	// iPXE script; lookups carry it so only the machine that booted that
	// script can obtain the agent token.
	client, err := agent.NewClient(agent.ClientConfig{API: o.api, Version: agent.Version, NodeUUID: o.node, Nonce: o.token,
		Fingerprint: o.apiPin})
	if err != nil {
		// Staying up harms nothing, so the detected environment decides
		// here, ramdisk powers or not.
		if !env.InRamdisk {
			fmt.Fprintln(stderr, "anvil-agent:", err, "(set --api or anvil.api= on the kernel command line)")
			return 2
		}
		stayUp(ctx, log, "no usable controller URL; set anvil.api= (and with https, anvil.api_fingerprint=) on the kernel command line", err)
		return 0
	}

	root := o.root
	// The BMC and the switches are read from this machine, never beside
	// a fixture root.
	var ib *inband
	if filepath.Clean(root) == systemRoot {
		ib = startInband(ctx, log, gates.network, o.lldpWait, powers)
	}
	a := &agent.Agent{
		Controller: client,
		Hardware:   hardwareFor(root, log, disksReady),
		Network:    gatedNetwork{Network: network(o, powers, log), gate: gates.network},
		Inventory: func(ctx context.Context) (protocol.Inventory, error) {
			g, err := disksReady(ctx)
			if err != nil {
				return protocol.Inventory{}, err
			}
			inv, err := hardware.Inventory(ctx, root)
			ib.fill(ctx, &inv)
			return g.ScopeInventory(inv), err
		},
		Logs:     agent.SystemLogs{LogFile: o.logFile, Kmsg: "/dev/kmsg"},
		Log:      log,
		Version:  agent.Version,
		Discover: o.discovery,
	}
	if powers {
		a.Power = agent.SystemPower{}
	} else {
		log.Warn("power_off and reboot commands will fail", "reason", why)
	}
	if up, err := agent.ReadUptime(filepath.Join(o.proc, "uptime")); err != nil {
		log.Warn("boot timings without kernel uptime", "err", err)
	} else {
		a.KernelUptime = up
	}
	// One boot id per process, kept across restarts of the loop.
	a.BootID = agent.NewBootID()
	runForever(ctx, a.Run, log)
	log.Info("shutting down")
	return 0
}

// modprobe is the kernel's module loader in the ramdisk (see kmod.Modprobe):
// exit status 1 on failure, quiet with -q like kmod's.
func modprobe(args []string, stderr io.Writer) int {
	if err := kmod.Modprobe(args); err != nil {
		if !slices.Contains(args, "-q") {
			fmt.Fprintln(stderr, "modprobe:", err)
		}
		return 1
	}
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
func runForever(ctx context.Context, run func(context.Context) error, log *slog.Logger) {
	for ctx.Err() == nil {
		func() {
			defer func() {
				if r := recover(); r != nil {
					log.Error("agent panicked; restarting", "panic", r)
				}
			}()
			if err := run(ctx); err != nil {
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
	return cli.Logger(w, o.debug), closeFn
}

// withConsoles adds the other consoles to w (which reaches only
// /dev/console): the agent's log goes to the other kernel consoles (VGA),
// and the kernel log plus the agent's to serial ports that exist but carry
// no kernel console (ttyS1 when the kernel prints on ttyS0), so a BMC's
// serial-over-LAN shows the boot on either port. Every extra console is
// written asynchronously: a stalled port never blocks the agent.
func withConsoles(ctx context.Context, w io.Writer) io.Writer {
	raw, err := os.ReadFile("/proc/consoles")
	if err != nil {
		return w
	}
	c := agent.FindConsoles(string(raw), "/")
	ws := []io.Writer{w}
	open := func(name string) *os.File {
		f, err := os.OpenFile("/dev/"+name, os.O_WRONLY|syscall.O_NOCTTY, 0)
		if err != nil {
			fmt.Fprintln(w, "anvil-agent: console", name, err)
			return nil
		}
		return f // open for the life of the process
	}
	for _, name := range c.Log {
		if f := open(name); f != nil {
			ws = append(ws, agent.NewAsyncWriter(f, 1024))
		}
	}
	for _, name := range c.Mirror {
		f := open(name)
		if f == nil {
			continue
		}
		ws = append(ws, agent.NewAsyncWriter(f, 1024))
		go func() { // may block on the port: its own goroutine, nothing waits for it
			if err := agent.CopyKmsg(ctx, "/dev/kmsg", f); err != nil {
				fmt.Fprintln(w, "anvil-agent: kernel log to", name, err)
			}
		}()
	}
	return io.MultiWriter(ws...)
}

// network finds the MACs to look up with; DHCP only with ramdisk powers, so
// a workstation's network is never reconfigured.
func network(o options, powers bool, log *slog.Logger) agent.Network {
	if len(o.macs) > 0 {
		return agent.StaticMACs(o.macs)
	}
	n := &agent.Interfaces{Links: agent.SysfsLinks{Root: o.root}, Hints: o.ifaces, Log: log,
		Static: o.static, VLAN: o.vlan, Bond: o.bond, BootIF: o.bootIF}
	if powers {
		n.DHCP = &agent.DHCPv4Client{Log: log}
		n.Setup = agent.NetlinkSetup{}
	}
	for _, p := range o.netProblems {
		log.Warn("kernel command line parameter ignored", "problem", p)
	}
	for _, note := range o.netNotes {
		log.Info("network_data", "note", note)
	}
	return n
}

// hardwareFor builds the dispatcher for the node a lookup found, with the
// controller's erase policy and the node's root device hints.
func hardwareFor(root string, log *slog.Logger, ready func(context.Context) (*hardware.Guard, error)) agent.HardwareFunc {
	return func(ctx context.Context, lr *protocol.LookupResponse) (agent.Hardware, error) {
		guard, err := ready(ctx)
		if err != nil {
			return nil, fmt.Errorf("hardware managers: %w", err)
		}
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
// policy; nil, and every knob the controller left out, keeps IPA's
// defaults, so a partial policy cannot turn secure erase or the zero pass
// off by omission.
func erasePolicy(p *protocol.ErasePolicy) *erase.Policy {
	if p == nil {
		return nil
	}
	pol := erase.DefaultPolicy()
	if p.Concurrency != nil && *p.Concurrency > 0 {
		pol.Concurrency = *p.Concurrency
	}
	if p.Iterations != nil && *p.Iterations >= 0 {
		pol.Iterations = *p.Iterations
	}
	setIfSent(&pol.Zeroize, p.Zeroize)
	setIfSent(&pol.SkipReadOnly, p.SkipReadOnly)
	setIfSent(&pol.AllowDiscard, p.AllowDiscard)
	setIfSent(&pol.EnableNVMeSecureErase, p.EnableNVMeFormat)
	setIfSent(&pol.EnableATASecureErase, p.EnableATAErase)
	setIfSent(&pol.ContinueIfSecureEraseFailed, p.ContinueOnSecureErr)
	return &pol
}

func setIfSent(dst, sent *bool) {
	if sent != nil {
		*dst = *sent
	}
}

// assembleArrays starts the software RAID arrays found on the disks. A
// ramdisk has no udev to do it, and without it an array built in an
// earlier boot would be invisible to the inventory and to
// delete_configuration. Best effort: no arrays is the common case.
// ctx is the run's, so SIGTERM stops a hanging mdadm too.
func assembleArrays(ctx context.Context, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "mdadm", "--assemble", "--scan", "--run").CombinedOutput()
	log.InfoContext(ctx, "assembled software RAID arrays found on the disks", "output", strings.TrimSpace(string(out)), "err", err)
}
