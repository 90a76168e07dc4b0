package client

import (
	"context"
	"net/http"
	"net/url"
)

// SELEntry is one entry of a node's System Event Log as the BMC gives it.
type SELEntry struct {
	ID      string `json:"id"`
	Created string `json:"created"`
	Sensor  string `json:"sensor"`
	Message string `json:"message"`
}

// SEL reads a node's System Event Log live from its BMC, oldest first
// (GET /v1/nodes/{node}/sel, an anvil extension).
func (c *Client) SEL(ctx context.Context, ident string) ([]SELEntry, error) {
	var out struct {
		Entries []SELEntry `json:"entries"`
	}
	return out.Entries, c.Do(ctx, http.MethodGet, "/v1/nodes/"+url.PathEscape(ident)+"/sel", nil, &out)
}

// InjectNMI has the node's BMC send it a non-maskable interrupt (PUT
// /v1/nodes/{node}/management/inject_nmi, API 1.29).
func (c *Client) InjectNMI(ctx context.Context, ident string) error {
	return c.DoVersion(ctx, "1.29", http.MethodPut, "/v1/nodes/"+url.PathEscape(ident)+"/management/inject_nmi", map[string]any{}, nil)
}
