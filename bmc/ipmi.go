package bmc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os/exec"
	"strconv"
	"strings"
	"time"

	bmclib "github.com/bmc-toolbox/bmclib/v2"
	"github.com/bmc-toolbox/bmclib/v2/providers/ipmitool"
	"github.com/go-logr/logr"
	"github.com/jacobweinstock/registrar"
)

// ipmitoolNoReply is how long ipmitool waits for a BMC reply (bmclib passes
// -N 5). ipmitool prints the same "Unable to establish IPMI v2 / RMCP+
// session" for a wrong password and for a BMC that never answers; a failure
// faster than this can only come from a BMC that answered, i.e. rejected us.
const ipmitoolNoReply = 5 * time.Second

// ipmiOpener opens bmclib clients restricted to the ipmitool provider.
//
// ipmi_priv_level: bmclib v2.3.0's ipmitool provider has no privilege level
// option, so its commands run at ipmitool's default (ADMINISTRATOR); only
// our own boot-parameter read passes -L. A user limited to OPERATOR is
// therefore rejected (ErrAuth) by power commands.
type ipmiOpener struct {
	log      *slog.Logger
	ipmitool string
	timeout  time.Duration
}

func (o ipmiOpener) open(ctx context.Context, t Target) (session, error) {
	lg := logr.FromSlogHandler(o.log.Handler())
	host := urlHost(t.Host) // bmclib joins host+":"+port and splits it again
	conn, err := ipmitool.New(host, t.Username, t.Password,
		ipmitool.WithLogger(lg),
		ipmitool.WithPort(strconv.Itoa(t.Port)),
		ipmitool.WithCipherSuite(t.CipherSuite),
		ipmitool.WithIpmitoolPath(o.ipmitool))
	if err != nil {
		return nil, fmt.Errorf("%w: ipmitool not available: %w", ErrUnsupported, err)
	}
	reg := registrar.NewRegistry(registrar.WithLogger(lg))
	reg.Register(ipmitool.ProviderName, ipmitool.ProviderProtocol, ipmitool.Features, nil, conn)
	cl := bmclib.NewClient(host, t.Username, t.Password, bmclib.WithRegistry(reg), bmclib.WithLogger(lg))

	path := o.ipmitool
	if path == "" {
		path, _ = exec.LookPath("ipmitool")
	}
	s := &ipmiSession{cl: cl, t: t, ipmitool: path}
	// bmclib's ipmitool Open is a "chassis power status".
	err = s.timed(ctx, func() error { return cl.Open(ctx) })
	if err != nil {
		return nil, err
	}
	s.authOK = true
	return s, nil
}

type ipmiSession struct {
	cl       *bmclib.Client
	t        Target
	ipmitool string
	// authOK: the BMC accepted these credentials in this operation, so a
	// later session failure is not about them.
	authOK bool
}

func (s *ipmiSession) provider() string      { return ipmitool.ProviderName }
func (s *ipmiSession) close(context.Context) {} // ipmitool is one-shot; nothing to close

// timed runs fn and classifies its error from ipmitool's output and how
// long it took.
func (s *ipmiSession) timed(ctx context.Context, fn func() error) error {
	start := time.Now()
	err := fn()
	if err == nil {
		return nil
	}
	return classifyIPMI(ctx, err, time.Since(start), s.authOK)
}

// classifyIPMI classifies an ipmitool failure. A failing command is
// reported as the last cipher suite's session error, because bmclib retries
// every failed command with -C 17 (which ipmi_sim and older BMCs reject);
// hence authOK.
func classifyIPMI(ctx context.Context, err error, took time.Duration, authOK bool) error {
	err = flatten(err)
	msg := strings.ToLower(err.Error())
	switch {
	case ctx.Err() != nil || errors.Is(err, context.DeadlineExceeded):
		return classified(kindUnreachable, fmt.Errorf("no answer within the timeout: %w", err))
	case strings.Contains(msg, "insufficient resources") || strings.Contains(msg, "busy") ||
		strings.Contains(msg, "out of space"):
		return classified(kindBusy, err)
	case strings.Contains(msg, "unable to establish"), strings.Contains(msg, "rakp"),
		strings.Contains(msg, "unauthorized"), strings.Contains(msg, "invalid user"):
		if authOK {
			return classified(kindBusy, fmt.Errorf("command failed although the BMC accepted the credentials moments ago: %w", err))
		}
		if took < ipmitoolNoReply {
			return classified(kindAuth, fmt.Errorf("session rejected by the BMC (wrong username, password, privilege level or cipher suite): %w", err))
		}
		return classified(kindUnreachable, err)
	case strings.Contains(msg, "no response") || strings.Contains(msg, "timeout"):
		return classified(kindUnreachable, err)
	}
	return err
}

func (s *ipmiSession) powerState(ctx context.Context) (PowerState, error) {
	var out string
	err := s.timed(ctx, func() error {
		var err error
		out, err = s.cl.GetPowerState(ctx)
		return err
	})
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
	return s.timed(ctx, func() error {
		ok, err := s.cl.SetPowerState(ctx, string(p))
		if err == nil && !ok {
			err = errors.New("bmclib reported failure without an error")
		}
		return err
	})
}

func (s *ipmiSession) setBoot(ctx context.Context, dev BootDevice, opts BootOptions) error {
	return s.timed(ctx, func() error {
		ok, err := s.cl.SetBootDevice(ctx, string(dev), opts.Persistent, opts.EFI)
		if err == nil && !ok {
			err = errors.New("bmclib reported failure without an error")
		}
		return err
	})
}

// bootOverride reads boot parameter 5 with ipmitool directly: bmclib v2.3.0
// cannot read the override over IPMI. Same invocation as bmclib (lanplus,
// password in the environment so it never shows in ps, -C 3 then 17).
func (s *ipmiSession) bootOverride(ctx context.Context) (bootOverride, error) {
	if s.ipmitool == "" {
		return bootOverride{}, fmt.Errorf("%w: ipmitool not found", ErrUnsupported)
	}
	suites := []string{"3", "17"}
	if s.t.CipherSuite != "" {
		suites = []string{s.t.CipherSuite}
	}
	var out []byte
	var err error
	start := time.Now()
	for _, cs := range suites {
		args := []string{"-I", "lanplus", "-H", s.t.Host, "-p", strconv.Itoa(s.t.Port),
			"-U", s.t.Username, "-E", "-N", "5", "-C", cs}
		if s.t.PrivLevel != "" {
			args = append(args, "-L", s.t.PrivLevel)
		}
		args = append(args, "chassis", "bootparam", "get", "5")
		cmd := exec.CommandContext(ctx, s.ipmitool, args...)
		cmd.Env = []string{"IPMITOOL_PASSWORD=" + s.t.Password}
		cmd.WaitDelay = time.Second // never hang on the output pipe after a kill
		out, err = cmd.CombinedOutput()
		if err == nil || ctx.Err() != nil {
			break
		}
	}
	if err != nil {
		return bootOverride{}, classifyIPMI(ctx, fmt.Errorf("chassis bootparam get 5: %w: %s", err, strings.TrimSpace(string(out))), time.Since(start), s.authOK)
	}
	return parseBootParam5(string(out))
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
