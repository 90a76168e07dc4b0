package ipa

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/anvil-metal/anvil/protocol"
)

// Ironic API microversions IPA 2023.1 keys its messages on
// (ironic_api_client.py).
var (
	minIronicVersion   = apiVersion{1, 31}
	agentVersionIronic = apiVersion{1, 36} // heartbeat carries agent_version
	agentTokenIronic   = apiVersion{1, 62} // heartbeat carries agent_token
	verifyCAIronic     = apiVersion{1, 68} // heartbeat may carry agent_verify_ca
)

type apiVersion struct{ major, minor int }

func (v apiVersion) String() string { return fmt.Sprintf("%d.%d", v.major, v.minor) }

func (v apiVersion) less(o apiVersion) bool {
	return v.major < o.major || v.major == o.major && v.minor < o.minor
}

func minVersion(a, b apiVersion) apiVersion {
	if a.less(b) {
		return a
	}
	return b
}

func parseVersion(s string) (apiVersion, bool) {
	maj, min, ok := strings.Cut(s, ".")
	a, err1 := strconv.Atoi(maj)
	b, err2 := strconv.Atoi(min)
	if !ok || err1 != nil || err2 != nil || a < 0 || b < 0 {
		return apiVersion{}, false
	}
	return apiVersion{a, b}, true
}

// Client speaks to Ironic's ramdisk API as IPA's APIClient does.
type Client struct {
	base      string
	http      *http.Client
	requestID string
	userAgent string
	version   *apiVersion // discovered once
}

// NewClient returns a client for Ironic at cfg.API (ipa-api-url).
// cfg.Fingerprint pins Ironic's TLS certificate, as anvil mode pins the
// controller's: only a server presenting exactly that certificate is
// spoken to, and the URL must be https. Without it cfg.Insecure skips TLS
// verification (ipa-insecure). cfg.GlobalRequestID is sent as
// X-OpenStack-Request-ID (ipa-global-request-id).
func NewClient(cfg Config, agentVersion string) (*Client, error) {
	u, err := url.Parse(cfg.API)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("ipa-api-url %q: want an http(s) URL", cfg.API)
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	switch {
	case cfg.Fingerprint != "":
		// The pin is stricter than ipa-insecure, so it wins over it.
		if tr.TLSClientConfig, err = protocol.PinnedTLSFor(u.Scheme, cfg.Fingerprint); err != nil {
			return nil, fmt.Errorf("ipa-api-url %q: %w", cfg.API, err)
		}
	case cfg.Insecure:
		tr.TLSClientConfig = &tls.Config{InsecureSkipVerify: true} //nolint:gosec // ipa-insecure asks for it
	}
	return &Client{
		base:      strings.TrimRight(cfg.API, "/"),
		http:      &http.Client{Transport: tr, Timeout: 60 * time.Second},
		requestID: cfg.GlobalRequestID,
		userAgent: "anvil-agent/" + agentVersion + " (ironic-python-agent API)",
	}, nil
}

// HTTPError is a non-success answer of Ironic.
type HTTPError struct {
	Op     string
	Status int
	Text   string
}

func (e *HTTPError) Error() string { return fmt.Sprintf("%s: Error %d: %s", e.Op, e.Status, e.Text) }

// Errors an *HTTPError matches (errors.Is).
var (
	// ErrConflict: the node is locked; try again later.
	ErrConflict = errors.New("ironic: node locked (409)")
	// ErrTokenRejected: Ironic refuses the agent token (it wiped it when
	// the operation ended, or this is not the boot it was issued to).
	ErrTokenRejected = errors.New("ironic: agent token rejected")
	// ErrNotFound: no such node (any more).
	ErrNotFound = errors.New("ironic: node not found")
)

// Is maps Ironic's answers onto the errors above.
func (e *HTTPError) Is(target error) bool {
	switch target {
	case ErrConflict:
		return e.Status == http.StatusConflict
	case ErrNotFound:
		return e.Status == http.StatusNotFound
	case ErrTokenRejected:
		// Ironic 21.4 answers 400 "Invalid or missing agent token
		// received." (401/403 in other versions).
		return (e.Status == http.StatusBadRequest || e.Status == http.StatusUnauthorized || e.Status == http.StatusForbidden) &&
			strings.Contains(strings.ToLower(e.Text), "token")
	}
	return false
}

func (c *Client) do(ctx context.Context, method, path string, version *apiVersion, body any) (*http.Response, []byte, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return nil, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", c.userAgent)
	if c.requestID != "" {
		req.Header.Set("X-OpenStack-Request-ID", c.requestID)
	}
	if version != nil {
		req.Header.Set("X-OpenStack-Ironic-API-Version", version.String())
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	return resp, b, err
}

// ironicVersion is Ironic's default (maximum) microversion from GET /,
// falling back to 1.31 as IPA does when it cannot tell.
func (c *Client) ironicVersion(ctx context.Context) apiVersion {
	if c.version != nil {
		return *c.version
	}
	resp, body, err := c.do(ctx, http.MethodGet, "/", nil, nil)
	if err != nil {
		return minIronicVersion
	}
	if resp.StatusCode == http.StatusOK {
		if v, ok := parseRootVersion(body); ok {
			c.version = &v
			return v
		}
	}
	return minIronicVersion
}

// parseRootVersion reads default_version.version from Ironic's GET /.
func parseRootVersion(body []byte) (apiVersion, bool) {
	var root struct {
		Default struct {
			Version string `json:"version"`
		} `json:"default_version"`
	}
	if json.Unmarshal(body, &root) != nil {
		return apiVersion{}, false
	}
	return parseVersion(root.Default.Version)
}

// errorText is IPA's _error_from_response: Ironic's faultstring, from
// error_message (a JSON string in old Ironic) when present.
func errorText(body []byte) string {
	var outer map[string]any
	if json.Unmarshal(body, &outer) != nil {
		return strings.TrimSpace(string(body))
	}
	inner := outer
	switch em := outer["error_message"].(type) {
	case map[string]any:
		inner = em
	case string:
		var m map[string]any
		if json.Unmarshal([]byte(em), &m) == nil {
			inner = m
		}
	}
	for _, k := range []string{"faultstring", "title"} {
		if s, ok := inner[k].(string); ok && s != "" {
			return s
		}
	}
	return strings.TrimSpace(string(body))
}

// minTokenLen is the shortest agent token IPA accepts from a lookup.
const minTokenLen = 32

// LookupConfig is the config part of Ironic's lookup answer that the
// agent acts on.
type LookupConfig struct {
	HeartbeatTimeout   float64 `json:"heartbeat_timeout"`
	AgentToken         string  `json:"agent_token"`
	AgentTokenRequired bool    `json:"agent_token_required"`
}

// LookupResult is Ironic's lookup answer.
type LookupResult struct {
	Node   map[string]any `json:"node"`
	Config LookupConfig   `json:"config"`
}

// UUID is the node's UUID.
func (r *LookupResult) UUID() string { s, _ := r.Node["uuid"].(string); return s }

// Lookup is GET /v1/lookup?addresses=...&node_uuid=... . Like IPA it asks
// at most for microversion 1.62.
func (c *Client) Lookup(ctx context.Context, macs []string, nodeUUID string) (*LookupResult, error) {
	q := url.Values{"addresses": {strings.Join(macs, ",")}}
	if nodeUUID != "" {
		q.Set("node_uuid", nodeUUID)
	}
	v := minVersion(c.ironicVersion(ctx), agentTokenIronic)
	resp, body, err := c.do(ctx, http.MethodGet, "/v1/lookup?"+q.Encode(), &v, nil)
	if err != nil {
		return nil, fmt.Errorf("lookup: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, &HTTPError{Op: "lookup", Status: resp.StatusCode, Text: errorText(body)}
	}
	return ParseLookup(body)
}

// ParseLookup reads Ironic's lookup answer as IPA's _do_lookup does: a node
// with a uuid, and a config (or, from Ironic before 1.22's config object, a
// top-level heartbeat_timeout). An agent token shorter than 32 characters
// (Ironic's "******" for a token already handed out) is not a token.
func ParseLookup(body []byte) (*LookupResult, error) {
	var out struct {
		LookupResult
		HeartbeatTimeout *float64 `json:"heartbeat_timeout"` // before config existed
	}
	if err := json.Unmarshal(body, &out); err != nil {
		return nil, fmt.Errorf("lookup: decoding the answer: %w", err)
	}
	if out.UUID() == "" {
		return nil, errors.New("lookup: the answer has no node uuid")
	}
	if out.Config.HeartbeatTimeout == 0 && out.HeartbeatTimeout != nil {
		out.Config.HeartbeatTimeout = *out.HeartbeatTimeout
	}
	if out.Config.HeartbeatTimeout <= 0 || math.IsInf(out.Config.HeartbeatTimeout, 0) || math.IsNaN(out.Config.HeartbeatTimeout) {
		return nil, errors.New("lookup: the answer has no usable heartbeat_timeout")
	}
	if len(out.Config.AgentToken) < minTokenLen {
		out.Config.AgentToken = ""
	}
	return &out.LookupResult, nil
}

// Heartbeat is POST /v1/heartbeat/{node}, with the fields Ironic's
// microversion accepts. Ironic answers 202.
func (c *Client) Heartbeat(ctx context.Context, nodeUUID, callbackURL, token, agentVersion string) error {
	ver := c.ironicVersion(ctx)
	body := map[string]any{"callback_url": callbackURL}
	if !ver.less(agentTokenIronic) && token != "" {
		body["agent_token"] = token
	}
	if !ver.less(agentVersionIronic) {
		body["agent_version"] = agentVersion
	}
	v := minVersion(ver, verifyCAIronic)
	resp, respBody, err := c.do(ctx, http.MethodPost, "/v1/heartbeat/"+url.PathEscape(nodeUUID), &v, body)
	if err != nil {
		return fmt.Errorf("heartbeat: %w", err)
	}
	if resp.StatusCode != http.StatusAccepted {
		return &HTTPError{Op: "heartbeat", Status: resp.StatusCode, Text: errorText(respBody)}
	}
	return nil
}
