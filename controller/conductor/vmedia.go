package conductor

// Virtual media: the agent's boots from an ISO the node's BMC attaches,
// a part of the agents' boots (agents.go).

import (
	"context"
	"fmt"

	"github.com/anvil-metal/anvil/controller/store"
)

// BootVirtualMedia is Ironic's boot interface for booting the agent
// ramdisk from an ISO the BMC attaches as a virtual CD, without PXE or
// DHCP.
const BootVirtualMedia = "redfish-virtual-media"

// VirtualMedia makes the per-node ISOs of virtual-media boots
// (controller/vmedia).
type VirtualMedia interface {
	// Prepare starts a new virtual-media boot of the node and returns the
	// URL its BMC fetches the node's ISO from (publicURL: the node's
	// external_http_url or anvil_public_url, "" for the controller's).
	Prepare(nodeUUID, publicURL string) (string, error)
	// Discard removes the node's ISO file; the boot stays active.
	Discard(nodeUUID string)
	// Release forgets the node's boot and removes its ISO.
	Release(nodeUUID string)
	// Active reports whether the node has a prepared, unreleased boot.
	Active(nodeUUID string) bool
}

// MediaDriver is a Driver whose BMC has virtual media.
type MediaDriver interface {
	// InsertMedia attaches the ISO at url as the node's virtual CD.
	InsertMedia(ctx context.Context, n *store.Node, url string) error
	// EjectMedia ejects the node's virtual media.
	EjectMedia(ctx context.Context, n *store.Node) error
}

func usesVirtualMedia(n *store.Node) bool { return n.Interfaces.Boot == BootVirtualMedia }

// mediaBaseURL is the controller's URL as the node's BMC reaches it:
// driver_info external_http_url (Ironic's name for it), else the node's
// anvil_public_url, else "" (the controller's --public-url). The BMC's
// network and the node's may differ: the agent in the ISO still gets
// anvil_public_url / --public-url.
func mediaBaseURL(n *store.Node) string {
	for _, k := range []string{"external_http_url", "anvil_public_url"} {
		if u, _ := n.DriverInfo[k].(string); u != "" {
			return u
		}
	}
	return ""
}

// mediaActive: the node booted from virtual media and has not left.
func (c *agents) mediaActive(n *store.Node) bool {
	return usesVirtualMedia(n) && c.cfg.Media != nil && c.cfg.Media.Active(n.UUID)
}

// insertMedia prepares the node's ISO and has the BMC attach it; the
// caller then sets the CD as the next boot device and reboots.
func (c *agents) insertMedia(ctx context.Context, n *store.Node, d Driver) error {
	md, ok := d.(MediaDriver)
	if !ok {
		return fmt.Errorf("boot interface %s: hardware type %s has no virtual media (use redfish)", BootVirtualMedia, d.Name())
	}
	if c.cfg.Media == nil {
		return fmt.Errorf("boot interface %s: this controller has no agent ISO: start it with --boot-dir pointing at an image built with one (make image writes anvil.iso)", BootVirtualMedia)
	}
	url, err := c.cfg.Media.Prepare(n.UUID, mediaBaseURL(n))
	if err != nil {
		return err
	}
	if err := md.InsertMedia(ctx, n, url); err != nil {
		c.cfg.Media.Release(n.UUID)
		return fmt.Errorf("insert virtual media: %w", err)
	}
	return nil
}

// ejectMedia ejects a virtual-media node's CD and removes its ISO: when
// its agent has called back (the ISO holds a nonce that is used up by
// then) and again when the node leaves the ramdisk (leaving: the boot is
// over, its URL dies). Failing to eject does
// not fail the operation (the next virtual-media boot ejects first); it
// is recorded in the node's history.
func (c *agents) ejectMedia(ctx context.Context, n *store.Node, d Driver, why string, leaving bool) {
	if !usesVirtualMedia(n) {
		return
	}
	if c.cfg.Media != nil {
		if leaving {
			c.cfg.Media.Release(n.UUID)
		} else {
			c.cfg.Media.Discard(n.UUID)
		}
	}
	md, ok := d.(MediaDriver)
	if !ok {
		return
	}
	sev, msg := "INFO", "virtual media ejected ("+why+")"
	if err := md.EjectMedia(ctx, n); err != nil {
		sev, msg = "WARNING", fmt.Sprintf("ejecting the virtual media (%s) failed: %v", why, err)
	}
	if _, err := store.MutateNodeEvents(ctx, c.st, n.UUID, func(*store.Node) ([]*store.Event, error) {
		return []*store.Event{c.newEvent(n.UUID, sev, "boot", msg)}, nil
	}); err != nil {
		c.log.WarnContext(ctx, "conductor: recording an eject", "node", n.UUID, "err", err)
	}
}

// InsertMedia implements MediaDriver: the fake BMC has a CD that takes
// anything.
func (FakeDriver) InsertMedia(context.Context, *store.Node, string) error { return nil }

// EjectMedia implements MediaDriver.
func (FakeDriver) EjectMedia(context.Context, *store.Node) error { return nil }
