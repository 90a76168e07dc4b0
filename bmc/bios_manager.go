package bmc

import (
	"context"
	"fmt"
	"maps"
	"slices"
)

// biosSession is what the BIOS operations need from a session; only
// protocols with BIOS settings (Redfish, fake) implement it.
type biosSession interface {
	// bios reads current and pending values, and the registry's id.
	bios(ctx context.Context) (BIOS, error)
	// biosRegistry reads the attribute registry named id: nil and the
	// reason when the BMC publishes none. A command of its own, with its
	// own timeout: iDRAC's registry is a megabyte and slow to serve.
	biosRegistry(ctx context.Context, id string) (*Registry, string, error)
	// applyBios sets values to apply at the next boot.
	applyBios(ctx context.Context, settings map[string]any) error
	// resetBios asks for the defaults at the next boot.
	resetBios(ctx context.Context) error
}

// errNoBIOS is the error of a hardware type without BIOS settings.
func errNoBIOS(hw string) error {
	return fmt.Errorf("%w: BIOS settings are not supported by the %s driver (use the redfish hardware type)", ErrUnsupported, hw)
}

// runBIOS runs a BIOS operation; IPMI is refused without contacting the
// BMC, since IPMI has no BIOS settings at all.
func (m *Manager) runBIOS(ctx context.Context, t Target, name string, fn func(context.Context, *operation) error) (Outcome, error) {
	if t.HardwareType == HardwareIPMI {
		return Outcome{}, fmt.Errorf("%s %s: %w", name, t, errNoBIOS(t.HardwareType))
	}
	return m.run(ctx, t, name, fn)
}

// biosCall runs one BIOS command with retries.
func (op *operation) biosCall(ctx context.Context, what string, fn func(context.Context, biosSession) error) error {
	return op.retry(ctx, what, func(ctx context.Context, s session) error {
		bs, ok := s.(biosSession)
		if !ok {
			return errNoBIOS(op.t.HardwareType)
		}
		return fn(ctx, bs)
	})
}

// readBIOS reads the BIOS and, if withRegistry, its registry (not read
// again to verify a write).
func (op *operation) readBIOS(ctx context.Context, withRegistry bool) (BIOS, error) {
	var b BIOS
	err := op.biosCall(ctx, "get_bios", func(ctx context.Context, s biosSession) error {
		var err error
		b, err = s.bios(ctx)
		return err
	})
	if err != nil || !withRegistry {
		return b, err
	}
	err = op.biosCall(ctx, "get_bios_registry", func(ctx context.Context, s biosSession) error {
		var err error
		b.Registry, b.NoRegistry, err = s.biosRegistry(ctx, b.RegistryID)
		return err
	})
	return b, err
}

// BIOS reads the node's BIOS: current and pending values and, where the
// BMC publishes one, the attribute registry (BIOS.NoRegistry says why
// not otherwise). It finds the system as the power calls do
// (redfish_system_id, or the BMC's only system), whatever its id.
func (m *Manager) BIOS(ctx context.Context, t Target) (BIOS, Outcome, error) {
	var b BIOS
	out, err := m.runBIOS(ctx, t, "get_bios", func(ctx context.Context, op *operation) error {
		var err error
		b, err = op.readBIOS(ctx, true)
		return err
	})
	return b, out, err
}

// BIOSValues reads the current and pending values only, without the
// registry (a megabyte on iDRAC): for a caller that polls for values to
// take effect and already holds the registry.
func (m *Manager) BIOSValues(ctx context.Context, t Target) (BIOS, Outcome, error) {
	var b BIOS
	out, err := m.runBIOS(ctx, t, "get_bios", func(ctx context.Context, op *operation) error {
		var err error
		b, err = op.readBIOS(ctx, false)
		return err
	})
	return b, out, err
}

// ApplyBIOS sets BIOS attributes to take effect at the next boot. With a
// registry the settings are validated first (a *BIOSSettingsError, nothing
// sent) and integers sent as integers; then they are written to the
// pending settings, with the OnReset apply time when the BMC supports it,
// and read back as pending (or already current) — ErrVerify otherwise.
//
// It does not reset the system: the caller reboots (SetPower) and checks
// the result with BIOS and VerifyApplied. Use Diff first to skip a write,
// and its reboot, that would change nothing. No settings: nothing is done.
func (m *Manager) ApplyBIOS(ctx context.Context, t Target, settings map[string]any) (Outcome, error) {
	return m.applyBIOS(ctx, t, settings, func(ctx context.Context, op *operation) (BIOS, error) { return op.readBIOS(ctx, true) })
}

// ApplyBIOSWith is ApplyBIOS for a caller that has just read the BIOS
// with its registry (b, from BIOS): the registry, a megabyte on iDRAC,
// is not read again.
func (m *Manager) ApplyBIOSWith(ctx context.Context, t Target, b BIOS, settings map[string]any) (Outcome, error) {
	return m.applyBIOS(ctx, t, settings, func(context.Context, *operation) (BIOS, error) { return b, nil })
}

func (m *Manager) applyBIOS(ctx context.Context, t Target, settings map[string]any, read func(context.Context, *operation) (BIOS, error)) (Outcome, error) {
	if len(settings) == 0 {
		return Outcome{}, nil
	}
	return m.runBIOS(ctx, t, "apply_bios", func(ctx context.Context, op *operation) error {
		b, err := read(ctx, op)
		if err != nil {
			return err
		}
		send := maps.Clone(settings)
		if b.Registry != nil {
			if err := ValidateBIOS(*b.Registry, settings); err != nil {
				return err
			}
			for k, v := range settings {
				send[k], _ = b.Registry.Attributes[k].normalize(v)
			}
		} else {
			op.log.InfoContext(ctx, "bmc: BIOS settings sent unvalidated", "reason", b.NoRegistry)
		}
		// Names only: values may be passwords.
		op.log.InfoContext(ctx, "bmc: applying BIOS settings", "attributes", slices.Sorted(maps.Keys(send)))
		if err := op.biosCall(ctx, "set_bios", func(ctx context.Context, s biosSession) error {
			return s.applyBios(ctx, send)
		}); err != nil {
			return err
		}
		return op.poll(ctx, op.m.cfg.VerifyTimeout, func(ctx context.Context) (bool, string, error) {
			b, err := op.readBIOS(ctx, false)
			if err != nil {
				return false, "", err
			}
			// A BMC that applies at once shows them current, not pending.
			seen := maps.Clone(b.Current)
			maps.Copy(seen, b.Pending)
			if err := VerifyApplied(send, seen); err != nil {
				return false, err.Error(), nil
			}
			return true, "", nil
		})
	})
}

// ResetBIOS asks for every attribute's default at the next boot
// (#Bios.ResetBios). As with ApplyBIOS the caller reboots; it cannot be
// read back before then, so it is not verified here.
func (m *Manager) ResetBIOS(ctx context.Context, t Target) (Outcome, error) {
	return m.runBIOS(ctx, t, "reset_bios", func(ctx context.Context, op *operation) error {
		return op.biosCall(ctx, "reset_bios", func(ctx context.Context, s biosSession) error {
			return s.resetBios(ctx)
		})
	})
}
