package agent

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/anvil-metal/anvil/protocol"
)

// APIVersion is the Ironic microversion the agent sends on lookup and
// heartbeat; the anvil controller keys the agent protocol (boot_id, JSON
// heartbeat replies) on it.
const APIVersion = "1.82"

// Errors a Controller returns for the answers the loop treats differently.
// They are matched with errors.Is; *HTTPError carries the details.
var (
	// ErrNotFound: no node expects an agent with these MACs (lookup), or
	// the node is gone (heartbeat).
	ErrNotFound = errors.New("controller: not found")
	// ErrUnauthorized: the agent token is no longer valid (401/403); the
	// agent must look itself up again to get a new one.
	ErrUnauthorized = errors.New("controller: agent token rejected")
	// ErrConflict: the node is busy (locked); retry.
	ErrConflict = errors.New("controller: conflict")
	// ErrBadRequest: the controller refused the message (400).
	ErrBadRequest = errors.New("controller: bad request")
	// ErrUnreachable: no answer at all (connection refused, timeout, DNS);
	// the agent's own network may be the problem.
	ErrUnreachable = errors.New("controller unreachable")
	// ErrUntrusted: the server's TLS certificate is not the pinned one
	// (or, unpinned, not valid for the system roots). Nothing was sent
	// beyond the handshake and nothing of its answer is used.
	ErrUntrusted = errors.New("controller not trusted")
)

// HTTPError is a non-success answer of the controller.
type HTTPError struct {
	Op         string // "lookup", "heartbeat"
	StatusCode int
	// Message is the controller's faultstring when the body is in Ironic's
	// error format, else the (truncated) body.
	Message string
}

func (e *HTTPError) Error() string {
	return fmt.Sprintf("%s: HTTP %d: %s", e.Op, e.StatusCode, e.Message)
}

// Is maps status codes onto the sentinel errors the loop reacts to.
func (e *HTTPError) Is(target error) bool {
	switch target {
	case ErrNotFound:
		return e.StatusCode == http.StatusNotFound
	case ErrUnauthorized:
		return e.StatusCode == http.StatusUnauthorized || e.StatusCode == http.StatusForbidden
	case ErrConflict:
		return e.StatusCode == http.StatusConflict
	case ErrBadRequest:
		return e.StatusCode == http.StatusBadRequest
	}
	return false
}

// Client is the HTTP implementation of Controller.
type Client struct {
	base      string
	http      *http.Client
	userAgent string
	// nodeUUID comes from the kernel command line; it is fixed for the
	// life of the process, so it is not a Lookup argument.
	nodeUUID string
	nonce    string
}

// ClientConfig configures a Client.
type ClientConfig struct {
	// API is the controller's base URL ("http://10.0.0.1:6385").
	API string
	// Version is the agent's version for the User-Agent.
	Version string
	// NodeUUID, when known (anvil.node=), is sent with lookups so the
	// controller need not match MACs.
	NodeUUID string
	// Nonce is the per-boot nonce from the kernel command line
	// (anvil.token=), sent with lookups when set.
	Nonce string
	// Fingerprint pins the controller's TLS certificate ("sha256:<hex>",
	// anvil.api_fingerprint=): only a server presenting exactly that
	// certificate is spoken to, whatever CA signed it, and API must be
	// https. Without it an https API is checked against the system roots.
	Fingerprint string
	// Timeout bounds one request; 0 means 30 s. Heartbeat answers are
	// immediate on the controller side, so a slow request means a sick
	// network and is better retried.
	Timeout time.Duration
}

// NewClient validates the API URL and returns a Client.
func NewClient(cfg ClientConfig) (*Client, error) {
	u, err := url.Parse(cfg.API)
	if err != nil {
		return nil, fmt.Errorf("controller API URL %q: %w", cfg.API, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("controller API URL %q: want http(s)://host[:port]", cfg.API)
	}
	var pinned *tls.Config // nil: the system roots
	if cfg.Fingerprint != "" {
		if pinned, err = protocol.PinnedTLSFor(u.Scheme, cfg.Fingerprint); err != nil {
			return nil, fmt.Errorf("controller API URL %q: %w", cfg.API, err)
		}
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 30 * time.Second
	}
	tr := &http.Transport{
		TLSClientConfig: pinned,
		// The ramdisk has no proxy configuration, and a workstation's proxy
		// must not see agent tokens.
		Proxy:                 nil,
		DialContext:           (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		TLSHandshakeTimeout:   10 * time.Second,
		ResponseHeaderTimeout: cfg.Timeout,
		MaxIdleConns:          2,
		IdleConnTimeout:       90 * time.Second,
	}
	return &Client{
		base:      strings.TrimRight(u.String(), "/"),
		http:      &http.Client{Transport: tr, Timeout: cfg.Timeout},
		userAgent: UserAgent(cfg.Version),
		nodeUUID:  cfg.NodeUUID,
		nonce:     cfg.Nonce,
	}, nil
}

// UserAgent is the agent's User-Agent: "anvil-agent/<version> (anvil/1)".
func UserAgent(version string) string {
	return "anvil-agent/" + version + " (" + protocol.Version + ")"
}

var _ Controller = (*Client)(nil)

// Lookup implements Controller.
func (c *Client) Lookup(ctx context.Context, macs []string, bootID string) (*protocol.LookupResponse, error) {
	q := url.Values{}
	if len(macs) > 0 {
		q.Set("addresses", strings.Join(macs, ","))
	}
	q.Set(protocol.LookupBootID, bootID)
	if c.nonce != "" {
		q.Set(protocol.LookupNonce, c.nonce)
	}
	if c.nodeUUID != "" {
		q.Set("node_uuid", c.nodeUUID)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+protocol.LookupPath+"?"+q.Encode(), nil)
	if err != nil {
		return nil, fmt.Errorf("lookup: %w", err)
	}
	resp, err := c.do(req)
	if err != nil {
		return nil, fmt.Errorf("lookup: %w", transportError(err))
	}
	defer drain(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return nil, httpError("lookup", resp)
	}
	lr, err := protocol.DecodeLookupResponse(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("lookup: %w", err)
	}
	return lr, nil
}

// Heartbeat implements Controller. A 202/204 without a body (Ironic's own
// answer) is returned as a response with no command and interval 0, which
// the loop reads as "keep the current interval".
func (c *Client) Heartbeat(ctx context.Context, nodeUUID string, hb *protocol.Heartbeat) (*protocol.HeartbeatResponse, error) {
	body, err := json.Marshal(hb)
	if err != nil {
		return nil, fmt.Errorf("heartbeat: encode: %w", err)
	}
	body = protocol.WithoutNUL(body) // a NUL from odd firmware must not get the heartbeat refused
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+protocol.HeartbeatPath+url.PathEscape(nodeUUID), bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("heartbeat: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.do(req)
	if err != nil {
		return nil, fmt.Errorf("heartbeat: %w", transportError(err))
	}
	defer drain(resp.Body)
	switch resp.StatusCode {
	case http.StatusOK:
		hr, err := protocol.DecodeHeartbeatResponse(resp.Body)
		if err != nil {
			return nil, fmt.Errorf("heartbeat: %w", err)
		}
		return hr, nil
	case http.StatusAccepted, http.StatusNoContent:
		return &protocol.HeartbeatResponse{}, nil
	}
	return nil, httpError("heartbeat", resp)
}

func (c *Client) do(req *http.Request) (*http.Response, error) {
	req.Header.Set("X-OpenStack-Ironic-API-Version", APIVersion)
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", c.userAgent)
	return c.http.Do(req)
}

// transportError classifies a request that got no answer: a certificate
// refused (ErrUntrusted) or no connection at all (ErrUnreachable).
func transportError(err error) error {
	var verr *tls.CertificateVerificationError
	var uerr x509.UnknownAuthorityError
	var herr x509.HostnameError
	var cerr x509.CertificateInvalidError
	if errors.Is(err, protocol.ErrFingerprintMismatch) || errors.As(err, &verr) || errors.As(err, &uerr) ||
		errors.As(err, &herr) || errors.As(err, &cerr) {
		return fmt.Errorf("%w: %w", ErrUntrusted, err)
	}
	return fmt.Errorf("%w: %w", ErrUnreachable, err)
}

// drain lets the connection be reused.
func drain(body io.ReadCloser) {
	_, _ = io.Copy(io.Discard, io.LimitReader(body, 64<<10))
	_ = body.Close()
}

// httpError reads Ironic's error body: {"error_message": "<JSON string with
// faultstring>"}; anything else is kept raw (truncated) for the log.
func httpError(op string, resp *http.Response) error {
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 16<<10))
	return &HTTPError{Op: op, StatusCode: resp.StatusCode, Message: faultString(raw)}
}

func faultString(raw []byte) string {
	var outer struct {
		ErrorMessage json.RawMessage `json:"error_message"`
	}
	if json.Unmarshal(raw, &outer) == nil && len(outer.ErrorMessage) > 0 {
		var fault struct {
			FaultString string `json:"faultstring"`
		}
		// Ironic double-encodes: error_message is a string holding JSON.
		var inner string
		if json.Unmarshal(outer.ErrorMessage, &inner) == nil {
			if json.Unmarshal([]byte(inner), &fault) == nil && fault.FaultString != "" {
				return fault.FaultString
			}
			return inner
		}
		if json.Unmarshal(outer.ErrorMessage, &fault) == nil && fault.FaultString != "" {
			return fault.FaultString
		}
	}
	s := strings.TrimSpace(string(raw))
	if len(s) > 512 {
		s = s[:512] + "..."
	}
	if s == "" {
		s = "(empty body)"
	}
	return s
}
