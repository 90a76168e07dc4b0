package bmc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"time"

	bmclib "github.com/bmc-toolbox/bmclib/v2"
	"github.com/go-logr/logr"
	"github.com/jacobweinstock/registrar"
)

// ipmiOpener opens bmclib clients whose only provider is our
// ipmitoolProvider (see there why not bmclib's own ipmitool provider).
type ipmiOpener struct {
	log      *slog.Logger
	ipmitool string
	timeout  time.Duration
}

func (o ipmiOpener) open(ctx context.Context, t Target) (session, error) {
	path := o.ipmitool
	var err error
	if path == "" {
		path, err = exec.LookPath("ipmitool")
	} else {
		_, err = os.Stat(path)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: ipmitool not available: %w", ErrUnsupported, err)
	}
	prov := &ipmitoolProvider{path: path, t: t, log: o.log}
	lg := logr.FromSlogHandler(o.log.Handler())
	reg := registrar.NewRegistry(registrar.WithLogger(lg))
	reg.Register(prov.Name(), "ipmi", ipmitoolFeatures, nil, prov)
	// The client's host and credentials are unused (the provider has its
	// own Target) but bmclib requires them.
	cl := bmclib.NewClient(urlHost(t.Host), t.Username, t.Password, bmclib.WithRegistry(reg), bmclib.WithLogger(lg))
	s := &ipmiSession{cl: cl, prov: prov, t: t}
	// A no-op for ipmitool (see ipmitoolProvider.Open): credentials are
	// proven by the first command, which sets authOK.
	if err = cl.Open(ctx); err != nil {
		return nil, fmt.Errorf("bmclib open: %w", flatten(err))
	}
	return s, nil
}

type ipmiSession struct {
	cl   *bmclib.Client
	prov *ipmitoolProvider
	t    Target
	// authOK: the BMC accepted these credentials in this operation, so a
	// later session failure is not about them.
	authOK bool
}

func (s *ipmiSession) provider() string {
	if p := s.cl.GetMetadata().SuccessfulProvider; p != "" {
		return p
	}
	return s.prov.Name()
}

func (s *ipmiSession) close(context.Context) {} // ipmitool is one-shot; nothing to close

// timed runs fn and classifies its error from ipmitool's output and how
// long it took.
func (s *ipmiSession) timed(ctx context.Context, fn func() error) error {
	_, err := timedRead(ctx, s, func() (struct{}, error) { return struct{}{}, fn() })
	return err
}

// timedRead is timed for a call that reads a value.
func timedRead[T any](ctx context.Context, s *ipmiSession, fn func() (T, error)) (T, error) {
	start := time.Now()
	v, err := fn()
	if err == nil {
		s.authOK = true
		return v, nil
	}
	return v, classifyIPMI(ctx, err, time.Since(start), s.authOK, s.t)
}

// classifyIPMI classifies an ipmitool failure. ipmitool's messages are the
// only signal: its exit status is 1 for everything.
func classifyIPMI(ctx context.Context, err error, took time.Duration, authOK bool, t Target) error {
	err = flatten(err)
	msg := strings.ToLower(err.Error())
	priv := t.PrivLevel
	if priv == "" {
		priv = defaultPrivLevel
	}
	switch {
	case ctx.Err() != nil || errors.Is(err, context.DeadlineExceeded):
		return classified(kindUnreachable, fmt.Errorf("no answer within the timeout: %w", err))
	case strings.Contains(msg, "insufficient resources") || strings.Contains(msg, "busy") ||
		strings.Contains(msg, "out of space") || strings.Contains(msg, "initialization in progress"):
		// Ironic's IPMITOOL_RETRYABLE_FAILURES, "Node busy" included.
		return classified(kindBusy, err)
	case strings.Contains(msg, "insufficient privilege"):
		// Completion code 0xD4: the session works but its privilege level
		// is too low for the command. Retrying cannot help.
		return classified(kindAuth, fmt.Errorf("the BMC refused the command at privilege level %s (ipmi_priv_level): it needs a higher level: %w", priv, err))
	case strings.Contains(msg, "unauthorized role"):
		// RMCP+ status 0x09 in the open session or RAKP 2 reply: the user
		// (or channel) may not have a session at this privilege level.
		return classified(kindAuth, fmt.Errorf("the BMC refused a session at privilege level %s: set ipmi_priv_level to the user's privilege (OPERATOR or USER): %w", priv, err))
	case strings.Contains(msg, "unable to establish"), strings.Contains(msg, "rakp"),
		strings.Contains(msg, "unauthorized"), strings.Contains(msg, "invalid user"):
		// "invalid authentication algorithm" and the like: the BMC lacks
		// the cipher suite asked for.
		cipherRefused := strings.Contains(msg, "algorithm") || strings.Contains(msg, "no cipher suite match")
		switch {
		case authOK:
			return classified(kindBusy, fmt.Errorf("command failed although the BMC accepted the credentials moments ago: %w", err))
		case cipherRefused && t.CipherSuite != "":
			return classified(kindAuth, fmt.Errorf("the BMC does not accept cipher suite %s (ipmi_cipher_suite): %w", t.CipherSuite, err))
		case cipherRefused || took < ipmitoolNoReply:
			return classified(kindAuth, fmt.Errorf("session rejected by the BMC (wrong username or password, or a privilege level or cipher suite it refuses: ipmi_priv_level, ipmi_cipher_suite): %w", err))
		}
		return classified(kindUnreachable, err)
	case strings.Contains(msg, "no response") || strings.Contains(msg, "timeout"):
		return classified(kindUnreachable, err)
	}
	return err
}

func (s *ipmiSession) powerState(ctx context.Context) (PowerState, error) {
	out, err := timedRead(ctx, s, func() (string, error) { return s.cl.GetPowerState(ctx) })
	if err != nil {
		return PowerUnknown, err
	}
	return parseChassisPower(out)
}

func parseChassisPower(out string) (PowerState, error) {
	switch {
	case strings.Contains(out, "Chassis Power is on"):
		return PowerOn, nil
	case strings.Contains(out, "Chassis Power is off"):
		return PowerOff, nil
	}
	return PowerUnknown, fmt.Errorf("unexpected ipmitool output %q", strings.TrimSpace(out))
}

func (s *ipmiSession) setPower(ctx context.Context, p primitive) error {
	switch p {
	case primOn, primOff, primSoft, primReset, primCycle:
	default:
		return fmt.Errorf("%w: power command %q", ErrUnsupported, p)
	}
	return s.timed(ctx, func() error { return bmclibResult(s.cl.SetPowerState(ctx, string(p))) })
}

func (s *ipmiSession) setBoot(ctx context.Context, dev BootDevice, opts BootOptions) error {
	return s.timed(ctx, func() error { return bmclibResult(s.cl.SetBootDevice(ctx, string(dev), opts.Persistent, opts.EFI)) })
}

// bootOverride reads boot parameter 5 through the provider, not bmclib
// (see ipmitoolProvider.bootParam5).
func (s *ipmiSession) bootOverride(ctx context.Context) (bootOverride, error) {
	return timedRead(ctx, s, func() (bootOverride, error) { return s.prov.bootParam5(ctx) })
}

// parseBootParam5 reads ipmitool's rendering of boot parameter 5.
func parseBootParam5(out string) (bootOverride, error) {
	var o bootOverride
	found := false
	for _, line := range strings.Split(out, "\n") {
		l := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(line), "-"))
		switch {
		case strings.HasPrefix(l, "Boot Device Selector"):
			found = true
			sel := strings.TrimSpace(l[strings.Index(l, ":")+1:])
			switch {
			case strings.Contains(sel, "PXE"):
				o.Device = BootPXE
			case strings.Contains(sel, "Hard-Drive"):
				o.Device = BootDisk
			case strings.Contains(sel, "CD/DVD"):
				o.Device = BootCDROM
			case strings.Contains(sel, "BIOS Setup"):
				o.Device = BootBIOS
			default:
				o.Device = BootDevice(sel)
			}
		case l == "Boot Flag Valid":
			// ipmi_sim reports its chassis-control boot device with the
			// flags marked invalid; only then do the options mean anything.
			o.OptsKnown = true
		case strings.HasPrefix(l, "Options apply to all future boots"):
			o.Opts.Persistent = true
		case strings.HasPrefix(l, "BIOS EFI boot"):
			o.Opts.EFI = true
		}
	}
	if !found {
		return o, fmt.Errorf("no boot device selector in ipmitool output %q", strings.TrimSpace(out))
	}
	return o, nil
}
