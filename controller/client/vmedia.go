package client

import (
	"context"
	"net/http"
	"net/url"
	"strings"
)

// The microversions of the virtual media API (Ironic 1.89 attach and
// detach, 1.93 read).
const (
	VmediaVersion    = "1.89"
	VmediaGetVersion = "1.93"
)

// VirtualMediaSlot is one virtual media slot as the node's BMC reports it.
type VirtualMediaSlot struct {
	MediaTypes []string `json:"media_types"`
	Inserted   bool     `json:"inserted"`
	Image      *string  `json:"image"`
}

func nodePath(ident, rest string) string { return "/v1/nodes/" + url.PathEscape(ident) + rest }

// AttachVirtualMedia inserts the image at imageURL into the node's slot
// of device (cdrom, disk, floppy); source is image_download_source
// ("": Ironic's default, local). The controller checks the insert.
func (c *Client) AttachVirtualMedia(ctx context.Context, ident, device, imageURL, source string) error {
	body := map[string]string{"device_type": device, "image_url": imageURL}
	if source != "" {
		body["image_download_source"] = source
	}
	return c.DoVersion(ctx, VmediaVersion, http.MethodPost, nodePath(ident, "/vmedia"), body, nil)
}

// DetachVirtualMedia ejects the node's slots of devices (all when none).
func (c *Client) DetachVirtualMedia(ctx context.Context, ident string, devices []string) error {
	p := nodePath(ident, "/vmedia")
	if len(devices) > 0 {
		p += "?device_types=" + url.QueryEscape(strings.Join(devices, ","))
	}
	return c.DoVersion(ctx, VmediaVersion, http.MethodDelete, p, nil, nil)
}

// VirtualMedia reads the node's virtual media slots from its BMC.
func (c *Client) VirtualMedia(ctx context.Context, ident string) ([]VirtualMediaSlot, error) {
	var out []VirtualMediaSlot
	return out, c.DoVersion(ctx, VmediaGetVersion, http.MethodGet, nodePath(ident, "/vmedia"), nil, &out)
}

// Subscription is a BMC event subscription as Ironic's redfish vendor
// interface answers it.
type Subscription struct {
	ID          string   `json:"Id"`
	Destination string   `json:"Destination"`
	Context     string   `json:"Context"`
	Protocol    string   `json:"Protocol"`
	EventTypes  []string `json:"EventTypes"`
}

// CreateSubscription has the node's BMC post its events to destination
// (vendor_passthru create_subscription); subContext and eventTypes may be
// empty, headers are sent with each event.
func (c *Client) CreateSubscription(ctx context.Context, ident, destination, subContext string, eventTypes []string, headers map[string]string) (*Subscription, error) {
	body := map[string]any{"Destination": destination}
	if subContext != "" {
		body["Context"] = subContext
	}
	if len(eventTypes) > 0 {
		body["EventTypes"] = eventTypes
	}
	if len(headers) > 0 {
		body["HttpHeaders"] = []map[string]string{headers}
	}
	var out Subscription
	return &out, c.Do(ctx, http.MethodPost, nodePath(ident, "/vendor_passthru?method=create_subscription"), body, &out)
}

// DeleteSubscription deletes the BMC's subscription id.
func (c *Client) DeleteSubscription(ctx context.Context, ident, id string) error {
	return c.Do(ctx, http.MethodDelete, nodePath(ident, "/vendor_passthru?method=delete_subscription"), map[string]string{"id": id}, nil)
}

// Subscriptions lists the BMC's subscriptions: its collection's members,
// each read.
func (c *Client) Subscriptions(ctx context.Context, ident string) ([]Subscription, error) {
	var coll struct {
		Members []struct {
			ID string `json:"@odata.id"`
		} `json:"Members"`
	}
	if err := c.Do(ctx, http.MethodGet, nodePath(ident, "/vendor_passthru?method=get_all_subscriptions"), nil, &coll); err != nil {
		return nil, err
	}
	out := []Subscription{}
	for _, m := range coll.Members {
		id := m.ID[strings.LastIndex(strings.TrimRight(m.ID, "/"), "/")+1:]
		id = strings.TrimRight(id, "/")
		var s Subscription
		if err := c.Do(ctx, http.MethodGet, nodePath(ident, "/vendor_passthru?method=get_subscription"), map[string]string{"id": id}, &s); err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}
