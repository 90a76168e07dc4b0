package conductor

// Ironic's calls on a node's BMC outside the flows: the virtual media API
// (attach and detach, API 1.89; the slots read live, 1.93) and the redfish
// vendor interface's vendor_passthru methods (event subscriptions, and
// the older eject_vmedia). Ironic runs each under the node's exclusive
// lock; here the node is reserved (Reservation: other requests get
// NodeLocked, as they do while a flow works on it) and its lease taken
// (no other controller starts work on it) for the call's length, then
// both are given back.

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"time"

	"github.com/anvil-metal/anvil/bmc"
	"github.com/anvil-metal/anvil/controller/state"
	"github.com/anvil-metal/anvil/controller/store"

	"github.com/anvil-metal/anvil/internal/redact"
)

// DataImages publishes images the controller downloads for the BMC to
// fetch (image_download_source "local"), one per node and device type.
type DataImages interface {
	// Publish downloads src and returns the URL the node's BMC fetches
	// it from (publicURL: the node's own base URL, "" for the
	// controller's).
	Publish(ctx context.Context, nodeUUID, device, src, publicURL string) (string, error)
	// Remove deletes what Publish left for the node and device.
	Remove(nodeUUID, device string)
}

// VmediaDevices are Ironic's virtual media device types
// (boot_devices.VMEDIA_DEVICES), in its order.
func VmediaDevices() []string { return []string{"disk", "cdrom", "floppy"} }

// mediaTypeOf maps a device type to the Redfish media type (Ironic's
// VMEDIA_DEVICES_MAP).
func mediaTypeOf(device string) string {
	switch device {
	case "cdrom":
		return bmc.MediaCD
	case "disk":
		return bmc.MediaUSBStick
	case "floppy":
		return bmc.MediaFloppy
	}
	return ""
}

// VmediaAttach is a POST /v1/nodes/{node}/vmedia.
type VmediaAttach struct {
	DeviceType     string
	ImageURL       string
	DownloadSource string // http, local (Ironic's default) or swift
}

// VmediaSlot is one slot in Ironic's GET /v1/nodes/{node}/vmedia shape.
type VmediaSlot struct {
	MediaTypes []string `json:"media_types"`
	Inserted   bool     `json:"inserted"`
	Image      *string  `json:"image"`
}

// vmediaCheckTimeout bounds the wait for an insert to show in its slot.
const vmediaCheckTimeout = 30 * time.Second

// nodeCalls runs the vmedia API and vendor passthru calls.
type nodeCalls struct {
	*core
	rt *runtime
}

// unsupported is Ironic's UnsupportedDriverExtension.
func unsupported(n *store.Node, extension string) error {
	return Invalid("Driver %s does not support %s (disabled or not implemented).", n.Driver, extension)
}

// driverFailure is a failure of the BMC while doing what was asked: a 500
// with its message, as Ironic's driver errors.
func driverFailure(err error, format string, a ...any) error {
	return Wrap(0, err, format, a...)
}

// bmcFor is the node's BMC driver and target when its hardware type has a
// BMC with Redfish services (ipmi has none: extension names the call).
func (v *nodeCalls) bmcFor(n *store.Node, extension string) (*BMCDriver, bmc.Target, error) {
	d, ok := v.drivers[n.Driver].(*BMCDriver)
	if !ok || d.hw == bmc.HardwareIPMI {
		return nil, bmc.Target{}, unsupported(n, extension)
	}
	t, err := d.target(n)
	if err != nil {
		return nil, t, Invalid("%v", err)
	}
	return d, t, nil
}

// hold reserves the node and takes its lease, after check; release gives
// both back. A node reserved already, or leased by another controller, is
// NodeLocked.
func (v *nodeCalls) hold(ctx context.Context, ident string, check func(n *store.Node) error) (*store.Node, func(), error) {
	// counted before the reservation is written, so the runtime never
	// takes this action's reservation for a stale one
	var counted string
	defer func() {
		if counted != "" {
			v.rt.holdEnded(counted)
		}
	}()
	n, err := store.MutateNode(ctx, v.st, ident, func(n *store.Node) error {
		if counted == "" {
			counted = n.UUID
			v.rt.holdStarted(counted)
		}
		if err := CheckUnlocked(n); err != nil {
			return err
		}
		if err := check(n); err != nil {
			return err
		}
		n.Reservation = strp(v.cfg.Host)
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	unreserve := func() {
		if _, err := store.MutateNode(context.WithoutCancel(ctx), v.st, n.UUID, func(m *store.Node) error {
			// A flow that started meanwhile (an agent's heartbeat moved a
			// wait state on) reserved the node under the same host name:
			// its reservation stays.
			if m.Reservation != nil && *m.Reservation == v.cfg.Host && !state.Working(state.State(m.ProvisionState)) && m.TargetPowerState == nil {
				m.Reservation = nil
			}
			return nil
		}); err != nil {
			v.log.Error("conductor: giving back a node's reservation", "node", n.UUID, "err", err)
		}
	}
	ok, fresh := v.rt.acquire(ctx, n)
	if !ok {
		unreserve()
		return nil, nil, Locked(n.UUID, "another controller")
	}
	v.rt.holdStarted(n.UUID) // the release's: the deferred holdEnded above ends the write's
	return n, func() {
		defer v.rt.holdEnded(n.UUID)
		unreserve()
		if cur, err := v.st.GetNode(context.WithoutCancel(ctx), n.UUID); fresh && err == nil && !needsWork(cur) {
			v.rt.release(context.WithoutCancel(ctx), n.UUID)
		}
	}, nil
}

// powerFailure is Ironic's refusal of a node in maintenance for a power
// failure.
func powerFailure(n *store.Node, what string) error {
	if n.Maintenance && n.Fault != nil && *n.Fault == "power failure" {
		return newError(CodeUnavailable, "Unable to %s virtual media for node %s due to power failure state", what, n.UUID)
	}
	return nil
}

// agentCD refuses the virtual media of a node that boots the agent from
// its CD: every device type, since BMCs offer slots that take several
// (a CD/USB slot), and an insert or eject for "disk" would then take the
// agent's ISO out.
func (v *nodeCalls) agentCD(n *store.Node, devices []string) error {
	if !usesVirtualMedia(n) {
		return nil
	}
	if state.LookupAllowed(state.State(n.ProvisionState)) || (v.cfg.Media != nil && v.cfg.Media.Active(n.UUID)) {
		what := "the cdrom slot is"
		if len(devices) > 0 && !slices.Contains(devices, "cdrom") {
			what = "its virtual media slots (which may take several device types) are"
		}
		return Conflict("Node %s boots the agent from its virtual CD (boot_interface %s, provision state %q): %s in use until the agent's boot ends.",
			n.UUID, BootVirtualMedia, n.ProvisionState, what)
	}
	return nil
}

// AttachVirtualMedia is Ironic's attach_virtual_media: the image is
// published as image_download_source asks, inserted into the first slot
// of the device type, and read back until the slot holds it. A failure
// leaves the slot empty and is said in the answer and the history.
func (v *nodeCalls) AttachVirtualMedia(ctx context.Context, ident string, req VmediaAttach) error {
	n, release, err := v.hold(ctx, ident, func(n *store.Node) error {
		if err := powerFailure(n, "attach"); err != nil {
			return err
		}
		return v.agentCD(n, []string{req.DeviceType})
	})
	if err != nil {
		return err
	}
	defer release()
	d, t, err := v.bmcFor(n, "attach_virtual_media")
	if err != nil {
		return err
	}
	image, err := v.publish(ctx, n, req)
	if err != nil {
		return err
	}
	timeout := v.cfg.VmediaCheckTimeout
	if timeout <= 0 {
		timeout = vmediaCheckTimeout
	}
	o, err := d.m.AttachMedia(ctx, t, mediaTypeOf(req.DeviceType), image, timeout)
	if err != nil {
		if req.DownloadSource == "local" && v.cfg.DataImages != nil {
			v.cfg.DataImages.Remove(n.UUID, req.DeviceType)
		}
		msg := fmt.Sprintf("Could not attach device %s to node %s: %v", req.DeviceType, n.UUID, err)
		v.event(ctx, n.UUID, "ERROR", "vmedia", msg)
		if errors.Is(err, bmc.ErrNoSlot) || errors.Is(err, bmc.ErrUnsupported) {
			return Wrap(CodeInvalid, err, "%s", msg)
		}
		return driverFailure(err, "%s", msg)
	}
	v.event(ctx, n.UUID, "INFO", "vmedia", fmt.Sprintf("Device %s attached to node %s from %s (checked in its slot; %d BMC command(s), %s)",
		req.DeviceType, n.UUID, redact.URL(req.ImageURL), o.Attempts, o.Duration.Round(time.Millisecond)))
	return nil
}

// publish is the URL the BMC fetches: image_url itself (http, and swift,
// which Ironic treats as http for anything but Glance images) or the
// controller's copy (local).
func (v *nodeCalls) publish(ctx context.Context, n *store.Node, req VmediaAttach) (string, error) {
	if req.DownloadSource != "local" {
		return req.ImageURL, nil
	}
	u, err := url.Parse(req.ImageURL)
	if err != nil {
		return "", Invalid("Unsupported or missing URL scheme: ")
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return "", Invalid("image_download_source is set to 'local' but the image URL %s uses the %s protocol which cannot be downloaded by the conductor. Set image_download_source to 'http' or remove it to use the default.",
			redact.URL(req.ImageURL), u.Scheme)
	}
	if v.cfg.DataImages == nil {
		return "", Invalid("image_download_source 'local' needs the controller to serve images, and this one does not: use 'http'")
	}
	out, err := v.cfg.DataImages.Publish(ctx, n.UUID, req.DeviceType, req.ImageURL, mediaBaseURL(n))
	if err != nil {
		msg := fmt.Sprintf("Could not attach device %s to node %s: %v", req.DeviceType, n.UUID, err)
		v.event(ctx, n.UUID, "ERROR", "vmedia", msg)
		return "", Wrap(CodeInvalid, err, "%s", msg)
	}
	return out, nil
}

// DetachVirtualMedia is Ironic's detach_virtual_media: the slots of the
// device types given (every slot when none) are ejected; the controller's
// copies of their images go.
func (v *nodeCalls) DetachVirtualMedia(ctx context.Context, ident string, devices []string) error {
	n, release, err := v.hold(ctx, ident, func(n *store.Node) error {
		if err := powerFailure(n, "detach"); err != nil {
			return err
		}
		return v.agentCD(n, devices)
	})
	if err != nil {
		return err
	}
	defer release()
	d, t, err := v.bmcFor(n, "detach_virtual_media")
	if err != nil {
		return err
	}
	var types []string
	for _, dev := range devices {
		types = append(types, mediaTypeOf(dev))
	}
	named := "all devices"
	if len(devices) > 0 {
		named = fmt.Sprint(devices)
	}
	if _, err := d.m.DetachMedia(ctx, t, types); err != nil {
		msg := fmt.Sprintf("Could not detach device(s) %s from node %s: %v", named, n.UUID, err)
		v.event(ctx, n.UUID, "ERROR", "vmedia", msg)
		return driverFailure(err, "%s", msg)
	}
	if v.cfg.DataImages != nil {
		for _, dev := range VmediaDevices() {
			if len(devices) == 0 || slices.Contains(devices, dev) {
				v.cfg.DataImages.Remove(n.UUID, dev)
			}
		}
	}
	v.event(ctx, n.UUID, "INFO", "vmedia", fmt.Sprintf("Device(s) %s detached from node %s", named, n.UUID))
	return nil
}

// GetVirtualMedia is Ironic's get_virtual_media: the slots as the BMC
// reports them now (a shared lock in Ironic: the node is not reserved).
func (v *nodeCalls) GetVirtualMedia(ctx context.Context, ident string) ([]VmediaSlot, error) {
	n, err := v.st.GetNode(ctx, ident)
	if err != nil {
		return nil, err
	}
	d, t, err := v.bmcFor(n, "get_virtual_media")
	if err != nil {
		return nil, err
	}
	slots, _, err := d.m.VirtualMedia(ctx, t)
	if errors.Is(err, bmc.ErrUnsupported) {
		return nil, Wrap(CodeInvalid, err, "No suitable virtual media device found")
	}
	if err != nil {
		return nil, driverFailure(err, "All virtual media GET attempts failed. Most recent error: %v", err)
	}
	out := make([]VmediaSlot, 0, len(slots))
	for _, s := range slots {
		vs := VmediaSlot{MediaTypes: s.MediaTypes, Inserted: s.Inserted}
		if vs.MediaTypes == nil {
			vs.MediaTypes = []string{}
		}
		if s.Image != "" {
			vs.Image = strp(s.Image)
		}
		out = append(out, vs)
	}
	return out, nil
}
