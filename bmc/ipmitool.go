package bmc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/bmc-toolbox/bmclib/v2/providers"
	"github.com/jacobweinstock/registrar"
)

// ipmitoolProvider is a bmclib provider (bmclib's bmc.Opener, Closer,
// PowerStateGetter, PowerSetter and BootDeviceSetter) that runs ipmitool
// over lanplus with the node's ipmi_priv_level and ipmi_cipher_suite.
//
// Why our own provider rather than bmclib's providers/ipmitool: bmclib
// v2.3.0 builds every ipmitool command line in its internal/ipmi package,
// which has no privilege level option, so ipmitool always ran at its default
// ADMINISTRATOR and a user whose channel privilege is OPERATOR was rejected
// where Ironic (ipmitool -L OPERATOR) works. The package is internal and
// cannot be extended. bmclib's Client, however, drives whatever is
// registered in its registrar.Registry through those small interfaces, so a
// provider of ours registered there keeps the per-operation Client, its
// record of the provider that answered, and everything the Manager does on
// top (pacing, classification, retries, read-back verification) unchanged.
// Calling ipmitool from the session without bmclib would have been a second
// code path for IPMI alone.
//
// One provider serves one Manager operation; the Client calls it from one
// goroutine at a time, but bmclib's Open runs it in a goroutine of its own,
// hence the lock around the remembered cipher suite.
type ipmitoolProvider struct {
	path string // ipmitool binary
	t    Target
	log  *slog.Logger

	mu    sync.Mutex
	suite string // cipher suite that last opened a session, "" before that
}

// ipmitoolFeatures are the bmclib features ipmitoolProvider implements.
var ipmitoolFeatures = registrar.Features{
	providers.FeaturePowerState,
	providers.FeaturePowerSet,
	providers.FeatureBootDeviceSet,
}

// ipmitoolNoReply is how long ipmitool waits for a BMC reply (-N). ipmitool
// prints the same "Unable to establish IPMI v2 / RMCP+ session" for a wrong
// password and for a BMC that never answers; a failure faster than this can
// only come from a BMC that answered, i.e. rejected us.
const ipmitoolNoReply = 5 * time.Second

// defaultPrivLevel is Ironic's default ipmi_priv_level (and ipmitool's).
// It is always passed, as Ironic does, so ipmitool's own default never
// matters.
const defaultPrivLevel = "ADMINISTRATOR"

// Name implements bmclib's bmc.Provider: the name recorded as the provider
// that answered.
func (p *ipmitoolProvider) Name() string { return "ipmitool" }

// Open implements bmclib's bmc.Opener. Every ipmitool command opens and
// closes its own IPMI session, so there is nothing to open: the first
// command proves the credentials. (bmclib's provider ran "chassis power
// status" here, one more session per operation for small BMCs to set up.)
func (p *ipmitoolProvider) Open(context.Context) error { return nil }

// Close implements bmclib's bmc.Closer.
func (p *ipmitoolProvider) Close(context.Context) error { return nil }

// PowerStateGet implements bmclib's bmc.PowerStateGetter; it returns
// ipmitool's output ("Chassis Power is on").
func (p *ipmitoolProvider) PowerStateGet(ctx context.Context) (string, error) {
	return p.run(ctx, "chassis", "power", "status")
}

// chassisPowerReply is what ipmitool prints when the BMC accepted a
// "chassis power" command; the state names are the Manager's primitives,
// which are bmclib's.
var chassisPowerReply = map[string]string{
	"on":    "Chassis Power Control: Up/On",
	"off":   "Chassis Power Control: Down/Off",
	"soft":  "Chassis Power Control: Soft",
	"reset": "Chassis Power Control: Reset",
	"cycle": "Chassis Power Control: Cycle",
}

// PowerSet implements bmclib's bmc.PowerSetter with exactly one ipmitool
// command. bmclib's provider read the power state first, twice for "on";
// the Manager has just read it and decides what to send.
func (p *ipmitoolProvider) PowerSet(ctx context.Context, state string) (bool, error) {
	state = strings.ToLower(state)
	want, ok := chassisPowerReply[state]
	if !ok {
		return false, fmt.Errorf("%w: power state %q", ErrUnsupported, state)
	}
	out, err := p.run(ctx, "chassis", "power", state)
	if err != nil {
		return false, err
	}
	if !strings.Contains(out, want) {
		return false, fmt.Errorf("ipmitool chassis power %s: %s", state, cleanIpmitoolOutput(out))
	}
	return true, nil
}

// BootDeviceSet implements bmclib's bmc.BootDeviceSetter.
func (p *ipmitoolProvider) BootDeviceSet(ctx context.Context, device string, persistent, efi bool) (bool, error) {
	device = strings.ToLower(device)
	cmd := []string{"chassis", "bootdev", device}
	var opts []string
	if persistent {
		opts = append(opts, "persistent")
	}
	if efi {
		opts = append(opts, "efiboot")
	}
	if len(opts) > 0 {
		cmd = append(cmd, "options="+strings.Join(opts, ","))
	}
	out, err := p.run(ctx, cmd...)
	if err != nil {
		return false, err
	}
	// ipmitool exits 0 even when the BMC refused the boot parameters
	// ("Set Chassis Boot Parameter 5 failed: Insufficient privilege
	// level"); only this line says it worked.
	if !strings.Contains(out, "Set Boot Device to "+device) {
		return false, fmt.Errorf("ipmitool %s: %s", strings.Join(cmd, " "), cleanIpmitoolOutput(out))
	}
	return true, nil
}

// bootParam5 reads the boot flags (boot parameter 5). It is not bmclib's
// BootDeviceOverrideGetter: that result has no room for "the BMC marks the
// flags invalid" (ipmi_sim does), which decides whether the options can be
// verified.
func (p *ipmitoolProvider) bootParam5(ctx context.Context) (bootOverride, error) {
	out, err := p.run(ctx, "chassis", "bootparam", "get", "5")
	if err != nil {
		return bootOverride{}, err
	}
	return parseBootParam5(out)
}

// suites are the cipher suites to try, the one that worked first. Without
// ipmi_cipher_suite: 3 then 17, as bmclib does (ipmitool's own choice
// queries the BMC's cipher suites first, which BMCs like ipmi_sim do not
// answer, costing -N seconds on every command).
func (p *ipmitoolProvider) suites() []string {
	if p.t.CipherSuite != "" {
		return []string{p.t.CipherSuite}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.suite == "17" {
		return []string{"17", "3"}
	}
	return []string{"3", "17"}
}

// run runs one ipmitool command and returns its combined output. The next
// cipher suite is tried only when the session could not be established: a
// command the BMC refused inside a session would fail the same way, and its
// own error is the one worth reporting.
func (p *ipmitoolProvider) run(ctx context.Context, command ...string) (string, error) {
	var errs []error
	for _, suite := range p.suites() {
		out, err := p.runSuite(ctx, suite, command)
		if err == nil {
			p.mu.Lock()
			p.suite = suite
			p.mu.Unlock()
			return out, nil
		}
		errs = append(errs, err)
		if ctx.Err() != nil || !strings.Contains(out, "Unable to establish") {
			break
		}
	}
	return "", errors.Join(errs...)
}

func (p *ipmitoolProvider) runSuite(ctx context.Context, suite string, command []string) (string, error) {
	args := ipmitoolArgs(p.t, suite, command)
	cmd := exec.CommandContext(ctx, p.path, args...)
	// -E: the password travels in the child's environment, never on its
	// command line (visible to every local user in ps). Nothing else is
	// inherited: ipmitool needs no other variable, and IPMITOOL_PASSWORD
	// from our own environment would take precedence over IPMI_PASSWORD.
	cmd.Env = []string{"IPMI_PASSWORD=" + p.t.Password}
	// Never hang on the output pipe after a kill.
	cmd.WaitDelay = time.Second
	// args hold no secret.
	p.log.DebugContext(ctx, "bmc: ipmitool", "args", args)
	b, err := cmd.CombinedOutput()
	out := string(b)
	if err != nil {
		return out, fmt.Errorf("ipmitool %s (cipher suite %s): %w: %s", strings.Join(command, " "), suite, err, cleanIpmitoolOutput(out))
	}
	return out, nil
}

// ipmitoolArgs is ipmitool's command line for one command, as Ironic builds
// it (ironic/drivers/modules/ipmitool.py _get_ipmitool_args): lanplus, the
// privilege level always, the cipher suite; plus -N, the per-message
// timeout bmclib used, and -E for the password.
func ipmitoolArgs(t Target, suite string, command []string) []string {
	priv := t.PrivLevel
	if priv == "" {
		priv = defaultPrivLevel
	}
	args := []string{
		"-I", "lanplus",
		"-H", t.Host, // ipmitool takes IPv6 literals without brackets
		"-p", strconv.Itoa(t.Port),
		"-U", t.Username,
		"-E",
		"-L", priv,
		"-C", suite,
		"-N", strconv.Itoa(int(ipmitoolNoReply / time.Second)),
	}
	return append(args, command...)
}

// cleanIpmitoolOutput makes ipmitool's output fit on one line of a node's
// last_error, without the noise ipmitool prints on every command below
// ADMINISTRATOR ("Get HPM.x Capabilities request failed, compcode = d4":
// the probe needs more privilege and does not matter).
func cleanIpmitoolOutput(out string) string {
	var lines []string
	for _, l := range strings.Split(out, "\n") {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "Get HPM.x Capabilities request failed") {
			continue
		}
		lines = append(lines, l)
	}
	return strings.Join(lines, "; ")
}
