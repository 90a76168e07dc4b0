package bmc

// What an operator reaches for when a node hangs: the BMC's System Event
// Log (what the hardware saw: ECC errors, thermal trips, a watchdog) and
// a non-maskable interrupt, which makes a hung Linux kernel panic and
// print (or kdump) its state. Redfish: the SEL log services (sel_redfish.go)
// and bmclib's SendNMI (ComputerSystem.Reset with ResetType Nmi on the
// system the transport narrows to); IPMI through ipmitool ("sel elist", "chassis
// power diag", as Ironic's ipmitool management does).

import (
	"context"
	"fmt"
	"strings"
)

// SELEntry is one entry of a BMC's System Event Log.
type SELEntry struct {
	ID string `json:"id"`
	// Created is the time the BMC gives, as it gives it (BMC clocks and
	// formats vary; IPMI has date and time, Redfish RFC 3339).
	Created string `json:"created"`
	// Sensor is what logged it (IPMI sensor, Redfish Description).
	Sensor  string `json:"sensor"`
	Message string `json:"message"`
}

// MaxSELEntries bounds the entries returned: the newest are kept.
const MaxSELEntries = 1000

// diagSession is a session that can read the SEL and send an NMI.
type diagSession interface {
	sel(ctx context.Context) ([]SELEntry, error)
	nmi(ctx context.Context) error
}

// SystemEventLog reads the node's SEL, oldest first, at most
// MaxSELEntries (the newest).
func (m *Manager) SystemEventLog(ctx context.Context, t Target) ([]SELEntry, Outcome, error) {
	var out []SELEntry
	o, err := m.run(ctx, t, "get_sel", func(ctx context.Context, op *operation) error {
		return op.retry(ctx, "get_sel", func(ctx context.Context, s session) error {
			d, ok := s.(diagSession)
			if !ok {
				return fmt.Errorf("%w: the %s driver cannot read the SEL", ErrUnsupported, t.HardwareType)
			}
			var err error
			out, err = d.sel(ctx)
			return err
		})
	})
	if len(out) > MaxSELEntries {
		out = out[len(out)-MaxSELEntries:]
	}
	return out, o, err
}

// InjectNMI sends the node a non-maskable interrupt. Nothing can be read
// back (the OS decides what an NMI does), so it counts once the BMC
// accepted it. A busy BMC is retried: it refused, so nothing was sent.
func (m *Manager) InjectNMI(ctx context.Context, t Target) (Outcome, error) {
	return m.run(ctx, t, "inject_nmi", func(ctx context.Context, op *operation) error {
		return op.retry(ctx, "inject_nmi", func(ctx context.Context, s session) error {
			d, ok := s.(diagSession)
			if !ok {
				return fmt.Errorf("%w: the %s driver cannot inject an NMI", ErrUnsupported, t.HardwareType)
			}
			return d.nmi(ctx)
		})
	})
}

func (s *redfishSession) nmi(ctx context.Context) error {
	s.tr.reset()
	return s.classify(ctx, s.cl.SendNMI(ctx))
}

func (s *ipmiSession) sel(ctx context.Context) ([]SELEntry, error) {
	out, err := timedRead(ctx, s, func() (string, error) { return s.prov.run(ctx, "sel", "elist") })
	if err != nil {
		return nil, err
	}
	return parseSELList(out), nil
}

func (s *ipmiSession) nmi(ctx context.Context) error {
	return s.timed(ctx, func() error {
		_, err := s.prov.run(ctx, "chassis", "power", "diag")
		return err
	})
}

// parseSELList reads ipmitool's "sel elist" (or "sel list"):
//
//	1 | 11/29/2026 | 03:00:01 | Temperature CPU1 | Upper Critical going high | Asserted
//
// Lines it cannot split are kept whole as the message: the BMC's words
// matter more than the layout.
func parseSELList(out string) []SELEntry {
	var entries []SELEntry
	for _, line := range strings.Split(out, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "SEL has no entries") {
			continue
		}
		f := strings.Split(line, "|")
		for i := range f {
			f[i] = strings.TrimSpace(f[i])
		}
		switch {
		case len(f) >= 5:
			entries = append(entries, SELEntry{ID: f[0], Created: strings.TrimSpace(f[1] + " " + f[2]), Sensor: f[3], Message: strings.Join(f[4:], " | ")})
		case len(f) == 4:
			entries = append(entries, SELEntry{ID: f[0], Created: f[1], Sensor: f[2], Message: f[3]})
		default:
			entries = append(entries, SELEntry{Message: line})
		}
	}
	return entries
}

func (s fakeSession) sel(context.Context) ([]SELEntry, error) {
	var out []SELEntry
	err := s.f.do(s.id, "get_sel", func(st *FakeNodeState, _ FakeKnobs) error {
		out = append(out, st.SEL...)
		return nil
	})
	return out, err
}

// nmi on a fake node counts the NMI and logs it in the fake SEL.
func (s fakeSession) nmi(context.Context) error {
	return s.f.do(s.id, "inject_nmi", func(st *FakeNodeState, _ FakeKnobs) error {
		st.NMIs++
		st.SEL = append(st.SEL, SELEntry{ID: fmt.Sprint(len(st.SEL) + 1), Sensor: "NMI", Message: "Diagnostic interrupt (NMI) asserted"})
		return nil
	})
}
