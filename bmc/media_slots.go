package bmc

// Virtual media slots one by one (Ironic's vmedia API, 1.89 and 1.93):
// what each slot of the node's BMC holds, and an insert that is checked
// by reading the slot back rather than assumed. InsertMedia (media.go)
// is the agent boot's all-slots CD through bmclib; these calls address
// one slot of a media type through gofish on the same session, because
// bmclib v2.3.0 can neither read a slot nor pick one.

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/anvil-metal/anvil/internal/redact"
)

// Redfish media types (VirtualMedia.MediaTypes) of Ironic's vmedia
// device types: cdrom is CD, disk is USBStick, floppy is Floppy (sushy's
// VIRTUAL_MEDIA_* values, Ironic's VMEDIA_DEVICES_MAP).
const (
	MediaCD       = "CD"
	MediaDVD      = "DVD"
	MediaUSBStick = "USBStick"
	MediaFloppy   = "Floppy"
)

// MediaSlot is one virtual media slot as the BMC reports it.
type MediaSlot struct {
	// URI is the slot's resource; ID its last path element.
	URI, ID string
	// MediaTypes are the Redfish media types the slot takes (CD, DVD,
	// USBStick, Floppy).
	MediaTypes []string
	Inserted   bool
	// Image is the URL the slot holds ("": none).
	Image string
	// insert and eject are the slot's action targets ("": none).
	insert, eject string
}

// Takes reports whether the slot takes media of type mt; a CD goes into
// a DVD slot too, as Ironic does for BMCs with DVD-only slots.
func (s MediaSlot) Takes(mt string) bool {
	return slices.Contains(s.MediaTypes, mt) || (mt == MediaCD && slices.Contains(s.MediaTypes, MediaDVD))
}

// mediaSlotSession is what the slot operations need from a session; only
// protocols with virtual media (Redfish, fake) implement it.
type mediaSlotSession interface {
	mediaSlots(ctx context.Context) ([]MediaSlot, error)
	insertSlot(ctx context.Context, s MediaSlot, url string) error
	ejectSlot(ctx context.Context, s MediaSlot) error
}

// errNoMedia is the error of a hardware type without virtual media.
func errNoMedia(hw string) error {
	return fmt.Errorf("%w: virtual media is not supported by the %s driver (use the redfish hardware type)", ErrUnsupported, hw)
}

// runMedia runs a slot operation; IPMI is refused without contacting the
// BMC.
func (m *Manager) runMedia(ctx context.Context, t Target, name string, fn func(context.Context, *operation) error) (Outcome, error) {
	if t.HardwareType == HardwareIPMI {
		return Outcome{}, fmt.Errorf("%s %s: %w", name, t, errNoMedia(t.HardwareType))
	}
	return m.run(ctx, t, name, fn)
}

// mediaCall runs one slot command with retries.
func (op *operation) mediaCall(ctx context.Context, what string, fn func(context.Context, mediaSlotSession) error) error {
	return op.retry(ctx, what, func(ctx context.Context, s session) error {
		ms, ok := s.(mediaSlotSession)
		if !ok {
			return errNoMedia(op.t.HardwareType)
		}
		return fn(ctx, ms)
	})
}

func (op *operation) readSlots(ctx context.Context) ([]MediaSlot, error) {
	var slots []MediaSlot
	err := op.mediaCall(ctx, "get_virtual_media", func(ctx context.Context, s mediaSlotSession) error {
		var err error
		slots, err = s.mediaSlots(ctx)
		return err
	})
	return slots, err
}

// VirtualMedia reads the node's virtual media slots live from the BMC.
func (m *Manager) VirtualMedia(ctx context.Context, t Target) ([]MediaSlot, Outcome, error) {
	var slots []MediaSlot
	o, err := m.runMedia(ctx, t, "get_virtual_media", func(ctx context.Context, op *operation) error {
		var err error
		slots, err = op.readSlots(ctx)
		return err
	})
	return slots, o, err
}

// ErrNoSlot: the BMC has no virtual media slot for the media type asked.
var ErrNoSlot = errors.New("bmc: no suitable virtual media slot")

// AttachMedia inserts the image at url into the first slot that takes
// media type mt (MediaCD, MediaUSBStick, MediaFloppy) and checks it: the
// slot is read back, every PollInterval for up to timeout, until it
// reports Inserted with Image equal to url. What the slot held before is
// ejected first, as Ironic does. An insert that does not hold in time
// (ErrVerify), or that the BMC refuses, is ejected again, so nothing is
// left half-mounted.
func (m *Manager) AttachMedia(ctx context.Context, t Target, mt, url string, timeout time.Duration) (Outcome, error) {
	if url == "" {
		return Outcome{}, fmt.Errorf("attach_virtual_media %s: no image URL", t)
	}
	return m.runMedia(ctx, t, "attach_virtual_media", func(ctx context.Context, op *operation) error {
		slots, err := op.readSlots(ctx)
		if err != nil {
			return err
		}
		i := slices.IndexFunc(slots, func(s MediaSlot) bool { return s.Takes(mt) && s.insert != "" })
		if i < 0 {
			return fmt.Errorf("%w: none takes %s (slots: %s)", ErrNoSlot, mt, slotSummary(slots))
		}
		slot := slots[i]
		if slot.Inserted {
			if err := op.mediaCall(ctx, "eject_virtual_media", func(ctx context.Context, s mediaSlotSession) error {
				return s.ejectSlot(ctx, slot)
			}); err != nil {
				return fmt.Errorf("ejecting what slot %s held: %w", slot.ID, err)
			}
		}
		err = op.mediaCall(ctx, "insert_virtual_media", func(ctx context.Context, s mediaSlotSession) error {
			return s.insertSlot(ctx, slot, url)
		})
		if err == nil {
			err = op.poll(ctx, timeout, func(ctx context.Context) (bool, string, error) {
				var cur []MediaSlot
				err := op.retryGap(ctx, "get_virtual_media", max(op.m.cfg.PollInterval, op.minInterval()), func(ctx context.Context, s session) error {
					ms, ok := s.(mediaSlotSession)
					if !ok {
						return errNoMedia(op.t.HardwareType)
					}
					var err error
					cur, err = ms.mediaSlots(ctx)
					return err
				})
				if err != nil {
					return false, "", err
				}
				j := slices.IndexFunc(cur, func(s MediaSlot) bool { return s.URI == slot.URI })
				if j < 0 {
					return false, fmt.Sprintf("slot %s is gone", slot.ID), nil
				}
				got := cur[j]
				return got.Inserted && sameImage(got.Image, url), fmt.Sprintf("slot %s: expected Inserted with Image %s, observed Inserted=%t Image=%q", slot.ID, redact.URL(url), got.Inserted, redact.URL(got.Image)), nil
			})
		}
		if err != nil {
			// Leave nothing half-mounted: the eject is best effort, its
			// failure is said beside the insert's.
			if eerr := op.mediaCall(context.WithoutCancel(ctx), "eject_virtual_media", func(ctx context.Context, s mediaSlotSession) error {
				return s.ejectSlot(ctx, slot)
			}); eerr != nil {
				return fmt.Errorf("%w (and ejecting it again failed: %v)", err, eerr)
			}
			return err
		}
		return nil
	})
}

// DetachMedia ejects every inserted slot that takes one of the media
// types mts (every inserted slot when mts is empty). Slots already empty
// are left alone: detaching twice is not an error.
func (m *Manager) DetachMedia(ctx context.Context, t Target, mts []string) (Outcome, error) {
	return m.runMedia(ctx, t, "detach_virtual_media", func(ctx context.Context, op *operation) error {
		slots, err := op.readSlots(ctx)
		if err != nil {
			return err
		}
		for _, slot := range slots {
			if !slot.Inserted || (len(mts) > 0 && !slices.ContainsFunc(mts, slot.Takes)) {
				continue
			}
			if err := op.mediaCall(ctx, "eject_virtual_media", func(ctx context.Context, s mediaSlotSession) error {
				return s.ejectSlot(ctx, slot)
			}); err != nil {
				return err
			}
		}
		return nil
	})
}

func slotSummary(slots []MediaSlot) string {
	if len(slots) == 0 {
		return "none"
	}
	parts := make([]string, len(slots))
	for i, s := range slots {
		parts[i] = s.ID + "=" + strings.Join(s.MediaTypes, "/")
	}
	return strings.Join(parts, ", ")
}

// mediaSlots implements mediaSlotSession: the fake node has one CD slot.
func (s fakeSession) mediaSlots(context.Context) ([]MediaSlot, error) {
	var out []MediaSlot
	err := s.f.do(s.id, "get_virtual_media", func(st *FakeNodeState, _ FakeKnobs) error {
		out = []MediaSlot{{URI: "fake/Cd", ID: "Cd", MediaTypes: []string{MediaCD, MediaDVD}, Inserted: st.Media != "",
			Image: st.Media, insert: "insert", eject: "eject"}}
		return nil
	})
	return out, err
}

// insertSlot implements mediaSlotSession; IgnoreMedia makes the fake
// accept the insert and not do it.
func (s fakeSession) insertSlot(_ context.Context, _ MediaSlot, url string) error {
	return s.f.do(s.id, "insert_media "+url, func(st *FakeNodeState, k FakeKnobs) error {
		if !k.IgnoreMedia {
			st.Media = url
		}
		return nil
	})
}

// ejectSlot implements mediaSlotSession.
func (s fakeSession) ejectSlot(context.Context, MediaSlot) error {
	return s.f.do(s.id, "eject_media", func(st *FakeNodeState, _ FakeKnobs) error {
		st.Media = ""
		return nil
	})
}

// sameImage reports whether the Image a slot reports is the URL asked
// for. BMCs rewrite what they store: the scheme and host case, a default
// port, credentials or a query (a signed URL's) left out. Scheme, host,
// port and path must match; userinfo and query are not compared, as some
// BMCs never show them back.
func sameImage(reported, asked string) bool {
	if reported == asked {
		return true
	}
	r, err1 := url.Parse(reported)
	a, err2 := url.Parse(asked)
	if err1 != nil || err2 != nil {
		return false
	}
	port := func(u *url.URL) string {
		if p := u.Port(); p != "" {
			return p
		}
		return map[string]string{"http": "80", "https": "443", "nfs": "2049"}[strings.ToLower(u.Scheme)]
	}
	return strings.EqualFold(r.Scheme, a.Scheme) && strings.EqualFold(r.Hostname(), a.Hostname()) && port(r) == port(a) &&
		strings.TrimSuffix(r.EscapedPath(), "/") == strings.TrimSuffix(a.EscapedPath(), "/")
}
