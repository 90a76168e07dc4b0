package client

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/coder/websocket"
)

// ConsoleLog returns the scrollback the controller kept of the node's
// serial console (GET /v1/nodes/{node}/console/log, an anvil extension).
func (c *Client) ConsoleLog(ctx context.Context, node string) ([]byte, error) {
	path := "/v1/nodes/" + url.PathEscape(node) + "/console/log"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+path, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("X-OpenStack-Ironic-API-Version", Version)
	if c.user != "" {
		req.SetBasicAuth(c.user, c.pass)
	}
	res, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", path, err)
	}
	defer res.Body.Close()
	data, err := io.ReadAll(res.Body)
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", path, err)
	}
	if res.StatusCode >= 400 {
		return nil, &Error{Status: res.StatusCode, Message: faultString(data)}
	}
	return data, nil
}

// ConsoleStatus is the first message of a console WebSocket.
type ConsoleStatus struct {
	Node  string `json:"node"`
	Input bool   `json:"input"` // this viewer holds the console's input
}

// Console is an open console WebSocket.
type Console struct {
	conn   *websocket.Conn
	Status ConsoleStatus
}

// DialConsole opens the node's console WebSocket (console_info.url;
// wantInput false: a read-only viewer).
func (c *Client) DialConsole(ctx context.Context, node string, wantInput bool) (*Console, error) {
	u := c.base + "/v1/nodes/" + url.PathEscape(node) + "/console/ws"
	if !wantInput {
		u += "?input=false"
	}
	if rest, ok := strings.CutPrefix(u, "https://"); ok {
		u = "wss://" + rest
	} else {
		u = "ws://" + strings.TrimPrefix(u, "http://")
	}
	hc := *c.http
	hc.Timeout = 0 // the socket lives on; ctx bounds the handshake
	h := http.Header{"X-OpenStack-Ironic-API-Version": {Version}}
	if c.user != "" {
		r := &http.Request{Header: http.Header{}}
		r.SetBasicAuth(c.user, c.pass)
		h.Set("Authorization", r.Header.Get("Authorization"))
	}
	conn, res, err := websocket.Dial(ctx, u, &websocket.DialOptions{HTTPClient: &hc, HTTPHeader: h})
	if err != nil {
		if res != nil && res.StatusCode >= 400 {
			data, _ := io.ReadAll(res.Body)
			return nil, &Error{Status: res.StatusCode, Message: faultString(data)}
		}
		return nil, fmt.Errorf("console of %s: %w", node, err)
	}
	conn.SetReadLimit(1 << 20)
	cons := &Console{conn: conn}
	_, p, err := conn.Read(ctx)
	if err == nil {
		err = json.Unmarshal(p, &cons.Status)
	}
	if err != nil {
		conn.CloseNow()
		return nil, fmt.Errorf("console of %s: %w", node, err)
	}
	return cons, nil
}

// Read returns the next piece of console output; io.EOF when the
// controller closed the console (it was disabled).
func (c *Console) Read(ctx context.Context) ([]byte, error) {
	for {
		typ, p, err := c.conn.Read(ctx)
		if websocket.CloseStatus(err) == websocket.StatusNormalClosure {
			return nil, io.EOF
		}
		if err != nil {
			return nil, err
		}
		if typ == websocket.MessageBinary {
			return p, nil
		}
	}
}

// Write types p into the console (ignored unless Status.Input).
func (c *Console) Write(ctx context.Context, p []byte) error {
	return c.conn.Write(ctx, websocket.MessageBinary, p)
}

// Close closes the socket.
func (c *Console) Close() error { return c.conn.Close(websocket.StatusNormalClosure, "") }
