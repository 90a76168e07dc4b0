package client

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// BootStage is one stage of a node's boot as the controller saw it.
type BootStage struct {
	At      time.Time `json:"at"`
	Stage   string    `json:"stage"`
	Detail  string    `json:"detail"`
	Outcome string    `json:"outcome"`
}

// Boot is one boot of a node: its number, the agent's boot id once it
// looked up (nil before), and its stages in order.
type Boot struct {
	Number int64       `json:"number"`
	BootID *string     `json:"boot_id"`
	Stages []BootStage `json:"stages"`
}

// BootTimeline reads a node's boots, newest first (GET
// /v1/nodes/{node}/boot-timeline, an anvil extension); limit 0: all the
// controller keeps.
func (c *Client) BootTimeline(ctx context.Context, ident string, limit int) ([]Boot, error) {
	var out struct {
		Boots []Boot `json:"boots"`
	}
	path := "/v1/nodes/" + url.PathEscape(ident) + "/boot-timeline"
	if limit > 0 {
		path += "?limit=" + strconv.Itoa(limit)
	}
	return out.Boots, c.Do(ctx, http.MethodGet, path, nil, &out)
}
