// Package agent is the in-band half of anvil: the program that runs from the
// ramdisk on the server, finds its node (lookup), then heartbeats; the
// heartbeat replies carry commands, which the agent runs one at a time in the
// background while it keeps heartbeating their status.
//
// The loop follows Tinkerbell's agent (read, execute, report) with two rules
// from operators' bug reports: the agent never exits on an error (it backs
// off and retries, with jitter, forever), and a command's final result is
// repeated until the controller acknowledges it.
package agent

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/anvil-metal/anvil/hardware"
	"github.com/anvil-metal/anvil/protocol"
)

// Version of the agent, sent in heartbeats and the User-Agent.
const Version = "0.1.0"

// recheckNetworkAfter is how many lookups in a row may find the controller
// unreachable before the agent runs its network bring-up again: a NIC
// whose DHCP failed at boot (switch port still blocking) gets another
// chance, and the MAC list is refreshed.
const recheckNetworkAfter = 5

// minInterval keeps a controller bug (a tiny heartbeat_interval) from
// turning the agent into a busy loop against it.
const minInterval = 10 * time.Millisecond

// Controller is the agent's view of the controller. Implementations return
// errors matching ErrNotFound, ErrUnauthorized, ErrConflict, ErrBadRequest
// and ErrUnreachable (errors.Is) for the answers the loop handles
// differently.
type Controller interface {
	// Lookup finds the node expecting an agent with these MACs and gets a
	// fresh agent token for this boot.
	Lookup(ctx context.Context, macs []string, bootID string) (*protocol.LookupResponse, error)
	// Heartbeat reports the agent's state and returns the next command.
	Heartbeat(ctx context.Context, nodeUUID string, hb *protocol.Heartbeat) (*protocol.HeartbeatResponse, error)
}

// Hardware is what the agent needs of the step dispatcher;
// *hardware.Dispatcher implements it.
type Hardware interface {
	Steps(ctx context.Context) hardware.Catalogue
	Fingerprint(ctx context.Context) string
	Managers() []hardware.ManagerInfo
	Run(ctx context.Context, kind hardware.Kind, name string, args map[string]any, progress hardware.ProgressFunc) (any, error)
}

// HardwareFunc builds the Hardware for the node a lookup found. It is a
// function rather than a value because the lookup carries configuration the
// managers need (the erase policy, root device hints).
type HardwareFunc func(ctx context.Context, lookup *protocol.LookupResponse) (Hardware, error)

// StaticHardware is a HardwareFunc that ignores the lookup.
func StaticHardware(h Hardware) HardwareFunc {
	return func(context.Context, *protocol.LookupResponse) (Hardware, error) { return h, nil }
}

// InventoryFunc describes the machine (hardware.Inventory with a root).
type InventoryFunc func(ctx context.Context) (protocol.Inventory, error)

// Network brings networking up and returns the MACs to look up with.
type Network interface {
	Up(ctx context.Context) ([]string, error)
}

// StaticMACs is a Network that configures nothing and reports fixed MACs
// (--macs, tests).
type StaticMACs []string

// Up implements Network.
func (m StaticMACs) Up(context.Context) ([]string, error) {
	if len(m) == 0 {
		return nil, errors.New("no MAC addresses given")
	}
	return m, nil
}

// Power switches the machine off or restarts it. The real one does not
// return on success.
type Power interface {
	PowerOff(ctx context.Context) error
	Reboot(ctx context.Context) error
}

// LogCollector returns the agent's logs as a gzip-compressed tar.
type LogCollector interface {
	Collect(ctx context.Context) ([]byte, error)
}

// Clock is time, replaceable in tests.
type Clock interface {
	Now() time.Time
	After(d time.Duration) <-chan time.Time
}

// SystemClock is the real Clock.
type SystemClock struct{}

// Now implements Clock.
func (SystemClock) Now() time.Time { return time.Now() }

// After implements Clock.
func (SystemClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// Agent is the agent program's loop. Controller, Hardware and Network are
// required; the others have defaults or make their commands fail cleanly.
type Agent struct {
	Controller Controller
	Hardware   HardwareFunc
	Network    Network
	Inventory  InventoryFunc // inventory command; nil fails it
	Logs       LogCollector  // collect_logs command; nil fails it
	Power      Power         // power_off/reboot commands; nil fails them
	Clock      Clock         // default SystemClock
	Log        *slog.Logger  // default discards

	// Version is reported in heartbeats; default Version.
	Version string
	// BootID identifies this boot; default a new random id. In the
	// ramdisk a process start is a boot.
	BootID string
	// KernelUptime is the time from kernel start to the agent's start
	// (/proc/uptime read at start), the origin of the boot timings.
	KernelUptime time.Duration
	// Backoff bounds retries of network setup, lookup and heartbeats.
	Backoff Backoff
	// FollowUp is the delay of the heartbeat that follows one which
	// delivered news (a result the controller acknowledged, or the
	// catalogue): the controller decides the next command after recording
	// it, and waiting a whole interval for it would add that interval to
	// every step. Default 1 s; never longer than the interval.
	FollowUp time.Duration
	// Discover: discovery mode (anvil.discovery): report the machine to
	// the controller for enrolment instead of looking a node up.
	Discover bool
	// PowerGrace is how long a finished power_off/reboot waits for its
	// SUCCEEDED status to reach the controller before powering anyway, so
	// a lost controller cannot keep a machine on forever; default 2 min.
	PowerGrace time.Duration
}

// loop is one Run: the Agent's configuration plus the state that lives as
// long as the process (the executor outlives re-lookups, so a running
// command survives a token change).
type loop struct {
	a       Agent
	log     *slog.Logger
	exec    *executor
	boot    *bootTimer
	macs    []string // to look up with, from Network.Up
	powered string   // id of the power command already acted on
}

// Run looks the node up and heartbeats until ctx is done. It returns nil
// when ctx is cancelled and an error only for a misconfigured Agent: every
// runtime failure is logged and retried. Commands run in the background
// under ctx; Run waits a few seconds for a running one to stop.
func (a *Agent) Run(ctx context.Context) error {
	if a.Controller == nil || a.Hardware == nil || a.Network == nil {
		return errors.New("agent: Controller, Hardware and Network are required")
	}
	cfg := *a
	if cfg.Clock == nil {
		cfg.Clock = SystemClock{}
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Version == "" {
		cfg.Version = Version
	}
	if cfg.BootID == "" {
		cfg.BootID = NewBootID()
	}
	if cfg.FollowUp <= 0 {
		cfg.FollowUp = time.Second
	}
	if cfg.PowerGrace <= 0 {
		cfg.PowerGrace = 2 * time.Minute
	}
	log := cfg.Log.With("boot_id", cfg.BootID)
	l := &loop{
		a:    cfg,
		log:  log,
		exec: newExecutor(log, cfg.Clock),
		boot: newBootTimer(cfg.Clock.Now(), cfg.KernelUptime),
	}
	log.InfoContext(ctx, "agent starting", "version", cfg.Version, "kernel_uptime", cfg.KernelUptime.String())
	if cfg.Discover {
		l.discover(ctx)
	} else {
		l.run(ctx)
	}
	// A running command sees ctx cancelled; give it a moment to stop, but
	// do not let a step stuck in the kernel block shutdown.
	stopped := make(chan struct{})
	go func() { l.exec.wait(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(5 * time.Second):
		log.Warn("a command is still running at shutdown", "command", l.exec.current())
	}
	return nil
}

func (l *loop) run(ctx context.Context) {
	macs, ok := l.networkUp(ctx)
	if !ok {
		return
	}
	l.macs = macs
	l.boot.mark(l.a.Clock.Now(), "network")
	// Sessions that end before any heartbeat got through (a controller
	// that hands out tokens it then refuses) back off too, so the agent
	// cannot spin between lookup and heartbeat.
	sessions := newRetrier(l.a.Backoff)
	for {
		lr, ok := l.lookup(ctx)
		if !ok {
			return
		}
		l.boot.mark(l.a.Clock.Now(), "lookup")
		hw, ok := l.hardware(ctx, lr)
		if !ok {
			return
		}
		delivered, err := l.heartbeats(ctx, lr, hw)
		if ctx.Err() != nil {
			return
		}
		wait := time.Duration(0)
		if delivered {
			sessions.reset()
		} else {
			wait = sessions.next()
		}
		l.log.WarnContext(ctx, "looking the node up again", "node", lr.Node.UUID, "reason", err, "retry_in", wait.String())
		if wait > 0 && !l.sleep(ctx, wait) {
			return
		}
	}
}

// sleep waits d or until ctx is done; false means stop.
func (l *loop) sleep(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-l.a.Clock.After(d):
		return true
	}
}

func (l *loop) networkUp(ctx context.Context) ([]string, bool) {
	retry := newRetrier(l.a.Backoff)
	for {
		macs, err := l.a.Network.Up(ctx)
		if err == nil && len(macs) > 0 {
			l.log.InfoContext(ctx, "network up", "macs", macs)
			return macs, true
		}
		if err == nil {
			err = errors.New("no network interface with a MAC address")
		}
		wait := retry.next()
		l.log.WarnContext(ctx, "network not ready; retrying", "err", err, "retry_in", wait.String())
		if !l.sleep(ctx, wait) {
			return nil, false
		}
	}
}

func (l *loop) lookup(ctx context.Context) (*protocol.LookupResponse, bool) {
	retry := newRetrier(l.a.Backoff)
	unreachable := 0
	for {
		lr, err := l.a.Controller.Lookup(ctx, l.macs, l.a.BootID)
		if err == nil {
			l.log.InfoContext(ctx, "lookup succeeded", "node", lr.Node.UUID, "node_name", lr.Node.Name,
				"heartbeat_interval", lr.Config.HeartbeatInterval)
			return lr, true
		}
		if ctx.Err() != nil {
			return nil, false
		}
		wait := retry.next()
		unreachable++
		switch {
		case errors.Is(err, ErrNotFound):
			unreachable = 0
			// The common cause is operational, so say what to check.
			l.log.WarnContext(ctx, "no node expects an agent with these MAC addresses yet (is the node enrolled with ports for them, and in a state that boots the agent?); retrying",
				"macs", l.macs, "err", err, "retry_in", wait.String())
		case errors.Is(err, ErrConflict):
			unreachable = 0
			l.log.InfoContext(ctx, "node is busy on the controller; retrying lookup", "err", err, "retry_in", wait.String())
		case errors.Is(err, ErrUntrusted):
			unreachable = 0
			// Said loudly on the console: either a rogue server answers at
			// the controller's address, or the controller's certificate
			// changed and the boot configuration was not told.
			l.log.ErrorContext(ctx, "REFUSING the server at the controller URL: its TLS certificate is not the trusted one (anvil.api_fingerprint= on the kernel command line); nothing is taken from it; retrying",
				"err", err, "retry_in", wait.String())
		case errors.Is(err, ErrUnreachable):
			l.log.WarnContext(ctx, "controller unreachable; retrying lookup", "err", err, "retry_in", wait.String())
		default:
			unreachable = 0
			l.log.WarnContext(ctx, "lookup failed; retrying", "err", err, "retry_in", wait.String())
		}
		if unreachable >= recheckNetworkAfter {
			unreachable = 0
			l.recheckNetwork(ctx)
		}
		if !l.sleep(ctx, wait) {
			return nil, false
		}
	}
}

// recheckNetwork runs the network bring-up again, keeping the old MACs if
// it fails.
func (l *loop) recheckNetwork(ctx context.Context) {
	macs, err := l.a.Network.Up(ctx)
	if err != nil || len(macs) == 0 {
		l.log.WarnContext(ctx, "network re-check failed; keeping the MAC addresses", "macs", l.macs, "err", err)
		return
	}
	if !slices.Equal(macs, l.macs) {
		l.log.InfoContext(ctx, "network re-checked; MAC addresses changed", "old", l.macs, "macs", macs)
	}
	l.macs = macs
}

func (l *loop) hardware(ctx context.Context, lr *protocol.LookupResponse) (Hardware, bool) {
	retry := newRetrier(l.a.Backoff)
	for {
		hw, err := l.a.Hardware(ctx, lr)
		if err == nil {
			return hw, true
		}
		wait := retry.next()
		l.log.ErrorContext(ctx, "cannot set up hardware managers; retrying", "err", err, "retry_in", wait.String())
		if !l.sleep(ctx, wait) {
			return nil, false
		}
	}
}

// interval converts the controller's seconds, defaulting from the lookup.
func interval(seconds float64) time.Duration {
	return max(time.Duration(seconds*float64(time.Second)), minInterval)
}

func lookupInterval(c protocol.AgentConfig) time.Duration {
	if c.HeartbeatInterval > 0 {
		return interval(c.HeartbeatInterval)
	}
	// Ironic gives only a timeout; a third of it leaves room for two
	// lost heartbeats.
	return interval(float64(c.HeartbeatTimeout) / 3)
}

// heartbeats is one protocol session: it heartbeats with the token of lr
// until ctx is done or the controller stops accepting the token (returned
// as the error, so Run looks up again). delivered says whether any
// heartbeat of the session got through.
func (l *loop) heartbeats(ctx context.Context, lr *protocol.LookupResponse, hw Hardware) (bool, error) {
	log := l.log.With("node", lr.Node.UUID)
	delivered := false
	every := lookupInterval(lr.Config)
	sendSteps := true // the first heartbeat of a session carries the catalogue
	retry := newRetrier(l.a.Backoff)
	for {
		// A finish signal from before this heartbeat is reported by it.
		select {
		case <-l.exec.finished:
		default:
		}
		hb := l.heartbeat(ctx, lr.Config.AgentToken, hw, sendSteps)
		resp, err := l.a.Controller.Heartbeat(ctx, lr.Node.UUID, hb)
		var wait time.Duration
		switch {
		case err == nil:
			retry.reset()
			delivered = true
			l.boot.delivered = true
			sendSteps = resp.SendSteps
			if resp.HeartbeatInterval > 0 {
				every = interval(resp.HeartbeatInterval)
			}
			news := hb.Steps != nil
			if resp.Ack != "" && l.exec.ack(resp.Ack) {
				log.DebugContext(ctx, "controller acknowledged command", "command_id", resp.Ack)
				news = true
			}
			l.powerAfterReport(ctx, hb.Command, true)
			if resp.Abort != "" && l.exec.abort(resp.Abort) {
				log.WarnContext(ctx, "controller aborted the running command; stopping at the next safe point", "command_id", resp.Abort)
			}
			wait = jitter(every)
			if resp.Command != nil {
				l.dispatch(ctx, log, resp.Command, hw)
			} else if news {
				wait = min(wait, l.a.FollowUp)
			}
		case ctx.Err() != nil:
			return delivered, ctx.Err()
		case errors.Is(err, ErrUnauthorized), errors.Is(err, ErrNotFound):
			// A new lookup mints a new token: no dead end after the
			// controller wiped the old one.
			return delivered, fmt.Errorf("heartbeat refused: %w", err)
		case errors.Is(err, ErrUntrusted):
			wait = retry.next()
			log.ErrorContext(ctx, "REFUSING the server at the controller URL: its TLS certificate is not the trusted one; retrying the heartbeat", "err", err, "retry_in", wait.String())
			l.powerAfterReport(ctx, hb.Command, false)
		case errors.Is(err, ErrBadRequest):
			wait = retry.next()
			log.ErrorContext(ctx, "controller rejected the heartbeat; retrying", "err", err, "retry_in", wait.String())
			l.powerAfterReport(ctx, hb.Command, false)
		default:
			wait = retry.next()
			log.WarnContext(ctx, "heartbeat failed; retrying", "err", err, "retry_in", wait.String())
			l.powerAfterReport(ctx, hb.Command, false)
		}
		select {
		case <-ctx.Done():
			return delivered, ctx.Err()
		case <-l.a.Clock.After(wait):
		case id := <-l.exec.finished:
			log.DebugContext(ctx, "command finished; heartbeating now", "command_id", id)
		}
	}
}

func (l *loop) heartbeat(ctx context.Context, token string, hw Hardware, sendSteps bool) *protocol.Heartbeat {
	hb := &protocol.Heartbeat{
		AgentToken:   token,
		AgentVersion: "anvil-agent " + l.a.Version + " (" + protocol.Version + ")",
		BootID:       l.a.BootID,
		Fingerprint:  hw.Fingerprint(ctx),
		Command:      l.exec.current(),
	}
	if sendSteps {
		hb.Steps = catalogue(ctx, hw)
		hb.Fingerprint = hb.Steps.Fingerprint
	}
	if !l.boot.delivered {
		l.boot.mark(l.a.Clock.Now(), "heartbeat")
		hb.BootTimings = l.boot.phases()
	}
	return hb
}

// catalogue is the step catalogue as the controller caches it.
func catalogue(ctx context.Context, hw Hardware) *protocol.StepCatalogue {
	steps := hw.Steps(ctx)
	c := &protocol.StepCatalogue{
		Fingerprint: hw.Fingerprint(ctx),
		Managers:    []protocol.ManagerVersion{},
		Clean:       append([]protocol.Step{}, steps.Clean...),
		Deploy:      append([]protocol.Step{}, steps.Deploy...),
	}
	for _, m := range hw.Managers() {
		c.Managers = append(c.Managers, protocol.ManagerVersion{Name: m.Name, Version: m.Version})
	}
	return c
}

// dispatch starts cmd unless it is a redelivery or the agent is busy.
func (l *loop) dispatch(ctx context.Context, log *slog.Logger, cmd *protocol.Command, hw Hardware) {
	// The HTTP client validates already; a Controller that does not must
	// not make the agent report a status the controller will refuse
	// forever (an unknown name cannot be reported).
	if err := cmd.Validate(); err != nil {
		log.ErrorContext(ctx, "ignoring invalid command", "command_id", cmd.ID, "command", cmd.Name, "err", err)
		return
	}
	switch l.exec.start(ctx, cmd, l.work(cmd, hw)) {
	case duplicate:
		log.DebugContext(ctx, "command already run; ignoring redelivery", "command_id", cmd.ID, "command", cmd.Name)
	case busy:
		cur := l.exec.current()
		// Not queued: the controller sees the running command in the
		// heartbeat and sends this one again later.
		log.WarnContext(ctx, "agent is busy; ignoring new command", "command_id", cmd.ID, "command", cmd.Name,
			"running_id", cur.ID, "running", cur.Name)
	}
}

// work maps a command to what it does.
func (l *loop) work(cmd *protocol.Command, hw Hardware) work {
	switch cmd.Name {
	case protocol.CmdGetSteps:
		return func(ctx context.Context, _ hardware.ProgressFunc) (any, error) { return catalogue(ctx, hw), nil }
	case protocol.CmdExecuteCleanStep:
		return stepWork(cmd, hw, hardware.KindClean)
	case protocol.CmdExecuteDeployStep:
		return stepWork(cmd, hw, hardware.KindDeploy)
	case protocol.CmdInventory:
		return func(ctx context.Context, _ hardware.ProgressFunc) (any, error) {
			if l.a.Inventory == nil {
				return nil, notSupported("inventory is not configured in this agent")
			}
			inv, err := l.a.Inventory(ctx)
			if err != nil {
				return nil, fmt.Errorf("inventory: %w", err)
			}
			return inv, nil
		}
	case protocol.CmdCollectLogs:
		return func(ctx context.Context, _ hardware.ProgressFunc) (any, error) {
			if l.a.Logs == nil {
				return nil, notSupported("log collection is not configured in this agent")
			}
			tgz, err := l.a.Logs.Collect(ctx)
			if err != nil {
				return nil, fmt.Errorf("collect logs: %w", err)
			}
			return map[string]string{"system_logs": base64.StdEncoding.EncodeToString(tgz)}, nil
		}
	case protocol.CmdPowerOff, protocol.CmdReboot:
		// The power action itself happens after the SUCCEEDED status is
		// reported: once the machine is off, nothing can be reported.
		return func(context.Context, hardware.ProgressFunc) (any, error) {
			if l.a.Power == nil {
				return nil, notSupported("power control is disabled in this agent (it runs outside its ramdisk)")
			}
			return nil, nil
		}
	}
	return func(context.Context, hardware.ProgressFunc) (any, error) {
		return nil, &protocol.Error{Type: protocol.ErrTypeInvalidArgs, Code: 400, Message: fmt.Sprintf("unknown command %q", cmd.Name)}
	}
}

func notSupported(msg string) error {
	return &protocol.Error{Type: protocol.ErrTypeNotSupported, Code: 400, Message: msg}
}

// stepWork runs a clean or deploy step, refusing when the catalogue changed
// since the controller planned with it.
func stepWork(cmd *protocol.Command, hw Hardware, kind hardware.Kind) work {
	return func(ctx context.Context, progress hardware.ProgressFunc) (any, error) {
		if cmd.Fingerprint != "" {
			if have := hw.Fingerprint(ctx); have != cmd.Fingerprint {
				return nil, &protocol.Error{Type: protocol.ErrTypeVersionMismatch, Code: 409,
					Message: "hardware managers changed since the step list was cached",
					Details: fmt.Sprintf("cached %s, current %s", cmd.Fingerprint, have)}
			}
		}
		args := stepArgs(*cmd.Step, hw.Steps(ctx).Of(kind), cmd.Node)
		return hw.Run(ctx, kind, cmd.Step.Step, args, progress)
	}
}

// stepArgs are the step's args plus, for each argument the step declares
// and the request lacks, the node context's value of that name: the
// controller sends node-level settings (target_raid_config) in the
// command's node map rather than copying them into every step.
func stepArgs(step protocol.Step, known []protocol.Step, node map[string]any) map[string]any {
	args := map[string]any{}
	for k, v := range step.Args {
		args[k] = v
	}
	for _, s := range known {
		if s.Step != step.Step {
			continue
		}
		for name := range s.ArgsInfo {
			if _, ok := args[name]; ok {
				continue
			}
			// A nil (unset) node value is left out, so the dispatcher
			// reports a missing argument instead of a malformed one.
			if v, ok := node[name]; ok && v != nil {
				args[name] = v
			}
		}
	}
	if len(args) == 0 {
		return nil
	}
	return args
}

// powerAfterReport acts on a finished power_off/reboot once its SUCCEEDED
// status was delivered, or once the grace period has passed without the
// controller answering.
func (l *loop) powerAfterReport(ctx context.Context, reported *protocol.CommandStatus, delivered bool) {
	if reported == nil || reported.State != protocol.CommandSucceeded || reported.ID == l.powered ||
		(reported.Name != protocol.CmdPowerOff && reported.Name != protocol.CmdReboot) {
		return
	}
	log := l.log.With("command_id", reported.ID, "command", reported.Name)
	if !delivered {
		if reported.FinishedAt == nil || l.a.Clock.Now().Sub(*reported.FinishedAt) < l.a.PowerGrace {
			return
		}
		log.WarnContext(ctx, "controller unreachable; acting on the power command without confirming its report",
			"grace", l.a.PowerGrace.String())
	}
	l.powered = reported.ID
	log.InfoContext(ctx, "power command reported; acting on it")
	var err error
	if reported.Name == protocol.CmdPowerOff {
		err = l.a.Power.PowerOff(ctx)
	} else {
		err = l.a.Power.Reboot(ctx)
	}
	if err != nil {
		log.ErrorContext(ctx, "power action failed", "err", err)
	}
}
