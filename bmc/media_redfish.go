package bmc

// Virtual media slots over Redfish, through gofish on the bmclib session
// (as the BIOS, redfish_bios.go). The slots are found as sushy finds them
// for Ironic: the system's own VirtualMedia collection when it has one
// (newer BMCs), else those of the managers that manage the system.

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/stmcginnis/gofish"
)

// maxSlots bounds the slots read (a server has a handful).
const maxSlots = 32

// parseMediaSlot decodes a VirtualMedia resource read from uri.
func parseMediaSlot(uri string, body []byte) (MediaSlot, error) {
	obj, err := decodeObject(body)
	if err != nil {
		return MediaSlot{}, fmt.Errorf("virtual media %s: %w", uri, err)
	}
	s := MediaSlot{URI: uri, ID: str(obj["Id"])}
	if id := odataID(obj); id != "" {
		s.URI = id
	}
	if s.ID == "" {
		s.ID = lastElem(s.URI)
	}
	types, _ := obj["MediaTypes"].([]any)
	for _, t := range types {
		if t, ok := t.(string); ok && t != "" {
			s.MediaTypes = append(s.MediaTypes, t)
		}
	}
	s.Inserted, _ = obj["Inserted"].(bool)
	s.Image, _ = obj["Image"].(string)
	if acts, ok := obj["Actions"].(map[string]any); ok {
		s.insert = actionTarget(acts, "#VirtualMedia.InsertMedia")
		s.eject = actionTarget(acts, "#VirtualMedia.EjectMedia")
	}
	return s, nil
}

// actionTarget is an action's target: a path on the BMC ("" for none, or
// for a target elsewhere, which is never followed).
func actionTarget(acts map[string]any, name string) string {
	a, _ := acts[name].(map[string]any)
	t, _ := a["target"].(string)
	if i := strings.Index(t, "/redfish/"); i > 0 && strings.HasPrefix(t, "http") {
		t = t[i:] // an absolute URL of the BMC: gofish takes paths
	}
	if !strings.HasPrefix(t, "/") || strings.HasPrefix(t, "//") {
		return ""
	}
	return t
}

func lastElem(p string) string {
	for len(p) > 0 && p[len(p)-1] == '/' {
		p = p[:len(p)-1]
	}
	for i := len(p) - 1; i >= 0; i-- {
		if p[i] == '/' {
			return p[i+1:]
		}
	}
	return p
}

// mediaSlots implements mediaSlotSession.
func (s *redfishSession) mediaSlots(ctx context.Context) ([]MediaSlot, error) {
	s.tr.reset()
	c, err := s.gofish(ctx)
	if err != nil {
		return nil, s.classify(ctx, err)
	}
	slots, err := s.readMediaSlots(c)
	if err != nil {
		return nil, s.classify(ctx, err)
	}
	return slots, nil
}

func (s *redfishSession) readMediaSlots(c *gofish.APIClient) ([]MediaSlot, error) {
	_, sys, err := s.systemDoc(c)
	if err != nil {
		return nil, err
	}
	var collections []string
	if uri := odataID(sys["VirtualMedia"]); uri != "" {
		collections = append(collections, uri)
	} else {
		links, _ := sys["Links"].(map[string]any)
		managers, _ := links["ManagedBy"].([]any)
		for _, mgr := range managers {
			uri := odataID(mgr)
			if uri == "" {
				continue
			}
			body, _, err := getDoc(c, uri)
			if err != nil {
				return nil, err
			}
			doc, err := decodeObject(body)
			if err != nil {
				return nil, fmt.Errorf("manager %s: %w", uri, err)
			}
			if vm := odataID(doc["VirtualMedia"]); vm != "" {
				collections = append(collections, vm)
			}
		}
	}
	if len(collections) == 0 {
		return nil, fmt.Errorf("%w: the BMC offers no virtual media for this system", ErrUnsupported)
	}
	var slots []MediaSlot
	for _, coll := range collections {
		body, _, err := getDoc(c, coll)
		if err != nil {
			return nil, err
		}
		doc, err := decodeObject(body)
		if err != nil {
			return nil, fmt.Errorf("virtual media collection %s: %w", coll, err)
		}
		members, _ := doc["Members"].([]any)
		for _, mem := range members {
			uri := odataID(mem)
			if uri == "" {
				continue
			}
			if len(slots) == maxSlots {
				return nil, fmt.Errorf("more than %d virtual media slots", maxSlots)
			}
			body, _, err := getDoc(c, uri)
			if err != nil {
				return nil, err
			}
			slot, err := parseMediaSlot(uri, body)
			if err != nil {
				return nil, err
			}
			slots = append(slots, slot)
		}
	}
	return slots, nil
}

// insertSlot implements mediaSlotSession: #VirtualMedia.InsertMedia,
// read-only and inserted, as Ironic asks.
func (s *redfishSession) insertSlot(ctx context.Context, slot MediaSlot, url string) error {
	return s.slotAction(ctx, slot.insert, map[string]any{"Image": url, "Inserted": true, "WriteProtected": true})
}

// ejectSlot implements mediaSlotSession.
func (s *redfishSession) ejectSlot(ctx context.Context, slot MediaSlot) error {
	return s.slotAction(ctx, slot.eject, map[string]any{})
}

func (s *redfishSession) slotAction(ctx context.Context, target string, body map[string]any) error {
	if target == "" {
		return fmt.Errorf("%w: the slot has no such action", ErrUnsupported)
	}
	s.tr.reset()
	c, err := s.gofish(ctx)
	if err != nil {
		return s.classify(ctx, err)
	}
	resp, err := c.Post(target, body)
	if err != nil {
		return s.classify(ctx, &bmclibError{msg: fmt.Sprintf("POST %s: %s", target, redfishMessages(err)), cause: err})
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxDoc))
	resp.Body.Close()
	return nil
}
