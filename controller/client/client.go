// Package client is a small Go client of anvil's (Ironic-compatible) REST
// API, used by the operator CLI, the demo and the benchmarks.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/anvil-metal/anvil/protocol"
)

// Version is the microversion the client speaks.
const Version = "1.82"

// Later microversions, asked for only by the requests that need them (a
// list stays at Version: from 1.83 it hides child nodes).
const (
	UnholdVersion           = "1.85"  // the unhold verb
	ServiceVersion          = "1.87"  // the service verb; a node's service_step
	ServiceNoRamdiskVersion = "1.108" // disable_ramdisk with service
)

// Client talks to one controller.
type Client struct {
	base string
	http *http.Client
	user string
	pass string
}

// New returns a client for base (e.g. http://127.0.0.1:6385). hc may be nil.
func New(base string, hc *http.Client) *Client {
	if hc == nil {
		hc = &http.Client{Timeout: 30 * time.Second}
	}
	return &Client{base: strings.TrimRight(base, "/"), http: hc}
}

// WithBasicAuth sets http_basic credentials.
func (c *Client) WithBasicAuth(user, pass string) *Client {
	c.user, c.pass = user, pass
	return c
}

// Error is an API error with Ironic's faultstring.
type Error struct {
	Status  int
	Message string
}

func (e *Error) Error() string { return fmt.Sprintf("HTTP %d: %s", e.Status, e.Message) }

// Do sends a request at Version; in and out are JSON (either may be nil).
func (c *Client) Do(ctx context.Context, method, path string, in, out any) error {
	return c.DoVersion(ctx, Version, method, path, in, out)
}

// DoVersion is Do at another microversion (version "1.86"), for the
// resources newer than Version.
func (c *Client) DoVersion(ctx context.Context, version, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("encode request: %w", err)
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return err
	}
	req.Header.Set("X-OpenStack-Ironic-API-Version", version)
	req.Header.Set("Accept", "application/json")
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.user != "" {
		req.SetBasicAuth(c.user, c.pass)
	}
	res, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer res.Body.Close()
	data, err := io.ReadAll(res.Body)
	if err != nil {
		return fmt.Errorf("%s %s: read response: %w", method, path, err)
	}
	if res.StatusCode >= 400 {
		return &Error{Status: res.StatusCode, Message: faultString(data)}
	}
	if out != nil && len(data) > 0 {
		if err := json.Unmarshal(data, out); err != nil {
			return fmt.Errorf("%s %s: decode response: %w", method, path, err)
		}
	}
	return nil
}

// faultString unwraps Ironic's {"error_message": "<json>"} body.
func faultString(data []byte) string {
	var outer struct {
		ErrorMessage string `json:"error_message"`
	}
	if json.Unmarshal(data, &outer) != nil || outer.ErrorMessage == "" {
		return strings.TrimSpace(string(data))
	}
	var inner struct {
		FaultString string `json:"faultstring"`
		Description string `json:"description"`
	}
	if json.Unmarshal([]byte(outer.ErrorMessage), &inner) != nil {
		return outer.ErrorMessage
	}
	if inner.FaultString != "" {
		return inner.FaultString
	}
	return inner.Description
}

// Node is the subset of node fields the tools show.
type Node struct {
	UUID                 string         `json:"uuid"`
	Name                 *string        `json:"name"`
	Driver               string         `json:"driver"`
	ProvisionState       string         `json:"provision_state"`
	TargetProvisionState *string        `json:"target_provision_state"`
	PowerState           *string        `json:"power_state"`
	Maintenance          bool           `json:"maintenance"`
	LastError            *string        `json:"last_error"`
	Reservation          *string        `json:"reservation"`
	CleanStep            map[string]any `json:"clean_step"`
	DeployStep           map[string]any `json:"deploy_step"`
	ServiceStep          map[string]any `json:"service_step"` // read at ServiceVersion
	Retired              bool           `json:"retired"`
	Properties           map[string]any `json:"properties"`
	DriverInternalInfo   map[string]any `json:"driver_internal_info"`
}

// CreateNode creates a node from fields (driver, name, driver_info, ...).
func (c *Client) CreateNode(ctx context.Context, fields map[string]any) (*Node, error) {
	var n Node
	return &n, c.Do(ctx, http.MethodPost, "/v1/nodes", fields, &n)
}

// GetNode reads a node by UUID or name.
func (c *Client) GetNode(ctx context.Context, ident string) (*Node, error) {
	var n Node
	return &n, c.DoVersion(ctx, ServiceVersion, http.MethodGet, "/v1/nodes/"+url.PathEscape(ident), nil, &n)
}

// DeleteNode deletes a node.
func (c *Client) DeleteNode(ctx context.Context, ident string) error {
	return c.Do(ctx, http.MethodDelete, "/v1/nodes/"+url.PathEscape(ident), nil, nil)
}

// ListNodes returns every node matching query (e.g. "provision_state=active"),
// following "next" links.
func (c *Client) ListNodes(ctx context.Context, query string, detail bool) ([]Node, error) {
	path := "/v1/nodes"
	if detail {
		path += "/detail"
	}
	if query != "" {
		path += "?" + query
	}
	var all []Node
	for path != "" {
		var page struct {
			Nodes []Node `json:"nodes"`
			Next  string `json:"next"`
		}
		if err := c.Do(ctx, http.MethodGet, path, nil, &page); err != nil {
			return nil, err
		}
		all = append(all, page.Nodes...)
		path = ""
		if page.Next != "" {
			u, err := url.Parse(page.Next)
			if err != nil {
				return nil, fmt.Errorf("bad next link %q: %w", page.Next, err)
			}
			path = u.RequestURI()
		}
	}
	return all, nil
}

// Provision sends a provision verb with optional extra body keys, at the
// microversion the verb needs (Version for the older ones).
func (c *Client) Provision(ctx context.Context, ident, target string, extra map[string]any) error {
	body := map[string]any{"target": target}
	for k, v := range extra {
		body[k] = v
	}
	version := Version
	switch {
	case target == "unhold":
		version = UnholdVersion
	case target == "service" && extra["disable_ramdisk"] != nil:
		version = ServiceNoRamdiskVersion
	case target == "service":
		version = ServiceVersion
	}
	return c.DoVersion(ctx, version, http.MethodPut, "/v1/nodes/"+url.PathEscape(ident)+"/states/provision", body, nil)
}

// CreatePort binds a MAC address to a node.
func (c *Client) CreatePort(ctx context.Context, nodeUUID, mac string) error {
	return c.Do(ctx, http.MethodPost, "/v1/ports", map[string]any{"node_uuid": nodeUUID, "address": mac}, nil)
}

// WaitForState polls the node until it rests in want (no work reserved),
// calling onPoll with every reading (callers show what changed, e.g. the
// agent's progress). It fails early when the node lands in a failed state.
func (c *Client) WaitForState(ctx context.Context, ident, want string, every time.Duration, onPoll func(*Node)) (*Node, error) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		n, err := c.GetNode(ctx, ident)
		if err != nil {
			return nil, err
		}
		if onPoll != nil {
			onPoll(n)
		}
		if n.ProvisionState == want && n.Reservation == nil {
			return n, nil
		}
		if strings.HasSuffix(n.ProvisionState, " failed") || n.ProvisionState == "error" {
			return n, fmt.Errorf("node %s failed: %s: %s", ident, n.ProvisionState, deref(n.LastError))
		}
		select {
		case <-ctx.Done():
			return n, fmt.Errorf("waiting for %s to reach %q (now %q): %w", ident, want, n.ProvisionState, ctx.Err())
		case <-t.C:
		}
	}
}

// CurrentStep names the running clean, deploy or service step ("" when none).
func CurrentStep(n *Node) string {
	if s := n.ServiceStep; len(s) > 0 {
		return fmt.Sprintf("%v.%v", s["interface"], s["step"])
	}
	return protocol.NodeStepKey(n.CleanStep, n.DeployStep)
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// Event is one node history entry.
type Event struct {
	UUID      string `json:"uuid"`
	CreatedAt string `json:"created_at"`
	Severity  string `json:"severity"`
	EventType string `json:"event_type"`
	Event     string `json:"event"`
}

// History returns the node's event history, oldest first.
func (c *Client) History(ctx context.Context, ident string) ([]Event, error) {
	var out struct {
		History []Event `json:"history"`
	}
	return out.History, c.Do(ctx, http.MethodGet, "/v1/nodes/"+url.PathEscape(ident)+"/history", nil, &out)
}
