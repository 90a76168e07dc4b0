package bmc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/anvil-metal/anvil/internal/pause"
)

// primitive is one power command as a BMC understands it. The Manager maps
// Ironic's actions onto these after reading the current state, so protocol
// sessions stay dumb.
type primitive string

const (
	primOn    primitive = "on"
	primOff   primitive = "off"   // hard off
	primSoft  primitive = "soft"  // ACPI shutdown request
	primReset primitive = "reset" // hard reset while on
	primCycle primitive = "cycle" // off then on while on
)

// bootOverride is a boot override read back from a BMC.
type bootOverride struct {
	Device BootDevice
	Opts   BootOptions
	// OptsKnown is false when the BMC does not report the options reliably
	// (ipmi_sim marks the boot flags invalid), so only Device is compared.
	OptsKnown bool
}

func (o bootOverride) String() string {
	if !o.OptsKnown {
		return string(o.Device)
	}
	return fmt.Sprintf("%s persistent=%t efi=%t", o.Device, o.Opts.Persistent, o.Opts.EFI)
}

// session is one open connection to one BMC. It is used by one operation at
// a time; at the operation's end it is kept for the next (Redfish, when its
// last command succeeded: pool.go) or closed. A failed command closes it, so
// a retry always starts from a fresh client.
type session interface {
	provider() string
	powerState(ctx context.Context) (PowerState, error)
	setPower(ctx context.Context, p primitive) error
	setBoot(ctx context.Context, dev BootDevice, opts BootOptions) error
	// bootOverride returns an error wrapping ErrUnsupported when the
	// protocol cannot read the override back.
	bootOverride(ctx context.Context) (bootOverride, error)
	// setMedia inserts the ISO at url as the virtual CD ("": ejects).
	setMedia(ctx context.Context, url string) error
	close(ctx context.Context)
}

// opener opens sessions for one hardware type.
type opener interface {
	open(ctx context.Context, t Target) (session, error)
}

// RetryPolicy bounds retries of busy/unreachable failures.
type RetryPolicy struct {
	// Attempts is the maximum number of tries of one command (>= 1) when
	// the BMC cannot be reached. A BMC that answers busy (409 during POST,
	// 503, out of sessions) is retried until MaxElapsed instead: a server
	// in POST refuses changes for tens of seconds, and giving up after a
	// few quick tries would report a failure that waiting cures.
	Attempts int
	// Initial is the first backoff; it doubles per retry, with jitter.
	Initial time.Duration
	// Max caps one backoff.
	Max time.Duration
	// MaxElapsed caps the total time spent on one command including retries.
	MaxElapsed time.Duration
}

// Config configures a Manager. Zero values get defaults.
type Config struct {
	// Logger receives structured logs (never credentials). Default: discard.
	Logger *slog.Logger
	// MinInterval is the minimum time between the end of one command to an
	// IPMI (or fake) BMC and the start of the next. Default 1 s; negative
	// means none. (Ironic's [ipmi]min_command_interval is 5 s: small BMCs
	// crash when hammered.)
	MinInterval time.Duration
	// RedfishMinInterval is the same for Redfish BMCs. Default none, as
	// Ironic's redfish driver: a Redfish BMC that is busy answers 503,
	// which is retried, and spacing its many small requests (a BIOS
	// apply makes about a hundred) cost tens of seconds per step.
	RedfishMinInterval time.Duration
	// ConnectTimeout bounds opening a session (one ipmitool call, or the
	// Redfish service root plus login) and each later command. Default 10 s.
	ConnectTimeout time.Duration
	// VerifyTimeout bounds reading back a change until it holds. Default 60 s.
	VerifyTimeout time.Duration
	// SoftPowerOffTimeout replaces VerifyTimeout while waiting for a
	// graceful shutdown (soft_off, soft_reboot), which takes as long as the
	// OS needs. Default 600 s, Ironic's [conductor]soft_power_off_timeout.
	// A context deadline cuts it short.
	SoftPowerOffTimeout time.Duration
	// PollInterval is the spacing of read-backs while verifying.
	// Default 1 s; never less than MinInterval in effect.
	PollInterval time.Duration
	// Retry bounds retries. Default 4 attempts, 500 ms doubling to 5 s, 30 s total.
	Retry RetryPolicy
	// Fake holds the state of fake-hardware nodes. Default: a new one.
	Fake *Fake
	// IpmitoolPath overrides the ipmitool binary. Default: $PATH lookup.
	IpmitoolPath string
	// RedfishMaxConcurrent caps the operations (and so the Redfish
	// sessions) running at once against one Redfish BMC, whichever nodes
	// they are for. Default 2: BMCs allow few sessions (iDRAC and iLO
	// about 8, shared with every other client and the web UI). IPMI BMCs
	// get one operation at a time.
	RedfishMaxConcurrent int
	// SessionIdle is how long a Redfish session is kept for reuse after
	// an operation; it is logged out when it has been idle that long, or
	// by Close. Default 60 s; negative: a session per operation, logged
	// out at its end.
	SessionIdle time.Duration
}

func (c Config) withDefaults() Config {
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.MinInterval == 0 {
		c.MinInterval = time.Second
	}
	if c.MinInterval < 0 {
		c.MinInterval = 0
	}
	if c.RedfishMinInterval < 0 {
		c.RedfishMinInterval = 0
	}
	if c.ConnectTimeout <= 0 {
		c.ConnectTimeout = 10 * time.Second
	}
	if c.VerifyTimeout <= 0 {
		c.VerifyTimeout = 60 * time.Second
	}
	if c.SoftPowerOffTimeout <= 0 {
		c.SoftPowerOffTimeout = 600 * time.Second
	}
	if c.PollInterval <= 0 {
		c.PollInterval = time.Second
	}
	if c.Retry.Attempts <= 0 {
		c.Retry.Attempts = 4
	}
	if c.Retry.Initial <= 0 {
		c.Retry.Initial = 500 * time.Millisecond
	}
	if c.Retry.Max <= 0 {
		c.Retry.Max = 5 * time.Second
	}
	if c.Retry.MaxElapsed <= 0 {
		c.Retry.MaxElapsed = 30 * time.Second
	}
	if c.Fake == nil {
		c.Fake = NewFake()
	}
	if c.RedfishMaxConcurrent <= 0 {
		c.RedfishMaxConcurrent = 2
	}
	if c.SessionIdle == 0 {
		c.SessionIdle = 60 * time.Second
	}
	return c
}

// Manager runs power and boot operations against BMCs. It is safe for
// concurrent use; operations on the same BMC are serialised (IPMI) or
// capped (Redfish: RedfishMaxConcurrent). Close logs out kept sessions.
type Manager struct {
	cfg     Config
	log     *slog.Logger
	openers map[string]opener

	mu   sync.Mutex
	bmcs map[string]*bmcLock
}

// New returns a Manager.
func New(cfg Config) *Manager {
	cfg = cfg.withDefaults()
	m := &Manager{
		cfg:  cfg,
		log:  cfg.Logger,
		bmcs: map[string]*bmcLock{},
	}
	m.openers = map[string]opener{
		HardwareIPMI:    ipmiOpener{log: cfg.Logger, ipmitool: cfg.IpmitoolPath, timeout: cfg.ConnectTimeout},
		HardwareRedfish: redfishOpener{log: cfg.Logger, timeout: cfg.ConnectTimeout},
		HardwareFake:    cfg.Fake,
	}
	return m
}

// Fake returns the in-memory state behind the fake-hardware type, for
// controller tests to inspect and to set failure knobs on.
func (m *Manager) Fake() *Fake { return m.cfg.Fake }

// PowerState reads the node's power state. PowerUnknown with a nil error
// means the BMC reported a transitional state (PoweringOn/Off).
func (m *Manager) PowerState(ctx context.Context, t Target) (PowerState, Outcome, error) {
	var st PowerState
	out, err := m.run(ctx, t, "power_state", func(ctx context.Context, op *operation) error {
		var err error
		st, err = op.readPower(ctx)
		return err
	})
	return st, out, err
}

// Verify checks that the BMC is reachable and accepts the credentials (the
// "manage" verb): it opens a session and reads the power state.
func (m *Manager) Verify(ctx context.Context, t Target) (Outcome, error) {
	_, out, err := m.PowerState(ctx, t)
	return out, err
}

// SetPower performs a power action and verifies it by reading the power
// state back until it holds or VerifyTimeout passes (ErrVerify).
func (m *Manager) SetPower(ctx context.Context, t Target, a PowerAction) (Outcome, error) {
	if !a.Valid() {
		return Outcome{}, fmt.Errorf("%w: power action %q", ErrUnsupported, a)
	}
	return m.run(ctx, t, "set_power", func(ctx context.Context, op *operation) error {
		cur, err := op.readPower(ctx)
		if err != nil {
			return err
		}
		switch a {
		case ActionOn, ActionOff, ActionSoftOff:
			if cur == a.target() {
				op.log.DebugContext(ctx, "bmc: already in requested power state", "action", a)
				return nil
			}
			p := map[PowerAction]primitive{ActionOn: primOn, ActionOff: primOff, ActionSoftOff: primSoft}[a]
			if err := op.send(ctx, p); err != nil {
				return err
			}
			if a == ActionSoftOff {
				return op.waitPower(ctx, PowerOff, op.m.cfg.SoftPowerOffTimeout)
			}
			return op.waitPower(ctx, a.target(), op.m.cfg.VerifyTimeout)
		case ActionReboot, ActionCycle, ActionSoftReboot:
			// Ironic powers an off node on for every reboot flavour; BMCs
			// disagree (bmclib v2.3.0 Redfish "cycle" fails when off, IPMI
			// cycles), so decide here from the state just read.
			if cur == PowerOff {
				if err := op.send(ctx, primOn); err != nil {
					return err
				}
				return op.waitPower(ctx, PowerOn, op.m.cfg.VerifyTimeout)
			}
			switch a {
			case ActionReboot:
				err = op.send(ctx, primReset)
			case ActionCycle:
				err = op.send(ctx, primCycle)
			case ActionSoftReboot:
				var done bool
				if done, err = op.gracefulRestart(ctx); done || err != nil {
					break
				}
				if err = op.send(ctx, primSoft); err == nil {
					if err = op.waitPower(ctx, PowerOff, op.m.cfg.SoftPowerOffTimeout); err == nil {
						err = op.send(ctx, primOn)
					}
				}
			}
			if err != nil {
				return err
			}
			// A reset leaves the state "on": we can only check that it is on
			// again, not that it went through a reset.
			return op.waitPower(ctx, PowerOn, op.m.cfg.VerifyTimeout)
		}
		return nil
	})
}

// SetBootDevice sets the boot device override and verifies it by reading it
// back where the protocol can (Redfish; IPMI through `chassis bootparam get
// 5`). Some BMCs answer 200 and silently keep or revert the old override
// (bmclib#459): that is ErrVerify.
func (m *Manager) SetBootDevice(ctx context.Context, t Target, dev BootDevice, opts BootOptions) (Outcome, error) {
	if !dev.Valid() {
		return Outcome{}, fmt.Errorf("%w: boot device %q", ErrUnsupported, dev)
	}
	return m.run(ctx, t, "set_boot_device", func(ctx context.Context, op *operation) error {
		set := func() error {
			return op.retry(ctx, "set_boot_device", func(ctx context.Context, s session) error {
				return s.setBoot(ctx, dev, opts)
			})
		}
		if err := set(); err != nil {
			return err
		}
		// A BMC that answered 2xx and kept the old override (bmclib#459)
		// is asked again, as many times as a busy one would be, before
		// the change counts as refused.
		sets, lastSet := 1, time.Now()
		want := bootOverride{Device: dev, Opts: opts}
		return op.poll(ctx, op.m.cfg.VerifyTimeout, func(ctx context.Context) (bool, string, error) {
			var got bootOverride
			err := op.retry(ctx, "get_boot_device", func(ctx context.Context, s session) error {
				var err error
				got, err = s.bootOverride(ctx)
				return err
			})
			if errors.Is(err, ErrUnsupported) {
				op.log.InfoContext(ctx, "bmc: boot override cannot be read back; not verified", "error", err)
				return true, "", nil
			}
			if err != nil {
				return false, "", err
			}
			ok := got.Device == want.Device && (!got.OptsKnown || got.Opts == want.Opts)
			want.OptsKnown = got.OptsKnown
			diff := fmt.Sprintf("boot device set to %s but the BMC reports %s (set %d time(s))", want, got, sets)
			if !ok && sets < op.m.cfg.Retry.Attempts && time.Since(lastSet) >= resendAfter(op.m.cfg) {
				op.log.WarnContext(ctx, "bmc: boot override not kept, setting it again", "state", diff)
				if err := set(); err != nil {
					return false, "", err
				}
				sets, lastSet = sets+1, time.Now()
			}
			return ok, diff, nil
		})
	})
}

// operation is the state of one Manager call: the BMC lock is held, and at
// most one session is open.
type operation struct {
	m        *Manager
	t        Target
	lock     *bmcLock
	log      *slog.Logger
	sess     session
	reused   bool // sess was kept from an earlier operation
	healthy  bool // sess's last command succeeded: it may be kept
	attempts int
	provider string
	// cmdTimeout, when set, bounds each command instead of
	// ConnectTimeout (a firmware inventory is many documents).
	cmdTimeout time.Duration
}

// run takes the BMC lock, runs fn and closes the session.
func (m *Manager) run(ctx context.Context, t Target, name string, fn func(context.Context, *operation) error) (Outcome, error) {
	start := time.Now()
	op := &operation{m: m, t: t, log: m.log.With("bmc_op", name, "bmc", t)}
	out := func() Outcome {
		return Outcome{Provider: op.provider, Attempts: op.attempts, Duration: time.Since(start)}
	}
	if _, ok := m.openers[t.HardwareType]; !ok {
		return out(), fmt.Errorf("%w: hardware type %q", ErrUnsupported, t.HardwareType)
	}
	lock := m.lockFor(t)
	select {
	case lock.sem <- struct{}{}:
	case <-ctx.Done():
		return out(), fmt.Errorf("bmc: waiting for %s: %w", t, ctx.Err())
	}
	op.lock = lock
	defer func() { <-lock.sem }()
	defer op.finish(ctx)

	err := fn(ctx, op)
	o := out()
	if err != nil {
		err = sentinelFor(err)
		op.log.WarnContext(ctx, "bmc: operation failed", "attempts", o.Attempts, "duration", o.Duration, "error", err)
		return o, fmt.Errorf("%s %s: %w", name, t, err)
	}
	op.log.DebugContext(ctx, "bmc: operation done", "bmc_provider", o.Provider, "attempts", o.Attempts, "duration", o.Duration)
	return o, nil
}

func (m *Manager) lockFor(t Target) *bmcLock {
	m.mu.Lock()
	defer m.mu.Unlock()
	key := t.key()
	l, ok := m.bmcs[key]
	if !ok {
		n := 1
		if t.HardwareType == HardwareRedfish {
			n = m.cfg.RedfishMaxConcurrent
		}
		l = &bmcLock{sem: make(chan struct{}, n)}
		m.bmcs[key] = l
	}
	return l
}

func (op *operation) closeSession(ctx context.Context) {
	if op.sess == nil {
		return
	}
	// Closing is a command too (Redfish session DELETE), but it must not
	// be skipped when ctx is done, so it gets its own short deadline.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), op.m.cfg.ConnectTimeout)
	defer cancel()
	op.sess.close(cctx)
	op.lock.touch()
	op.lock.dropped()
	op.sess = nil
}

// call runs one BMC command, opening a session first if none is open. Both
// are paced by MinInterval (gap may ask for more, for polls).
func (op *operation) call(ctx context.Context, gap time.Duration, fn func(context.Context, session) error) error {
	if op.sess == nil {
		if err := op.openSession(ctx); err != nil {
			return err
		}
	}
	err := op.command(ctx, gap, fn)
	if err != nil && op.reused && kindOf(err) == kindAuth {
		// A kept session the BMC expired (or logged out, or forgot in
		// a restart): log in again once before calling the credentials
		// wrong.
		op.log.InfoContext(ctx, "bmc: kept session refused, logging in again", "error", err)
		op.closeSession(ctx)
		if err := op.openSession(ctx); err != nil {
			return err
		}
		err = op.command(ctx, gap, fn)
	}
	return err
}

// command runs fn on the open session, paced and bounded.
func (op *operation) command(ctx context.Context, gap time.Duration, fn func(context.Context, session) error) error {
	if err := op.pace(ctx, gap); err != nil {
		return err
	}
	timeout := op.m.cfg.ConnectTimeout
	if op.cmdTimeout > 0 {
		timeout = op.cmdTimeout
	}
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	err := fn(cctx, op.sess)
	op.lock.touch()
	op.healthy = err == nil
	if err == nil {
		op.provider = op.sess.provider()
	}
	return err
}

// retry runs a command with classified retries: auth and permanent errors
// return at once; busy and unreachable ones are retried on a fresh session
// with jittered exponential backoff, bounded by attempts and elapsed time.
func (op *operation) retry(ctx context.Context, what string, fn func(context.Context, session) error) error {
	return op.retryGap(ctx, what, op.minInterval(), fn)
}

func (op *operation) retryGap(ctx context.Context, what string, gap time.Duration, fn func(context.Context, session) error) error {
	pol := op.m.cfg.Retry
	start := time.Now()
	backoff := pol.Initial
	for attempt := 1; ; attempt++ {
		op.attempts++
		err := op.call(ctx, gap, fn)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("%s: %w (last error: %w)", what, ctx.Err(), err)
		}
		if !retryable(err) {
			// A session that failed permanently may be in any state; the
			// next command (if any) starts over.
			op.closeSession(ctx)
			return fmt.Errorf("%s: %w", what, err)
		}
		op.closeSession(ctx)
		jittered := backoff/2 + rand.N(backoff/2+1)
		if attempt >= pol.Attempts && kindOf(err) != kindBusy || time.Since(start)+jittered > pol.MaxElapsed {
			return fmt.Errorf("%s: giving up after %d attempts in %s: %w", what, attempt, time.Since(start).Round(time.Millisecond), err)
		}
		op.log.WarnContext(ctx, "bmc: retrying", "command", what, "attempt", attempt, "backoff", jittered, "error", err)
		if !pause.For(ctx, jittered) {
			return fmt.Errorf("%s: %w", what, ctx.Err())
		}
		backoff = min(backoff*2, pol.Max)
	}
}

func (op *operation) readPower(ctx context.Context) (PowerState, error) {
	var st PowerState
	err := op.retry(ctx, "get_power_state", func(ctx context.Context, s session) error {
		var err error
		st, err = s.powerState(ctx)
		return err
	})
	return st, err
}

func (op *operation) send(ctx context.Context, p primitive) error {
	op.log.DebugContext(ctx, "bmc: power command", "command", p)
	return op.retry(ctx, "set_power_state "+string(p), func(ctx context.Context, s session) error {
		return s.setPower(ctx, p)
	})
}

// restarter is a session whose BMC can restart the OS without a power
// cycle (Redfish GracefulRestart); ok is false when this BMC does not offer
// it, and the soft reboot falls back to soft off + on.
type restarter interface {
	gracefulRestart(ctx context.Context) (ok bool, err error)
}

// gracefulRestart tries restarter: a soft reboot that never powers the
// node off, as Ironic's Redfish soft reboot (sushy GracefulRestart), which
// disable_power_off nodes rely on.
func (op *operation) gracefulRestart(ctx context.Context) (bool, error) {
	var ok bool
	err := op.retry(ctx, "set_power_state graceful_restart", func(ctx context.Context, s session) error {
		r, is := s.(restarter)
		if !is {
			return nil
		}
		var err error
		ok, err = r.gracefulRestart(ctx)
		return err
	})
	return ok, err
}

// waitPower polls the power state until it is want.
func (op *operation) waitPower(ctx context.Context, want PowerState, timeout time.Duration) error {
	// The first read-back comes as soon as pacing allows (many BMCs apply
	// power changes at once); later ones every PollInterval.
	gap := op.minInterval()
	return op.poll(ctx, timeout, func(ctx context.Context) (bool, string, error) {
		var st PowerState
		defer func() { gap = max(op.m.cfg.PollInterval, op.minInterval()) }()
		err := op.retryGap(ctx, "get_power_state", gap, func(ctx context.Context, s session) error {
			var err error
			st, err = s.powerState(ctx)
			return err
		})
		if err != nil {
			return false, "", err
		}
		got := string(st)
		if st == PowerUnknown {
			got = "a transitional state"
		}
		return st == want, fmt.Sprintf("power requested %s but the BMC reports %s", want, got), nil
	})
}

// poll calls check until it reports ok, timeout passes (ErrVerify) or it
// fails.
func (op *operation) poll(ctx context.Context, timeout time.Duration, check func(context.Context) (bool, string, error)) error {
	deadline := time.Now().Add(timeout)
	for {
		ok, diff, err := check(ctx)
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w after %s: %s", ErrVerify, timeout, diff)
		}
		// The next check's command is paced (MinInterval, or PollInterval
		// for power polls), so no sleep here.
		op.log.DebugContext(ctx, "bmc: waiting for change to hold", "state", diff)
	}
}
