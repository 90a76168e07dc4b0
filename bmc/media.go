package bmc

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/anvil-metal/anvil/internal/redact"
)

// InsertMedia attaches the ISO at url as the node's virtual CD (Redfish
// VirtualMedia.InsertMedia through bmclib, read-only): whatever was
// inserted before is ejected first, as Ironic does, so a slot left in use
// by an earlier boot cannot block this one. The BMC fetches url itself:
// it must reach the controller. IPMI has no virtual media (ErrUnsupported).
// The insert counts once a CD slot reads back Inserted with url (ErrVerify
// after VerifyTimeout, the insert sent again meanwhile).
func (m *Manager) InsertMedia(ctx context.Context, t Target, url string) (Outcome, error) {
	if url == "" {
		return Outcome{}, fmt.Errorf("%w: insert media without a URL", ErrUnsupported)
	}
	return m.run(ctx, t, "insert_media", func(ctx context.Context, op *operation) error {
		insert := func() error {
			return op.retry(ctx, "insert_media", func(ctx context.Context, s session) error {
				return s.setMedia(ctx, url)
			})
		}
		if err := insert(); err != nil {
			return err
		}
		// A BMC may answer 204 and mount nothing, or report the slot
		// Inserted with no Image: the CD counts once a slot reports it
		// with this URL. Inserted again, like a boot override, before
		// it fails.
		sets, lastSet := 1, time.Now()
		return op.poll(ctx, op.m.cfg.VerifyTimeout, func(ctx context.Context) (bool, string, error) {
			var slots []MediaSlot
			err := op.retryGap(ctx, "get_virtual_media", max(op.m.cfg.PollInterval, op.minInterval()), func(ctx context.Context, s session) error {
				ms, ok := s.(mediaSlotSession)
				if !ok {
					return fmt.Errorf("%w: no slots to read back", ErrUnsupported)
				}
				var err error
				slots, err = ms.mediaSlots(ctx)
				return err
			})
			if errors.Is(err, ErrUnsupported) {
				op.log.InfoContext(ctx, "bmc: virtual media cannot be read back; not verified", "error", err)
				return true, "", nil
			}
			if err != nil {
				return false, "", err
			}
			var seen []string
			for _, sl := range slots {
				if !sl.Takes(MediaCD) {
					continue
				}
				if sl.Inserted && sameImage(sl.Image, url) {
					return true, "", nil
				}
				seen = append(seen, fmt.Sprintf("%s Inserted=%t Image=%q", sl.ID, sl.Inserted, redact.URL(sl.Image)))
			}
			if len(seen) == 0 {
				seen = append(seen, "no CD slot")
			}
			diff := fmt.Sprintf("virtual CD set to %s but the BMC reports %s (inserted %d time(s))", redact.URL(url), strings.Join(seen, ", "), sets)
			if sets < op.m.cfg.Retry.Attempts && time.Since(lastSet) >= resendAfter(op.m.cfg) {
				op.log.WarnContext(ctx, "bmc: virtual media not mounted, inserting it again", "state", diff)
				if err := insert(); err != nil {
					return false, "", err
				}
				sets, lastSet = sets+1, time.Now()
			}
			return false, diff, nil
		})
	})
}

// EjectMedia ejects every inserted virtual medium of the node.
func (m *Manager) EjectMedia(ctx context.Context, t Target) (Outcome, error) {
	return m.run(ctx, t, "eject_media", func(ctx context.Context, op *operation) error {
		return op.retry(ctx, "eject_media", func(ctx context.Context, s session) error {
			return s.setMedia(ctx, "")
		})
	})
}

// setMedia implements session for Redfish: bmclib ejects every inserted
// medium of every manager, then inserts url into each CD-capable slot.
func (s *redfishSession) setMedia(ctx context.Context, url string) error {
	s.tr.reset()
	err := bmclibResult(s.cl.SetVirtualMedia(ctx, "CD", url))
	if err != nil && strings.Contains(err.Error(), "not supported") {
		// "media kind CD not supported": no slot takes a CD.
		return fmt.Errorf("%w: the BMC has no virtual CD slot: %w", ErrUnsupported, flatten(err))
	}
	return s.classify(ctx, err)
}

// setMedia implements session: IPMI has no virtual media.
func (s *ipmiSession) setMedia(context.Context, string) error {
	return fmt.Errorf("%w: IPMI has no virtual media; use the redfish hardware type for redfish-virtual-media", ErrUnsupported)
}

// setMedia implements session: the fake node's CD holds url.
func (s fakeSession) setMedia(_ context.Context, url string) error {
	cmd := "insert_media " + url
	if url == "" {
		cmd = "eject_media"
	}
	return s.f.do(s.id, cmd, func(st *FakeNodeState, _ FakeKnobs) error {
		st.Media = url
		return nil
	})
}
