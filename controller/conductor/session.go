package conductor

// The agent-session service: lookup, heartbeats, tokens and the commands
// left for the agent. It reads and writes the agent side of the node's
// operation record; what the agent's results mean for the node's state is
// the lifecycle engine's (agentwait.go).

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"sort"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/anvil-metal/anvil/controller/state"
	"github.com/anvil-metal/anvil/controller/store"
	"github.com/anvil-metal/anvil/protocol"
)

// sessions serves the agents' lookups and heartbeats.
type sessions struct {
	*core
	kick func(nodeUUID string) // hands work a heartbeat enabled to the runtime
}

// UsesAgent reports whether the node's deploy interface runs in-band steps.
func UsesAgent(n *store.Node) bool { return n.Interfaces.Deploy == "direct" }

func usesAgentInspect(n *store.Node) bool { return n.Interfaces.Inspect == "agent" }

func newToken() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

// ErrSecondClaimant marks the refusal of a lookup or heartbeat for a node
// whose agent token this boot already went to another address or boot.
var ErrSecondClaimant = errors.New("second agent claimant")

// LookupRequest is an agent's lookup: its MACs or node UUID, its boot id,
// the nonce from its kernel command line, and the address it came from.
type LookupRequest struct {
	MACs     []string
	NodeUUID string
	BootID   string
	Nonce    string
	Address  string
}

// Lookup finds the node an agent runs on, by node UUID or by any MAC of its
// ports, and hands out the agent token of this boot: once, to the first
// lookup after the controller booted the node into the ramdisk (or after
// an operator reset it). The same agent asking again (same boot id and
// address) is refused without alarm (Conflict): it holds the token.
// Anybody else is a second claimant: refused, recorded in the node's
// history and its claims, never given the token.
func (c *sessions) Lookup(ctx context.Context, req LookupRequest) (*protocol.LookupResponse, error) {
	ident := req.NodeUUID
	if ident == "" {
		var err error
		if ident, err = c.nodeByMACs(ctx, req.MACs); err != nil {
			return nil, err
		}
	}
	var token string
	var claim *store.Claim
	n, err := store.MutateNodeEvents(ctx, c.st, ident, func(n *store.Node) ([]*store.Event, error) {
		token, claim = "", nil
		if !state.LookupAllowed(state.State(n.ProvisionState)) {
			return nil, NotFound("Node %s is in provision state %q, which does not expect an agent; lookup is allowed while cleaning, deploying, inspecting or rescuing.", n.UUID, n.ProvisionState)
		}
		a := &n.Operation.Agent
		if a.Await == nil && !a.Booted {
			// No boot of the controller's to answer for: a lookup now
			// would get a token that the coming reboot makes worthless.
			return nil, NotFound("Node %s does not expect an agent yet: the controller has not booted it into the ramdisk for its %s.", n.UUID, n.ProvisionState)
		}
		if want := a.BootNonce; want != "" && subtle.ConstantTimeCompare([]byte(want), []byte(req.Nonce)) != 1 {
			return nil, Forbidden("Node %s was network-booted with a per-boot nonce and this lookup carried none or another one: only the machine that booted the controller's iPXE script may look itself up (check anvil.token= on its kernel command line).", n.UUID)
		}
		if a.Token != "" {
			if req.BootID != "" && req.BootID == a.BootID && req.Address == a.Address {
				return nil, Conflict("The agent token of node %s for boot %s was already issued to this agent; it is not issued twice. "+
					"An agent restarted within its boot keeps its token; the controller's next reboot of the node issues a new one.", n.UUID, req.BootID)
			}
			claim = &store.Claim{At: c.now(), Via: "lookup", Address: req.Address, BootID: req.BootID,
				HolderAddress: a.Address, HolderBootID: a.BootID}
			a.AddClaim(*claim)
			return []*store.Event{c.claimEvent(n.UUID, claim)}, nil
		}
		token = newToken()
		a.Token, a.BootID, a.Address = token, req.BootID, req.Address
		a.BootNonce = "" // used: the nonce admits one lookup
		a.LastHeartbeat, a.BootTimings = time.Time{}, nil
		return []*store.Event{c.newEvent(n.UUID, "INFO", "agent", fmt.Sprintf("agent of boot %s at %s looked up; token issued", req.BootID, req.Address))}, nil
	})
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return nil, NotFound("Node %s could not be found.", ident)
		}
		return nil, err
	}
	if claim != nil {
		return nil, Wrap(CodeForbidden, ErrSecondClaimant, "The agent token of node %s for this boot was already issued; this lookup was refused and recorded. "+
			"If the node was rebooted outside the controller, reset its agent token through the API.", n.UUID)
	}
	name := ""
	if n.Name != nil {
		name = *n.Name
	}
	info := map[string]any{}
	for k, v := range n.InstanceInfo {
		if !secretInstanceKey(k) {
			info[k] = v
		}
	}
	return &protocol.LookupResponse{
		Node: protocol.LookupNode{UUID: n.UUID, Name: name, Properties: n.Properties, InstanceInfo: info},
		Config: protocol.AgentConfig{HeartbeatTimeout: int(c.cfg.Agent.SilenceTimeout.Seconds()),
			HeartbeatInterval: c.cfg.Agent.HeartbeatInterval.Seconds(), AgentToken: token, AgentTokenRequired: true,
			Erase: c.cfg.Agent.Erase},
	}, nil
}

// secretInstanceKey: instance_info keys an unauthenticated lookup must not
// answer (the agent gets what a step needs with the command, over the
// token-authenticated heartbeat).
func secretInstanceKey(k string) bool {
	switch k {
	case "configdrive", "image_source", "image_url", "rescue_password", "image_checksum", "image_os_hash_value":
		return true
	}
	k = strings.ToLower(k)
	return strings.Contains(k, "password") || strings.Contains(k, "secret") || strings.Contains(k, "token")
}

// claimEvent is the history entry of a refused second claimant.
func (c *sessions) claimEvent(nodeUUID string, cl *store.Claim) *store.Event {
	return c.newEvent(nodeUUID, "WARNING", "agent", fmt.Sprintf(
		"second agent claimant refused: %s from %s (boot %s) while this boot's agent token is held by %s (boot %s)",
		cl.Via, orUnknown(cl.Address), orUnknown(cl.BootID), orUnknown(cl.HolderAddress), orUnknown(cl.HolderBootID)))
}

func orUnknown(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

// errUnchanged aborts a mutation that has nothing to write.
var errUnchanged = errors.New("unchanged")

func (c *sessions) nodeByMACs(ctx context.Context, macs []string) (string, error) {
	found := map[string]bool{}
	var valid []string
	for _, m := range macs {
		hw, err := net.ParseMAC(strings.TrimSpace(m))
		if err != nil || len(hw) != 6 {
			continue // Ironic ignores invalid MACs too
		}
		mac := hw.String()
		valid = append(valid, mac)
		ports, err := c.st.ListPorts(ctx, store.ResourceFilter{Address: &mac}, store.Page{})
		if err != nil {
			return "", err
		}
		for _, p := range ports {
			found[p.NodeUUID] = true
		}
	}
	if len(valid) == 0 {
		return "", Invalid("At least one of 'addresses' and 'node_uuid' parameters is required, with valid MAC addresses")
	}
	switch len(found) {
	case 0:
		return "", NotFound("No node has a port with any of the MAC addresses %s; create a port for one of them (baremetal port create MAC --node NODE).", strings.Join(valid, ", "))
	case 1:
		for id := range found {
			return id, nil
		}
	}
	ids := make([]string, 0, len(found))
	for id := range found {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return "", NotFound("The MAC addresses %s belong to ports of several nodes (%s); fix the ports.", strings.Join(valid, ", "), strings.Join(ids, ", "))
}

// Heartbeat records an agent's heartbeat in one write and answers with the
// next command. It never waits for the node's worker: work it enables is
// handed over with Kick.
func (c *sessions) Heartbeat(ctx context.Context, ident, addr string, hb *protocol.Heartbeat) (*protocol.HeartbeatResponse, error) {
	resp := &protocol.HeartbeatResponse{HeartbeatInterval: c.cfg.Agent.HeartbeatInterval.Seconds()}
	kick := false
	var claim *store.Claim
	n, err := store.MutateNodeWith(ctx, c.st, ident, func(n *store.Node) (context.Context, []*store.Event, error) {
		*resp = protocol.HeartbeatResponse{HeartbeatInterval: c.cfg.Agent.HeartbeatInterval.Seconds()}
		kick, claim = false, nil
		if claim = c.heartbeatClaim(n, addr, hb); claim != nil {
			n.Operation.Agent.AddClaim(*claim)
			return ctx, []*store.Event{c.claimEvent(n.UUID, claim)}, nil
		}
		events, material, err := c.heartbeat(n, hb, resp, &kick)
		if err != nil || material {
			return ctx, events, err
		}
		// Only last-seen and progress changed: the next heartbeat repeats
		// them, so this write need not wait for the disk.
		return store.Volatile(ctx), events, nil
	})
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return nil, NotFound("Node %s could not be found.", ident)
		}
		return nil, err
	}
	if claim != nil {
		return nil, Wrap(CodeForbidden, ErrSecondClaimant, "The agent token of node %s was issued to another boot or address; this heartbeat was refused and recorded.", n.UUID)
	}
	if kick {
		c.kick(n.UUID)
	}
	return resp, nil
}

// heartbeatClaim is the claim a heartbeat makes when it carries this
// boot's token from another boot or address (a stolen token); nil for the
// token's holder, and for a wrong token (refused by heartbeat, with no
// write an unauthenticated caller could multiply).
func (c *sessions) heartbeatClaim(n *store.Node, addr string, hb *protocol.Heartbeat) *store.Claim {
	a := &n.Operation.Agent
	if a.Token == "" || subtle.ConstantTimeCompare([]byte(a.Token), []byte(hb.AgentToken)) != 1 {
		return nil
	}
	if (a.BootID == "" || a.BootID == hb.BootID) && (a.Address == "" || addr == "" || a.Address == addr) {
		return nil
	}
	return &store.Claim{At: c.now(), Via: "heartbeat", Address: addr, BootID: hb.BootID, HolderAddress: a.Address, HolderBootID: a.BootID}
}

// heartbeat applies one heartbeat to n and fills resp. material reports a
// change that must survive a power loss (anything but last-seen, agent
// version and the progress of a still-running command).
func (c *sessions) heartbeat(n *store.Node, hb *protocol.Heartbeat, resp *protocol.HeartbeatResponse, kick *bool) (events []*store.Event, material bool, err error) {
	a := &n.Operation.Agent
	want := a.Token
	if want == "" {
		return nil, false, Unauthorized("No agent token was issued for node %s: look the node up first.", n.UUID)
	}
	if subtle.ConstantTimeCompare([]byte(want), []byte(hb.AgentToken)) != 1 {
		return nil, false, Unauthorized("Invalid or missing agent token received.")
	}
	if boot := a.BootID; boot != "" && boot != hb.BootID {
		return nil, false, Unauthorized("The token was issued to boot %s, not %s: look the node up again.", boot, hb.BootID)
	}
	now := c.now()
	first := a.LastHeartbeat.IsZero()
	material = first || hb.Steps != nil || a.Version == nil || *a.Version != hb.AgentVersion
	version := hb.AgentVersion
	a.LastHeartbeat, a.Version = now, &version
	if first && len(hb.BootTimings) > 0 {
		a.BootTimings = hb.BootTimings
	}
	fingerprint := cachedFingerprint(n)
	if hb.Steps != nil {
		a.Steps = &store.StepCache{Fingerprint: hb.Steps.Fingerprint, Managers: hb.Steps.Managers,
			Clean: hb.Steps.Clean, Deploy: hb.Steps.Deploy, AgentVersion: hb.AgentVersion, RefreshedAt: now}
		if fingerprint != hb.Steps.Fingerprint {
			events = append(events, c.newEvent(n.UUID, "INFO", "agent", fmt.Sprintf("agent step catalogue cached: %d clean, %d deploy steps (fingerprint %s)",
				len(hb.Steps.Clean), len(hb.Steps.Deploy), hb.Steps.Fingerprint)))
		}
		fingerprint = hb.Steps.Fingerprint
	}
	if fingerprint == "" || fingerprint != hb.Fingerprint {
		resp.SendSteps = true
	}
	if aw := a.Await; aw != nil && !resp.SendSteps && agentBack(n, *aw) {
		*kick = true // the ramdisk is back; the worker continues
	}
	pending := a.Command
	hasPending := pending != nil
	if st := hb.Command; st != nil {
		var prev protocol.CommandStatus
		if a.CommandStatus != nil {
			prev = *a.CommandStatus
		}
		status := *st
		a.CommandStatus = &status
		material = material || prev.ID != st.ID || prev.State != st.State
		if st.State != protocol.CommandRunning {
			resp.Ack = st.ID
			if hasPending && st.ID == pending.ID && prev.State != st.State {
				*kick = true
			} else if !hasPending || st.ID != pending.ID {
				events = append(events, c.newEvent(n.UUID, "WARNING", "agent", fmt.Sprintf("agent reported a result for command %s (%s), which the controller was not waiting for", st.ID, st.Name)))
			}
		}
	}
	busy := hb.Command != nil && hb.Command.State == protocol.CommandRunning
	started := hb.Command != nil && hasPending && hb.Command.ID == pending.ID
	if hasPending && !busy && !started && !resp.SendSteps {
		cmd := pending.Command
		resp.Command = &cmd
	}
	if hasPending && busy && started && pending.AbortRequestedAt != nil {
		resp.Abort = pending.ID
	}
	return events, material || len(events) > 0 || *kick, nil
}

// issueCommand leaves a command for the agent (delivered by the next
// heartbeat) in the same write as the caller's other changes.
func issueCommand(n *store.Node, name string, step *protocol.Step, now time.Time) {
	cmd := &store.AgentCommand{Command: protocol.Command{ID: uuid.NewString(), Name: name, Step: step, Fingerprint: cachedFingerprint(n),
		Node: map[string]any{"uuid": n.UUID, "properties": n.Properties, "instance_info": n.InstanceInfo,
			"target_raid_config": n.TargetRAIDConfig}}, IssuedAt: now}
	if step == nil {
		cmd.Fingerprint = ""
	}
	n.Operation.Agent.Command, n.Operation.Agent.CommandStatus = cmd, nil
}

// wipeAgent forgets the agent of an operation that ended: its token (so a
// lingering agent can no longer act), command and readiness.
// What the agent told about itself (version, catalogue, boot timings) stays.
func wipeAgent(n *store.Node) {
	a := &n.Operation.Agent
	*a = store.AgentSession{Version: a.Version, BootTimings: a.BootTimings, Steps: a.Steps, Claims: a.Claims}
}

// agentBack reports whether the agent of a new boot has heartbeated with
// its catalogue since the await began.
func agentBack(n *store.Node, aw store.Await) bool {
	a := &n.Operation.Agent
	if a.LastHeartbeat.IsZero() || a.BootID == "" || a.BootID == aw.OldBootID || a.LastHeartbeat.Before(aw.Since) {
		return false
	}
	return cachedFingerprint(n) != ""
}

// cachedFingerprint is the cached catalogue's fingerprint ("": none).
func cachedFingerprint(n *store.Node) string {
	if s := n.Operation.Agent.Steps; s != nil {
		return s.Fingerprint
	}
	return ""
}

// CachedSteps returns the node's cached agent catalogue (nil: none yet).
func (c *sessions) CachedSteps(n *store.Node) *store.StepCache {
	return n.Operation.Agent.Steps
}

// BootNonce returns the per-boot nonce to put on the kernel command line of
// the node's iPXE script: minted for the first fetch after the controller
// booted the node, "" for every later one (a stranger fetching the script
// learns nothing usable). The lookup that presents it consumes it.
func (c *sessions) BootNonce(ctx context.Context, nodeUUID string) (string, error) {
	var nonce string
	_, err := store.MutateNode(ctx, c.st, nodeUUID, func(n *store.Node) error {
		a := &n.Operation.Agent
		nonce = ""
		if a.NonceServed || a.Token != "" {
			return errUnchanged
		}
		nonce = newToken()
		a.BootNonce, a.NonceServed = nonce, true
		return nil
	})
	if errors.Is(err, errUnchanged) {
		err = nil
	}
	return nonce, err
}

// ResetAgentToken forgets the node's agent token (and boot nonce), so the
// next lookup gets a new one: for a node an operator rebooted outside the
// controller. The reset is recorded in the node's history.
func (c *sessions) ResetAgentToken(ctx context.Context, ident string) error {
	_, err := store.MutateNodeEvents(ctx, c.st, ident, func(n *store.Node) ([]*store.Event, error) {
		a := &n.Operation.Agent
		held := fmt.Sprintf("held by %s (boot %s)", orUnknown(a.Address), orUnknown(a.BootID))
		if a.Token == "" {
			held = "none issued"
		}
		newBoot(a)
		return []*store.Event{c.newEvent(n.UUID, "WARNING", "agent",
			"agent token reset through the API ("+held+"); the next lookup gets a new one")}, nil
	})
	if errors.Is(err, store.ErrNotFound) {
		return NotFound("Node %s could not be found.", ident)
	}
	return err
}

// newBoot starts the agent session of a new boot of the node: no token is
// issued yet and the iPXE script may carry a fresh nonce.
func newBoot(a *store.AgentSession) {
	a.Token, a.BootID, a.Address, a.BootNonce, a.NonceServed = "", "", "", "", false
}
