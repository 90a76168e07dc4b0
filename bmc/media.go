package bmc

import (
	"context"
	"fmt"
	"strings"
)

// InsertMedia attaches the ISO at url as the node's virtual CD (Redfish
// VirtualMedia.InsertMedia through bmclib, read-only): whatever was
// inserted before is ejected first, as Ironic does, so a slot left in use
// by an earlier boot cannot block this one. The BMC fetches url itself:
// it must reach the controller. IPMI has no virtual media (ErrUnsupported).
func (m *Manager) InsertMedia(ctx context.Context, t Target, url string) (Outcome, error) {
	if url == "" {
		return Outcome{}, fmt.Errorf("%w: insert media without a URL", ErrUnsupported)
	}
	return m.run(ctx, t, "insert_media", func(ctx context.Context, op *operation) error {
		return op.retry(ctx, "insert_media", func(ctx context.Context, s session) error {
			return s.setMedia(ctx, url)
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
