package bmc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/stmcginnis/gofish"
	"github.com/stmcginnis/gofish/common"
)

// BIOS over Redfish goes through gofish directly rather than bmclib:
// bmclib v2.3.0's GetBiosConfiguration/SetBiosConfiguration only look at
// systems with ids it knows (System.Embedded.1, 1, Self, system) and
// return nothing, without an error, for any other id (HPE, Lenovo and
// anvil-vbmc use opaque or node-named ids), and they cannot read the
// registry or send an apply time. The gofish client shares the bmclib
// session's transport (TLS, basic-auth fallback, error recording) and its
// session token, so nothing about credentials or system selection is
// done twice.

// gofish returns a gofish client on this session's transport and session,
// bound to ctx (gofish keeps one context per client, hence a client per
// command). Connecting reads the service root.
func (s *redfishSession) gofish(ctx context.Context) (*gofish.APIClient, error) {
	tok := s.tr.sessionToken()
	if tok == "" {
		return nil, errors.New("redfish: no session token from the login")
	}
	c, err := gofish.ConnectContext(ctx, gofish.ClientConfig{
		Endpoint:   s.endpoint,
		HTTPClient: &http.Client{Transport: s.tr},
		Session:    &gofish.Session{Token: tok},
	})
	if err != nil {
		return nil, fmt.Errorf("redfish service root: %w", err)
	}
	return c, nil
}

// getDoc GETs path and returns the body and ETag.
func getDoc(c *gofish.APIClient, p string) ([]byte, string, error) {
	resp, err := c.Get(p)
	if err != nil {
		return nil, "", fmt.Errorf("GET %s: %w", p, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxDoc+1))
	if err != nil {
		return nil, "", fmt.Errorf("GET %s: %w", p, err)
	}
	if len(body) > maxDoc {
		return nil, "", fmt.Errorf("GET %s: document larger than %d bytes", p, maxDoc)
	}
	return body, resp.Header.Get("ETag"), nil
}

// biosURI finds the selected system's Bios resource. With
// redfish_system_id the system is read directly, whatever its id looks
// like; without, the transport has narrowed the Systems collection to its
// only member (or refused a BMC with several).
func (s *redfishSession) biosURI(c *gofish.APIClient) (string, error) {
	sys, obj, err := s.systemDoc(c)
	if err != nil {
		return "", err
	}
	uri := odataID(obj["Bios"])
	if uri == "" {
		return "", fmt.Errorf("%w: system %s has no Bios resource", ErrUnsupported, sys)
	}
	return uri, nil
}

// readBios reads the Bios resource and its pending settings.
func (s *redfishSession) readBios(c *gofish.APIClient) (string, biosDoc, biosDoc, error) {
	uri, err := s.biosURI(c)
	if err != nil {
		return "", biosDoc{}, biosDoc{}, err
	}
	body, _, err := getDoc(c, uri)
	if err != nil {
		return "", biosDoc{}, biosDoc{}, err
	}
	cur, err := parseBiosDoc(body)
	if err != nil {
		return "", biosDoc{}, biosDoc{}, err
	}
	pending := biosDoc{attrs: map[string]any{}}
	if cur.settingsURI != "" && cur.settingsURI != uri {
		body, etag, err := getDoc(c, cur.settingsURI)
		if err != nil {
			return "", biosDoc{}, biosDoc{}, err
		}
		if pending, err = parseBiosDoc(body); err != nil {
			return "", biosDoc{}, biosDoc{}, fmt.Errorf("settings: %w", err)
		}
		if etag != "" {
			pending.settingsETag = etag
		}
	}
	return uri, cur, pending, nil
}

// bios implements biosSession.
func (s *redfishSession) bios(ctx context.Context) (BIOS, error) {
	s.tr.reset()
	c, err := s.gofish(ctx)
	if err != nil {
		return BIOS{}, s.classify(ctx, err)
	}
	_, cur, pending, err := s.readBios(c)
	if err != nil {
		return BIOS{}, s.classify(ctx, err)
	}
	return BIOS{Current: cur.attrs, Pending: pending.attrs, SupportedApplyTimes: cur.applyTimes, RegistryID: cur.registry}, nil
}

// biosRegistry implements biosSession.
func (s *redfishSession) biosRegistry(ctx context.Context, id string) (*Registry, string, error) {
	s.tr.reset()
	c, err := s.gofish(ctx)
	if err != nil {
		return nil, "", s.classify(ctx, err)
	}
	reg, why, err := s.registry(ctx, c, id)
	if err != nil {
		return nil, "", s.classify(ctx, err)
	}
	return reg, why, nil
}

// maxRegistryProbes bounds the registry files read when none is named
// after the registry id (BMCs list a dozen or two message registries).
const maxRegistryProbes = 32

// registry follows Bios.AttributeRegistry to the registry document, as
// BMCs lay it out: the service root's Registries collection, the
// MessageRegistryFile for the id, its Location. A BMC without one gives
// a nil registry and the reason; only a broken answer is an error.
func (s *redfishSession) registry(ctx context.Context, c *gofish.APIClient, id string) (*Registry, string, error) {
	if id == "" {
		return nil, "the Bios resource names no AttributeRegistry", nil
	}
	body, _, err := getDoc(c, "/redfish/v1/")
	if err != nil {
		return nil, "", err
	}
	root, err := decodeObject(body)
	if err != nil {
		return nil, "", fmt.Errorf("service root: %w", err)
	}
	regs := odataID(root["Registries"])
	if regs == "" {
		return nil, "the service root links no Registries", nil
	}
	body, _, err = getDoc(c, regs)
	if httpStatus(err) == http.StatusNotFound {
		return nil, "the BMC has no registries at " + regs, nil
	}
	if err != nil {
		return nil, "", err
	}
	coll, err := decodeObject(body)
	if err != nil {
		return nil, "", fmt.Errorf("registries collection: %w", err)
	}
	members, _ := coll["Members"].([]any)
	var uris []string
	for _, m := range members {
		if u := odataID(m); u != "" {
			uris = append(uris, u)
		}
	}
	// The file is usually named after the registry id (iDRAC, HPE,
	// anvil-vbmc); otherwise its Id or Registry says which it is.
	slices.SortStableFunc(uris, func(a, b string) int {
		ma, mb := path.Base(a) == id, path.Base(b) == id
		switch {
		case ma && !mb:
			return -1
		case mb && !ma:
			return 1
		}
		return 0
	})
	for i, u := range uris {
		if i >= maxRegistryProbes || ctx.Err() != nil {
			break
		}
		body, _, err := getDoc(c, u)
		if httpStatus(err) == http.StatusNotFound {
			// Listed but not there: BMCs list registries they do not serve.
			continue
		}
		if err != nil {
			return nil, "", err
		}
		file, err := decodeObject(body)
		if err != nil {
			return nil, "", fmt.Errorf("registry file %s: %w", u, err)
		}
		fid, _ := file["Id"].(string)
		freg, _ := file["Registry"].(string)
		if path.Base(u) != id && fid != id && freg != id {
			continue
		}
		loc, err := registryLocation(body)
		if err != nil {
			return nil, "", fmt.Errorf("%s: %w", u, err)
		}
		body, _, err = getDoc(c, loc)
		if httpStatus(err) == http.StatusNotFound {
			return nil, fmt.Sprintf("registry %s: its document %s is missing", id, loc), nil
		}
		if err != nil {
			return nil, "", err
		}
		reg, err := parseRegistry(body)
		if err != nil {
			return nil, "", fmt.Errorf("%s: %w", loc, err)
		}
		if reg.ID == "" {
			reg.ID = id
		}
		return reg, "", nil
	}
	return nil, fmt.Sprintf("registry %s is not among the BMC's registries", id), nil
}

// applyBios implements biosSession: one PATCH of the settings object, with
// the OnReset apply time when the BMC lists it (iDRAC leaves settings
// without one pending for ever) and the settings' ETag as If-Match.
func (s *redfishSession) applyBios(ctx context.Context, settings map[string]any) error {
	s.tr.reset()
	c, err := s.gofish(ctx)
	if err != nil {
		return s.classify(ctx, err)
	}
	uri, cur, pending, err := s.readBios(c)
	if err != nil {
		return s.classify(ctx, err)
	}
	target := cur.settingsURI
	if target == "" {
		target = uri // BMCs without a settings object take the PATCH on Bios
	}
	payload := map[string]any{"Attributes": settings}
	if slices.Contains(cur.applyTimes, "OnReset") {
		payload["@Redfish.SettingsApplyTime"] = map[string]any{"ApplyTime": "OnReset"}
	}
	headers := map[string]string{}
	if pending.settingsETag != "" {
		headers["If-Match"] = pending.settingsETag
	}
	resp, err := c.PatchWithHeaders(target, payload, headers)
	if err != nil {
		if st, _, _ := s.tr.failure(); st == http.StatusPreconditionFailed {
			// Someone changed the settings between our read and PATCH: a
			// retry reads them again.
			return classified(kindBusy, fmt.Errorf("PATCH %s: ETag changed (HTTP 412): %w", target, err))
		}
		// The summary replaces gofish's message, which is the whole body.
		return s.classify(ctx, &bmclibError{msg: fmt.Sprintf("PATCH %s: %s", target, redfishMessages(err)), cause: err})
	}
	resp.Body.Close()
	return nil
}

// resetBios implements biosSession: #Bios.ResetBios, which takes effect at
// the next boot.
func (s *redfishSession) resetBios(ctx context.Context) error {
	s.tr.reset()
	c, err := s.gofish(ctx)
	if err != nil {
		return s.classify(ctx, err)
	}
	uri, cur, _, err := s.readBios(c)
	if err != nil {
		return s.classify(ctx, err)
	}
	target := cur.resetTarget
	if target == "" {
		target = uri + "/Actions/Bios.ResetBios"
	}
	resp, err := c.Post(target, map[string]any{})
	if err != nil {
		return s.classify(ctx, fmt.Errorf("POST %s: %w", target, err))
	}
	resp.Body.Close()
	return nil
}

// redfishEndpoint is the base URL gofish is given (bmclib gets host and
// port apart).
func redfishEndpoint(t Target) string {
	return t.Scheme + "://" + urlHost(t.Host) + ":" + strconv.Itoa(t.Port)
}

// httpStatus is the HTTP status of a gofish error (0 if none).
func httpStatus(err error) int {
	var ce *common.Error
	if errors.As(err, &ce) {
		return ce.HTTPReturnedStatusCode
	}
	return 0
}

// redfishMessages is the readable part of a Redfish error answer: its
// extended messages (one per rejected attribute for a BIOS PATCH).
func redfishMessages(err error) string {
	var ce *common.Error
	if !errors.As(err, &ce) {
		return "failed"
	}
	var msgs []string
	for _, m := range ce.ExtendedInfos {
		if m.Message != "" {
			msgs = append(msgs, m.Message)
		}
	}
	if len(msgs) == 0 && ce.Message != "" {
		msgs = append(msgs, ce.Message)
	}
	if len(msgs) == 0 {
		return fmt.Sprintf("HTTP %d", ce.HTTPReturnedStatusCode)
	}
	return fmt.Sprintf("HTTP %d: %s", ce.HTTPReturnedStatusCode, strings.Join(msgs, " "))
}
