package agent

// Discovery mode (anvil.discovery on the kernel command line): the
// controller's boot service booted this machine although no node has its
// MACs. Instead of looking a node up, the agent reports the inventory to
// POST /v1/discovery; the controller enrols the machine as a new node in
// enroll and says what to do next (power off). Nothing is ever erased or
// written in this mode: the agent runs no commands.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/anvil-metal/anvil/protocol"
)

// Discoverer reports a machine no node knows; *Client implements it.
type Discoverer interface {
	Discover(ctx context.Context, req *protocol.DiscoveryRequest) (*protocol.DiscoveryResponse, error)
}

var _ Discoverer = (*Client)(nil)

// Discover implements Discoverer.
func (c *Client) Discover(ctx context.Context, dr *protocol.DiscoveryRequest) (*protocol.DiscoveryResponse, error) {
	body, err := json.Marshal(dr)
	if err != nil {
		return nil, fmt.Errorf("discovery: encode: %w", err)
	}
	body = protocol.WithoutNUL(body) // the controller refuses NULs; firmware strings may hold them
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+protocol.DiscoveryPath, bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("discovery: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.do(req)
	if err != nil {
		return nil, fmt.Errorf("discovery: %w: %w", ErrUnreachable, err)
	}
	defer drain(resp.Body)
	if resp.StatusCode != http.StatusCreated && resp.StatusCode != http.StatusOK {
		return nil, httpError("discovery", resp)
	}
	var out protocol.DiscoveryResponse
	if err := json.NewDecoder(io.LimitReader(resp.Body, 64<<10)).Decode(&out); err != nil {
		return nil, fmt.Errorf("discovery: decode answer: %w", err)
	}
	return &out, nil
}

// discover is Run in discovery mode: network, inventory, one accepted
// report, the controller's action; then idle until ctx ends.
func (l *loop) discover(ctx context.Context) {
	d, ok := l.a.Controller.(Discoverer)
	if !ok || l.a.Inventory == nil {
		l.log.ErrorContext(ctx, "discovery mode needs a controller client that reports discoveries and an inventory; idle")
		<-ctx.Done()
		return
	}
	if _, ok := l.networkUp(ctx); !ok {
		return
	}
	retry := newRetrier(l.a.Backoff)
	var inv protocol.Inventory
	for {
		var err error
		if inv, err = l.a.Inventory(ctx); err == nil {
			break
		}
		wait := retry.next()
		l.log.WarnContext(ctx, "discovery: cannot describe the machine; retrying", "err", err, "retry_in", wait.String())
		if !l.sleep(ctx, wait) {
			return
		}
	}
	retry.reset()
	req := &protocol.DiscoveryRequest{BootID: l.a.BootID, Inventory: inv}
	for {
		resp, err := d.Discover(ctx, req)
		if err == nil {
			l.log.InfoContext(ctx, "discovery: enrolled", "node", resp.NodeUUID, "action", resp.Action, "message", resp.Message)
			l.discoveryAction(ctx, resp.Action)
			return
		}
		if ctx.Err() != nil {
			return
		}
		if errors.Is(err, ErrConflict) {
			// Already a node: nothing to enrol, and nothing for this
			// boot to do until an operator boots the node through it.
			l.log.WarnContext(ctx, "discovery: this machine is already a node on the controller; powering off", "err", err)
			l.discoveryAction(ctx, protocol.DiscoveryPowerOff)
			return
		}
		wait := retry.next()
		l.log.WarnContext(ctx, "discovery: report not accepted; retrying", "err", err, "retry_in", wait.String())
		if !l.sleep(ctx, wait) {
			return
		}
	}
}

// discoveryAction does what the controller said, then idles.
func (l *loop) discoveryAction(ctx context.Context, action string) {
	switch {
	case action != protocol.DiscoveryPowerOff:
		l.log.WarnContext(ctx, "discovery: unknown action from the controller; staying up", "action", action)
	case l.a.Power == nil:
		l.log.WarnContext(ctx, "discovery: no power control here (not the ramdisk); staying up")
	default:
		if err := l.a.Power.PowerOff(ctx); err != nil {
			l.log.ErrorContext(ctx, "discovery: power off failed; staying up", "err", err)
		}
	}
	<-ctx.Done()
}
