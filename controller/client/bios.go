package client

import (
	"context"
	"net/http"
	"net/url"
)

// FirmwareVersion is the microversion of a node's firmware list (Ironic's
// firmware interface, 1.86).
const FirmwareVersion = "1.86"

// BIOSSetting is one cached BIOS setting with Ironic's fields (the
// attribute registry's from 1.74; nil and empty where the BMC said
// nothing) and anvil's PendingValue.
type BIOSSetting struct {
	Name            string   `json:"name"`
	Value           string   `json:"value"`
	AttributeType   string   `json:"attribute_type"`
	AllowableValues []string `json:"allowable_values"`
	LowerBound      *int     `json:"lower_bound"`
	UpperBound      *int     `json:"upper_bound"`
	MinLength       *int     `json:"min_length"`
	MaxLength       *int     `json:"max_length"`
	ReadOnly        *bool    `json:"read_only"`
	ResetRequired   *bool    `json:"reset_required"`
	Unique          *bool    `json:"unique"`
	// PendingValue is the value set on the BMC that the next boot applies
	// (nil: none differs).
	PendingValue *string `json:"pending_value"`
	CreatedAt    string  `json:"created_at"`
	UpdatedAt    *string `json:"updated_at"`
}

// BIOSSettings is a node's BIOS cache: its settings by name, and when
// there are none, the controller's Reason.
type BIOSSettings struct {
	NodeUUID string        `json:"node_uuid"`
	Settings []BIOSSetting `json:"bios"`
	Reason   string        `json:"reason"`
}

// BIOS reads a node's cached BIOS settings with their pending values.
// Ironic's API (GET /v1/nodes/{node}/bios) keeps no pending values, so
// this reads the dashboard's view of the same cache, which adds them; it
// takes the same credentials.
func (c *Client) BIOS(ctx context.Context, ident string) (*BIOSSettings, error) {
	var out BIOSSettings
	return &out, c.Do(ctx, http.MethodGet, "/ui/api/nodes/"+url.PathEscape(ident)+"/bios", nil, &out)
}

// FirmwareComponent is one component's firmware as Ironic's API shows it.
type FirmwareComponent struct {
	Component          string  `json:"component"`
	InitialVersion     string  `json:"initial_version"`
	CurrentVersion     string  `json:"current_version"`
	LastVersionFlashed *string `json:"last_version_flashed"`
	CreatedAt          string  `json:"created_at"`
	UpdatedAt          *string `json:"updated_at"`
}

// Firmware lists a node's firmware components through Ironic's API
// (GET /v1/nodes/{node}/firmware at FirmwareVersion).
func (c *Client) Firmware(ctx context.Context, ident string) ([]FirmwareComponent, error) {
	var out struct {
		Firmware []FirmwareComponent `json:"firmware"`
	}
	return out.Firmware, c.DoVersion(ctx, FirmwareVersion, http.MethodGet, "/v1/nodes/"+url.PathEscape(ident)+"/firmware", nil, &out)
}

// FirmwareReason says why a node has no firmware components cached (""
// when it has some), as the dashboard's view of the cache says it.
func (c *Client) FirmwareReason(ctx context.Context, ident string) (string, error) {
	var out struct {
		Reason string `json:"reason"`
	}
	return out.Reason, c.Do(ctx, http.MethodGet, "/ui/api/nodes/"+url.PathEscape(ident)+"/firmware", nil, &out)
}
