package conductor

// The BIOS settings and firmware versions cache: after a node's
// management access is verified (manage) and after cleaning, the
// conductor stores the settings the node's BIOS reports and the firmware
// versions its BMC reports, as Ironic's conductor calls the bios
// interface's cache_bios_settings and the firmware interface's
// cache_firmware_components then, so that GET /v1/nodes/{node}/bios and
// /firmware show them. Only drivers that can read them (BIOSReader, a
// firmware interface) take part.

import (
	"context"
	"errors"
	"log/slog"

	"github.com/anvil-metal/anvil/bmc"
	"github.com/anvil-metal/anvil/controller/store"
	"github.com/anvil-metal/anvil/protocol"
)

// BIOSReader is a Driver that can read a node's BIOS settings, with the
// attribute registry's fields where the BMC has one.
type BIOSReader interface {
	BIOSSettings(ctx context.Context, n *store.Node) ([]store.BIOSSetting, error)
}

// StepArgsChecker is a Driver that checks the arguments of its own steps
// against the node itself (bios.apply_configuration's settings against
// the BIOS attribute registry), beyond what argsinfo says, so that a
// request naming them is refused with a 400 before anything runs. steps
// are every step of one request: a checker reads what it needs once.
type StepArgsChecker interface {
	CheckStepArgs(ctx context.Context, n *store.Node, steps []protocol.Step) error
}

// biosCache is where the settings and firmware versions read are kept.
type biosCache interface {
	ReplaceBIOSSettings(ctx context.Context, nodeUUID string, settings []store.BIOSSetting) error
	ReplaceFirmwareComponents(ctx context.Context, nodeUUID string, comps []store.FirmwareComponent) error
}

// refreshBIOSAndFirmware replaces n's cached settings and firmware
// versions by what d reads now. A failure is logged and the operation goes
// on, as in Ironic: a stale cache is no reason to fail a verify or a
// cleaning.
func refreshBIOSAndFirmware(ctx context.Context, st biosCache, log *slog.Logger, n *store.Node, d Driver) {
	if fd := firmwareOf(n, d); fd != nil {
		comps, err := fd.FirmwareComponents(ctx, n)
		if err == nil {
			err = st.ReplaceFirmwareComponents(ctx, n.UUID, firmwareToStore(comps, nil))
		}
		if err != nil {
			log.Warn("caching the firmware versions failed; the cache keeps what it had", "node", n.UUID, "driver", d.Name(), "err", err)
		}
	}
	r, ok := d.(BIOSReader)
	if !ok {
		return
	}
	settings, err := r.BIOSSettings(ctx, n)
	if err == nil {
		err = st.ReplaceBIOSSettings(ctx, n.UUID, settings)
	}
	switch {
	case errors.Is(err, bmc.ErrUnsupported):
		// IPMI: no BIOS settings at all, on every manage; nothing to warn of
		log.Debug("the hardware type reads no BIOS settings", "node", n.UUID, "driver", d.Name(), "err", err)
	case err != nil:
		log.Warn("caching the BIOS settings failed; the cache keeps what it had", "node", n.UUID, "driver", d.Name(), "err", err)
	}
}
