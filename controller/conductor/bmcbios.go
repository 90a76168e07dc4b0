package conductor

// The BMC hardware types' bios interface: the settings cache read
// (BIOSReader), the out-of-band steps bios.apply_configuration and
// bios.factory_reset of Redfish nodes, and the check of their arguments
// against the node's attribute registry before a request is accepted
// (StepArgsChecker). IPMI has no BIOS settings: its nodes offer neither
// step and a request naming one is refused.

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/anvil-metal/anvil/bmc"
	"github.com/anvil-metal/anvil/controller/store"
	"github.com/anvil-metal/anvil/internal/pause"
	"github.com/anvil-metal/anvil/protocol"
)

// Defaults of BMCDriver.BIOSApplyTimeout and BIOSPollInterval: a real
// server's POST, which applies pending settings, takes minutes; the
// read-back polls at most every half second, so that the node moves on
// within half a second of the BIOS showing the new values (issue #31: at
// most a second of the controller's own). A read is a few Redfish GETs;
// the BMC's lock serialises them with everything else sent to it.
const (
	defaultBIOSApplyTimeout = 15 * time.Minute
	defaultBIOSPollInterval = 500 * time.Millisecond
)

// biosSteps are Ironic's redfish bios interface steps: manual only
// (priority 0) unless a priority override, a deploy template or a
// request's deploy_steps give them one.
func biosSteps() []protocol.Step {
	return []protocol.Step{
		{Interface: protocol.InterfaceBIOS, Step: "apply_configuration", Priority: 0,
			ArgsInfo: map[string]protocol.ArgInfo{"settings": {Description: "A list of BIOS settings to be applied", Required: true}}},
		{Interface: protocol.InterfaceBIOS, Step: "factory_reset", Priority: 0},
	}
}

// hasBIOS: IPMI has no BIOS settings; Redfish (and fake-hardware through
// the bmc package's fake, which tests use) do.
func (d *BMCDriver) hasBIOS() bool { return d.hw != bmc.HardwareIPMI }

// biosEnabled: the type has BIOS settings and the node has not turned its
// bios interface off (no-bios), as in Ironic.
func (d *BMCDriver) biosEnabled(n *store.Node) bool {
	return d.hasBIOS() && n.Interfaces.BIOS != "no-bios"
}

// errNoBIOS says why n offers no bios step.
func (d *BMCDriver) errNoBIOS(n *store.Node, key string) error {
	if d.hasBIOS() {
		return fmt.Errorf("step %s: node %s has bios_interface no-bios (set it to %s to change BIOS settings)", key, n.UUID, d.hw)
	}
	return fmt.Errorf("step %s: BIOS settings are not supported by the %s driver (use the redfish hardware type)", key, d.hw)
}

// BIOSSettings implements BIOSReader. On IPMI, or with no-bios, it fails
// with bmc.ErrUnsupported without contacting the BMC (refreshBIOSAndFirmware
// then leaves the cache alone quietly).
func (d *BMCDriver) BIOSSettings(ctx context.Context, n *store.Node) ([]store.BIOSSetting, error) {
	if !d.biosEnabled(n) {
		return nil, fmt.Errorf("%w: %w", bmc.ErrUnsupported, d.errNoBIOS(n, "cache_bios_settings"))
	}
	t, err := d.target(n)
	if err != nil {
		return nil, err
	}
	b, _, err := d.m.BIOS(ctx, t)
	if err != nil {
		return nil, err
	}
	return biosToStore(b), nil
}

// biosToStore maps the BMC's values and registry to Ironic's BIOS
// settings: values as strings (what Ironic's string column holds after
// it stored Redfish's value, see biosString), the registry's fields where
// it has the attribute, and the pending value where one differs.
func biosToStore(b bmc.BIOS) []store.BIOSSetting {
	out := make([]store.BIOSSetting, 0, len(b.Current))
	for _, name := range slices.Sorted(maps.Keys(b.Current)) {
		s := store.BIOSSetting{Name: name, Value: biosString(b.Current[name])}
		// BMCs list in Bios/Settings only what changes (iDRAC) or every
		// attribute (HPE): a pending value is one that differs.
		if v, ok := b.Pending[name]; ok {
			if p := biosString(v); p != s.Value {
				s.PendingValue = &p
			}
		}
		if b.Registry != nil {
			if a, ok := b.Registry.Attributes[name]; ok {
				s.AttributeType = a.Type
				s.AllowableValues = slices.Clone(a.AllowableValues)
				s.LowerBound, s.UpperBound = intPtr(a.LowerBound), intPtr(a.UpperBound)
				s.MinLength, s.MaxLength = intPtr(a.MinLength), intPtr(a.MaxLength)
				ro, reset, unique := a.ReadOnly || a.Immutable, a.ResetRequired, a.Unique
				s.ReadOnly, s.ResetRequired, s.Unique = &ro, &reset, &unique
			}
		}
		out = append(out, s)
	}
	return out
}

func intPtr(p *int64) *int {
	if p == nil {
		return nil
	}
	v := int(*p)
	return &v
}

// biosString is what Ironic shows for a Redfish value: its string column
// as SQLite or MySQL give it back, so a boolean is "1" or "0" (not
// Python's True: Ironic 21.4 against the same BMC shows "1", see
// cmd/anvil-controller/compat_bios_test.go), integers without a fraction;
// a null (a password) is empty.
func biosString(v any) string {
	switch x := v.(type) {
	case nil:
		return ""
	case string:
		return x
	case bool:
		if x {
			return "1"
		}
		return "0"
	case int64:
		return strconv.FormatInt(x, 10)
	case float64:
		if x == float64(int64(x)) {
			return strconv.FormatInt(int64(x), 10)
		}
		return strconv.FormatFloat(x, 'g', -1, 64)
	}
	return fmt.Sprint(v)
}

// settingsArg reads apply_configuration's settings argument: a list of
// {"name": ..., "value": ...}, as Ironic's.
func settingsArg(args map[string]any) (map[string]any, error) {
	raw, ok := args["settings"].([]any)
	if !ok {
		return nil, fmt.Errorf("argument settings must be a list of {\"name\": ..., \"value\": ...}, got %T", args["settings"])
	}
	out := make(map[string]any, len(raw))
	for i, item := range raw {
		m, ok := item.(map[string]any)
		name, _ := m["name"].(string)
		if !ok || name == "" {
			return nil, fmt.Errorf("argument settings: item %d has no name", i)
		}
		v, given := m["value"]
		if !given {
			return nil, fmt.Errorf("argument settings: %s has no value", name)
		}
		if _, dup := out[name]; dup {
			return nil, fmt.Errorf("argument settings: %s is given twice", name)
		}
		out[name] = v
	}
	if len(out) == 0 {
		return nil, errors.New("argument settings is empty")
	}
	return out, nil
}

// typedSettings converts the strings the registry types as integers or
// booleans ("10", "True"): the values the BIOS cache shows are strings,
// and operators copy them into requests, as they can with Ironic.
func typedSettings(reg *bmc.Registry, settings map[string]any) map[string]any {
	out := maps.Clone(settings)
	if reg == nil {
		return out
	}
	for name, v := range settings {
		s, isStr := v.(string)
		if !isStr {
			continue
		}
		switch reg.Attributes[name].Type {
		case bmc.AttrInteger:
			if n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64); err == nil {
				out[name] = n
			}
		case bmc.AttrBoolean:
			if b, err := strconv.ParseBool(s); err == nil {
				out[name] = b
			}
		}
	}
	return out
}

// CheckStepArgs implements StepArgsChecker: bios steps on IPMI are
// refused, and apply_configuration's settings are checked against the
// registry the BMC publishes now, read once for the request. The read is
// the BMC's (not the cache's): the cache may be older than a firmware
// update, and the API call is synchronous anyway. A registry that cannot
// be read defers the check to the step, which validates again.
func (d *BMCDriver) CheckStepArgs(ctx context.Context, n *store.Node, steps []protocol.Step) error {
	var reg *bmc.Registry
	read := false
	for _, s := range steps {
		if s.Interface == protocol.InterfaceFirmware {
			if err := d.checkFirmwareArgs(n, s); err != nil {
				return err
			}
			continue
		}
		if s.Interface != protocol.InterfaceBIOS {
			continue
		}
		if !d.biosEnabled(n) {
			return d.errNoBIOS(n, s.Key())
		}
		if s.Step != "apply_configuration" {
			continue
		}
		if _, given := s.Args["settings"]; !given {
			continue // the argsinfo check names the missing argument
		}
		settings, err := settingsArg(s.Args)
		if err != nil {
			return fmt.Errorf("step %s: %w", s.Key(), err)
		}
		if !read {
			read = true
			reg = d.registry(ctx, n)
		}
		if reg == nil {
			continue
		}
		if err := bmc.ValidateBIOS(*reg, typedSettings(reg, settings)); err != nil {
			return fmt.Errorf("step %s: %w", s.Key(), err)
		}
	}
	return nil
}

// registry reads n's BIOS registry; nil when the BMC has none or cannot
// be read now (logged in the node's history).
func (d *BMCDriver) registry(ctx context.Context, n *store.Node) *bmc.Registry {
	t, err := d.target(n)
	if err != nil {
		return nil
	}
	b, o, err := d.m.BIOS(ctx, t)
	switch {
	case err != nil:
		d.note(ctx, n.UUID, "WARNING", fmt.Sprintf("bios: the settings requested could not be checked before cleaning (the step checks them): %v", err))
	case b.Registry == nil:
		d.note(ctx, n.UUID, "INFO", "bios: the BMC publishes no attribute registry, the settings requested are sent unchecked: "+b.NoRegistry)
	default:
		d.record(ctx, n, "BIOS registry read to check the requested settings", o, nil)
	}
	return b.Registry
}

// RebootsNode: both bios steps reboot the node to apply what they asked,
// and firmware.update to activate BIOS and NIC images.
func (d *BMCDriver) RebootsNode(s protocol.Step) bool {
	return d.hasBIOS() && (s.Interface == protocol.InterfaceBIOS || s.Key() == "firmware.update")
}

// executeBIOSStep runs a bios step. Both are synchronous: write, reboot
// (the BIOS applies pending settings at POST), read back.
func (d *BMCDriver) executeBIOSStep(ctx context.Context, n *store.Node, s protocol.Step) error {
	if !d.biosEnabled(n) {
		return d.errNoBIOS(n, s.Key())
	}
	t, err := d.target(n)
	if err != nil {
		return err
	}
	switch s.Step {
	case "apply_configuration":
		return d.applyConfiguration(ctx, n, t, s)
	case "factory_reset":
		return d.factoryReset(ctx, n, t)
	}
	return fmt.Errorf("%s has no out-of-band step %s", d.hw, s.Key())
}

// applyConfiguration writes only what differs from the current values:
// nothing to change costs no write and no reboot.
func (d *BMCDriver) applyConfiguration(ctx context.Context, n *store.Node, t bmc.Target, s protocol.Step) error {
	requested, err := settingsArg(s.Args)
	if err != nil {
		return err
	}
	before, _, err := d.m.BIOS(ctx, t)
	if err != nil {
		return fmt.Errorf("reading the BIOS: %w", err)
	}
	requested = typedSettings(before.Registry, requested)
	if before.Registry != nil {
		if err := bmc.ValidateBIOS(*before.Registry, requested); err != nil {
			return err
		}
	}
	changed := bmc.Diff(before.Current, requested)
	if len(changed) == 0 {
		d.note(ctx, n.UUID, "INFO", fmt.Sprintf("bios: apply_configuration: nothing to change (%d setting(s) already as asked)", len(requested)))
		return nil
	}
	names := strings.Join(slices.Sorted(maps.Keys(changed)), ", ")
	o, err := d.m.ApplyBIOSWith(ctx, t, before, changed)
	d.record(ctx, n, "BIOS settings written, pending the next boot: "+names, o, err)
	if err != nil {
		return err
	}
	err = d.rebootToApply(ctx, n, t, func(b bmc.BIOS) error { return bmc.VerifyApplied(changed, b.Current) })
	if err != nil {
		return err
	}
	d.note(ctx, n.UUID, "INFO", "bios: BIOS settings applied and read back: "+names)
	return nil
}

// factoryReset asks for the defaults, reboots, and checks the attributes
// the registry gives a default for (those a client can set; read-only
// ones such as a service tag keep their own value).
func (d *BMCDriver) factoryReset(ctx context.Context, n *store.Node, t bmc.Target) error {
	before, _, err := d.m.BIOS(ctx, t)
	if err != nil {
		return fmt.Errorf("reading the BIOS: %w", err)
	}
	defaults := map[string]any{}
	if before.Registry != nil {
		for name, a := range before.Registry.Attributes {
			if a.Default != nil && !a.ReadOnly && !a.Immutable && !a.WriteOnly && a.Type != bmc.AttrPassword {
				defaults[name] = a.Default
			}
		}
	}
	o, err := d.m.ResetBIOS(ctx, t)
	d.record(ctx, n, "BIOS reset to defaults asked, pending the next boot", o, err)
	if err != nil {
		return err
	}
	err = d.rebootToApply(ctx, n, t, func(b bmc.BIOS) error { return bmc.VerifyApplied(defaults, b.Current) })
	if err != nil {
		return err
	}
	d.note(ctx, n.UUID, "INFO", fmt.Sprintf("bios: BIOS reset to its defaults (%d checked against the registry)", len(defaults)))
	return nil
}

// rebootToApply boots the node so that the BIOS applies what is pending,
// then reads the BIOS until check passes or BIOSApplyTimeout (a POST takes
// minutes; the last check's error, naming each attribute asked and read
// back, is the step's). The node ends in the power state it was found in:
// a node that was on is rebooted (it stays on), one that was off is
// powered on to apply and powered off again, so that the flow around the
// step (cleaning's own power handling) sees what it left.
func (d *BMCDriver) rebootToApply(ctx context.Context, n *store.Node, t bmc.Target, check func(bmc.BIOS) error) error {
	ps, _, err := d.m.PowerState(ctx, t)
	if err != nil {
		return fmt.Errorf("reading the power state before the reboot that applies the BIOS settings: %w", err)
	}
	wasOn := ps == bmc.PowerOn
	boot := Rebooting
	if !wasOn {
		boot = PowerOn
	}
	if err := d.SetPower(ctx, n, boot); err != nil {
		return fmt.Errorf("booting to apply the BIOS settings: %w", err)
	}
	verr := d.pollBIOS(ctx, t, check)
	if !wasOn {
		if _, err := powerOff(ctx, d, n, offLeaveOn); err != nil && verr == nil {
			verr = fmt.Errorf("powering off again after applying the BIOS settings: %w", err)
		}
	}
	return verr
}

// biosPollFirst is the shortest wait between two read-backs of pollBIOS.
const biosPollFirst = 250 * time.Millisecond

// pollBIOS reads the BIOS back until check passes. The waits between reads
// grow with the time already waited: a tenth of it, at least biosPollFirst
// and at most BIOSPollInterval. A BIOS that applies within seconds (a
// virtual BMC, a quick POST) is seen within a fraction of a second, not up
// to BIOSPollInterval later (which made a 3 s apply take 15 s, see
// BenchmarkBIOSApplyToManageable); a POST of minutes still costs a few
// dozen reads, the time lost staying within a tenth of the BMC's own.
func (d *BMCDriver) pollBIOS(ctx context.Context, t bmc.Target, check func(bmc.BIOS) error) error {
	timeout, every := d.BIOSApplyTimeout, d.BIOSPollInterval
	if timeout <= 0 {
		timeout = defaultBIOSApplyTimeout
	}
	if every <= 0 {
		every = defaultBIOSPollInterval
	}
	start := time.Now()
	deadline := start.Add(timeout)
	for {
		// Values only: the registry was read before the write and a POST
		// does not change it.
		b, _, err := d.m.BIOSValues(ctx, t)
		if err == nil {
			if err = check(b); err == nil {
				return nil
			}
		}
		wait := min(every, max(biosPollFirst, time.Since(start)/10))
		if time.Now().Add(wait).After(deadline) {
			return fmt.Errorf("after the reboot (waited %s): %w", timeout, err)
		}
		if !pause.For(ctx, wait) {
			return fmt.Errorf("waiting for the BIOS settings to apply: %w (last read: %w)", ctx.Err(), err)
		}
	}
}
