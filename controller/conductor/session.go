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

	"github.com/anvil-metal/anvil/controller/limits"
	"github.com/anvil-metal/anvil/controller/state"
	"github.com/anvil-metal/anvil/controller/store"
	"github.com/anvil-metal/anvil/protocol"
)

// sessions serves the agents' lookups and heartbeats.
type sessions struct {
	*core
	kick func(nodeUUID string) // hands work a heartbeat enabled to the runtime
	// refusals writes history lines about requests refused for lacking
	// the boot's secret, within each node's budget (trust.go).
	refusals func(ctx context.Context, nodeUUID, severity, msg string)
}

func newSessionService(co *core, kick func(string)) *sessions {
	s := &sessions{core: co, kick: kick}
	suppressed := func(n int) {
		if co.cfg.Suppressed != nil {
			co.cfg.Suppressed("agent", n)
		}
	}
	s.refusals = limits.Budgeted(func(ctx context.Context, nodeUUID, severity, msg string) {
		co.event(ctx, nodeUUID, severity, "agent", msg)
	},
		refusalBudget, co.cfg.Now, refusalNote, suppressed)
	return s
}

// UsesAgent reports whether the node's deploy interface runs in-band steps.
func UsesAgent(n *store.Node) bool { return n.Interfaces.Deploy == "direct" }

func usesAgentInspect(n *store.Node) bool { return n.Interfaces.Inspect == "agent" }

func newToken() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

// LookupRequest is an agent's lookup: its MACs or node UUID, its boot id,
// the nonce from its kernel command line, and the address it came from.
type LookupRequest struct {
	MACs     []string
	NodeUUID string
	BootID   string
	Nonce    string
	Address  string
	// Only, when set, is the one state the lookup serves (the inspection
	// callback's lookup serves inspect wait only).
	Only state.State
}

// Lookup finds the node an agent runs on, by node UUID or by any MAC of its
// ports, and hands out the agent token of this boot (trust.go): once, to
// the first lookup after the controller booted the node into the ramdisk
// (or after an operator reset it) that carries the boot's nonce when it
// has one. The same agent asking again (same boot id and address) is
// refused without alarm (Conflict): it holds the token. Anybody else with
// the boot's secret is a second claimant, and the operation stops.
func (c *sessions) Lookup(ctx context.Context, req LookupRequest) (*protocol.LookupResponse, error) {
	req.Address = canonicalAddr(req.Address)
	ident := req.NodeUUID
	if ident == "" {
		var err error
		if ident, err = c.nodeByMACs(ctx, req.MACs); err != nil {
			return nil, err
		}
	}
	var token, refused, absent, nodeID string
	var alarm *store.Claim
	ended := false
	n, err := store.MutateNodeEvents(ctx, c.st, ident, func(n *store.Node) ([]*store.Event, error) {
		token, refused, absent, alarm, nodeID, ended = "", "", "", nil, n.UUID, false // ident may be a name
		a := &n.Operation.Agent
		switch {
		case idleAgent(n):
			// The agent left running holds its token and does not look
			// up: whoever does (that agent restarted, another boot, a
			// stranger) ends fast track (fasttrack.go), and the node is
			// powered off as it would be without fast track. A rebooted
			// machine's boot script carries no nonce (the node rests, it
			// is not being booted), so nothing here can tell the machine
			// from a stranger; a stranger on the provisioning network can
			// thus cancel fast track's saving, and gains nothing.
			absent, ended = "the agent left running (fast track) holds this node's token; a lookup ends fast track", true
			return []*store.Event{c.endFastTrackOff(n, fmt.Sprintf("a lookup from %s (boot %s) while the agent of boot %s was kept running",
				orUnknown(req.Address), orUnknown(req.BootID), orUnknown(a.BootID)))}, nil
		case !state.LookupAllowed(state.State(n.ProvisionState)):
			absent = fmt.Sprintf("the node is %s, which does not expect an agent", n.ProvisionState)
			return nil, errUnchanged
		case req.Only != "" && state.State(n.ProvisionState) != req.Only:
			absent = fmt.Sprintf("the node is %s, not %s", n.ProvisionState, req.Only)
			return nil, errUnchanged
		case a.Await == nil && !a.Booted:
			// No boot of the controller's to answer for: a lookup now
			// would get a token that the coming reboot makes worthless.
			absent = "the controller has not booted the node into the ramdisk for its " + n.ProvisionState
			return nil, errUnchanged
		case a.Alarm != nil:
			refused = "the operation is being stopped after a second claimant"
			return nil, errUnchanged
		case a.LeftRamdisk:
			absent = "a step rebooted the node out of the ramdisk; the controller boots it again when a step needs the agent"
			return nil, errUnchanged
		case req.BootID != "" && req.BootID == a.PreviousBootID:
			// The agent of the boot before this one, still up while the
			// controller reboots the node: not a claimant of this boot.
			refused = "it comes from the agent of the previous boot, which the controller is rebooting"
			return nil, errUnchanged
		case a.BootNonce != "" && subtle.ConstantTimeCompare([]byte(a.BootNonce), []byte(req.Nonce)) != 1:
			refused = "it carried no nonce or another one than this boot's"
			return nil, errUnchanged
		case a.Token == "":
			token = newToken()
			a.Token, a.BootID, a.Address = token, req.BootID, req.Address
			a.LastHeartbeat, a.BootTimings = time.Time{}, nil
			return []*store.Event{c.newEvent(n.UUID, "INFO", "agent", fmt.Sprintf("agent of boot %s at %s looked up; token issued", req.BootID, req.Address))}, nil
		case req.BootID != "" && req.BootID == a.BootID && req.Address == a.Address && a.LastHeartbeat.IsZero() && a.BootNonce != "":
			// The same agent again, with this boot's nonce (checked
			// above), before any heartbeat with the token: the answer to
			// its lookup was lost (a controller killed between the write
			// and the answer, a dropped connection). A new token replaces
			// the one nobody has used; without it the node would wait for
			// its agent until the timeout. Should the first one turn up
			// after all, two parties hold this boot's secret: its
			// heartbeat is a second claimant (heartbeatClaim). Without a
			// nonce, boot id and address are all a stranger needs, so
			// there is no second token; once the token has been used,
			// neither.
			a.VoidTokenSum = tokenSum(a.Token)
			token = newToken()
			a.Token = token
			return []*store.Event{c.newEvent(n.UUID, "INFO", "agent", fmt.Sprintf(
				"agent of boot %s at %s looked up again before its first heartbeat (the answer to its lookup was lost); a new token issued, the first is void",
				req.BootID, req.Address))}, nil
		case req.BootID != "" && req.BootID == a.BootID && req.Address == a.Address:
			return nil, Conflict("The agent token for boot %s was already issued to this agent; it is not issued twice. "+
				"An agent restarted within its boot keeps its token; the controller's next reboot of the node issues a new one.", req.BootID)
		}
		alarm = &store.Claim{At: c.now(), Via: "lookup", Address: req.Address, BootID: req.BootID,
			HolderAddress: a.Address, HolderBootID: a.BootID}
		return c.raiseAlarm(n, alarm), nil
	})
	switch {
	case errors.Is(err, errUnchanged):
	case errors.Is(err, store.ErrNotFound):
		c.log.InfoContext(ctx, "lookup refused", "node", ident, "reason", "no such node", "from", req.Address)
		return nil, NotFound(msgNoAgentExpected)
	case err != nil:
		return nil, err
	}
	switch {
	case alarm != nil:
		c.kick(n.UUID)
		return nil, Wrap(CodeForbidden, ErrSecondClaimant, msgSecondClaimant)
	case absent != "":
		if ended {
			c.kick(n.UUID) // its worker powers it off
		}
		c.log.InfoContext(ctx, "lookup refused", "node", ident, "reason", absent, "from", req.Address, "boot_id", req.BootID)
		return nil, NotFound(msgNoAgentExpected)
	case refused != "":
		c.refusedEvent(ctx, nodeID, fmt.Sprintf("lookup from %s (boot %s) refused: %s", orUnknown(req.Address), orUnknown(req.BootID), refused))
		c.stage(nodeID, store.BootStage{Stage: store.StageLookup, Detail: "from " + orUnknown(req.Address), Outcome: "refused: " + refused, BootID: req.BootID})
		return nil, Wrap(CodeForbidden, ErrNotTrusted, msgNotAllowed)
	}
	if token != "" {
		c.stage(n.UUID, store.BootStage{Stage: store.StageLookup, Detail: fmt.Sprintf("boot %s from %s", orUnknown(req.BootID), orUnknown(req.Address)),
			Outcome: store.OutcomeOK, BootID: req.BootID})
	}
	name := ""
	if n.Name != nil {
		name = *n.Name
	}
	return &protocol.LookupResponse{
		Node: protocol.LookupNode{UUID: n.UUID, Name: name, Properties: n.Properties, InstanceInfo: lookupInstanceInfo(n.InstanceInfo)},
		Config: protocol.AgentConfig{HeartbeatTimeout: int(c.cfg.Agent.SilenceTimeout.Seconds()),
			HeartbeatInterval: c.cfg.Agent.HeartbeatInterval.Seconds(), AgentToken: token, AgentTokenRequired: true,
			Erase: c.cfg.Agent.Erase},
	}, nil
}

// lookupInstanceKeys are the instance_info keys a lookup answers: what
// describes the instance's layout, never where the image is, its
// checksum, a config drive or any password (Ironic's lookup withholds
// those too). The agent gets what a step needs with the step, over the
// token-authenticated heartbeat; anything not listed here is left out,
// so a key added later is not given away by accident.
var lookupInstanceKeys = []string{"root_device", "root_gb", "swap_mb", "ephemeral_gb", "image_disk_format",
	"image_type", "capabilities", "traits", "deploy_boot_mode", "boot_mode"}

// lookupInstanceInfo is instance_info as a lookup answers it.
func lookupInstanceInfo(ii map[string]any) map[string]any {
	out := map[string]any{}
	for _, k := range lookupInstanceKeys {
		if v, ok := ii[k]; ok {
			out[k] = v
		}
	}
	return out
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
		c.log.InfoContext(ctx, "lookup refused", "reason", "no port has these MACs (baremetal port create MAC --node NODE)", "macs", valid)
		return "", NotFound(msgNoAgentExpected)
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
	c.log.WarnContext(ctx, "lookup refused", "reason", "the MACs belong to ports of several nodes; fix the ports", "macs", valid, "nodes", ids)
	return "", NotFound(msgNoAgentExpected)
}

// Heartbeat records an agent's heartbeat in one write and answers with the
// next command. It never waits for the node's worker: work it enables is
// handed over with Kick.
func (c *sessions) Heartbeat(ctx context.Context, ident, addr string, hb *protocol.Heartbeat) (*protocol.HeartbeatResponse, error) {
	addr = canonicalAddr(addr)
	resp := &protocol.HeartbeatResponse{HeartbeatInterval: c.cfg.Agent.HeartbeatInterval.Seconds()}
	kick, first := false, false
	var claim *store.Claim
	n, err := store.MutateNodeWith(ctx, c.st, ident, func(n *store.Node) (context.Context, []*store.Event, error) {
		*resp = protocol.HeartbeatResponse{HeartbeatInterval: c.cfg.Agent.HeartbeatInterval.Seconds()}
		kick, claim = false, nil
		if claim = c.heartbeatClaim(n, addr, hb); claim != nil {
			if idleAgent(n) {
				return ctx, c.idleClaim(n, claim), nil // no operation to stop (fasttrack.go)
			}
			return ctx, c.raiseAlarm(n, claim), nil
		}
		first = n.Operation.Agent.LastHeartbeat.IsZero()
		events, material, err := c.heartbeat(n, addr, hb, resp, &kick)
		if err != nil || material {
			return ctx, events, err
		}
		// Only last-seen and progress changed: the next heartbeat repeats
		// them, so this write need not wait for the disk.
		return store.Volatile(ctx), events, nil
	})
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return nil, NotFound("Node could not be found.")
		}
		return nil, err
	}
	if claim != nil {
		c.kick(n.UUID)
		return nil, Wrap(CodeForbidden, ErrSecondClaimant, msgSecondClaimant)
	}
	if kick {
		c.kick(n.UUID)
	}
	if first {
		// Only a boot's first heartbeat goes into its timeline: the
		// rest are the hot path.
		c.stage(n.UUID, store.BootStage{Stage: store.StageHeartbeat, Detail: "agent " + hb.AgentVersion + " from " + orUnknown(addr), Outcome: store.OutcomeOK, BootID: hb.BootID})
	}
	return resp, nil
}

// heartbeatClaim is the claim a heartbeat makes when it carries this
// boot's token from another boot or address (a stolen token, or the token
// of whoever looked up first while the real agent runs too); nil for the
// token's holder, and for a wrong token (refused by heartbeat, with no
// write an unauthenticated caller could multiply).
func (c *sessions) heartbeatClaim(n *store.Node, addr string, hb *protocol.Heartbeat) *store.Claim {
	a := &n.Operation.Agent
	if a.VoidTokenSum != "" && hb.AgentToken != "" &&
		subtle.ConstantTimeCompare([]byte(a.VoidTokenSum), []byte(tokenSum(hb.AgentToken))) == 1 {
		// the token a second lookup of this boot replaced: whoever holds
		// it and whoever looked up again are two parties
		return &store.Claim{At: c.now(), Via: "heartbeat", Address: addr, BootID: hb.BootID, HolderAddress: a.Address, HolderBootID: a.BootID}
	}
	if a.Token == "" || subtle.ConstantTimeCompare([]byte(a.Token), []byte(hb.AgentToken)) != 1 {
		return nil
	}
	if a.BootID == "" || a.BootID == hb.BootID {
		// The token and this boot's id: its agent, wherever it now
		// sends from (a NIC failover, a new DHCP address, a dual-stack
		// URL). heartbeat records the move.
		return nil
	}
	return &store.Claim{At: c.now(), Via: "heartbeat", Address: addr, BootID: hb.BootID, HolderAddress: a.Address, HolderBootID: a.BootID}
}

// heartbeat applies one heartbeat to n and fills resp. material reports a
// change that must survive a power loss (anything but last-seen, agent
// version and the progress of a still-running command).
func (c *sessions) heartbeat(n *store.Node, addr string, hb *protocol.Heartbeat, resp *protocol.HeartbeatResponse, kick *bool) (events []*store.Event, material bool, err error) {
	a := &n.Operation.Agent
	want := a.Token
	if want == "" {
		return nil, false, Unauthorized("Invalid or missing agent token received: look the node up first.")
	}
	if subtle.ConstantTimeCompare([]byte(want), []byte(hb.AgentToken)) != 1 {
		return nil, false, Unauthorized("Invalid or missing agent token received.")
	}
	if boot := a.BootID; boot != "" && boot != hb.BootID {
		return nil, false, Unauthorized("Invalid or missing agent token received: it was issued to another boot; look the node up again.")
	}
	now := c.now()
	if addr != "" && a.Address != "" && addr != a.Address {
		events = append(events, c.newEvent(n.UUID, "INFO", "agent", fmt.Sprintf("the agent of boot %s now heartbeats from %s (it looked up from %s)", a.BootID, addr, a.Address)))
		a.Address = addr
	}
	first := a.LastHeartbeat.IsZero()
	material = first || hb.Steps != nil || a.Version == nil || *a.Version != hb.AgentVersion || len(events) > 0
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
			if hasPending && st.ID == pending.ID {
				// Also when the result is already stored: the controller
				// that stored it may have died before it woke the worker
				// (a load balancer then sends the same heartbeat here),
				// and while the command is pending nobody else will.
				*kick = true
			} else {
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
//
// The node context it carries is what steps read by name (the agent fills
// a step's missing arguments from it: target_raid_config for RAID) and
// nothing else: never instance_info, whose image location, checksums,
// config drive and passwords reach the agent only as the arguments of the
// step that needs them (write_image gets the image's URL and checksum,
// agentdeploy.go), so an agent — or whoever poses as one — that is asked
// for an inventory learns nothing of the instance.
func issueCommand(n *store.Node, name string, step *protocol.Step, now time.Time) {
	cmd := &store.AgentCommand{Command: protocol.Command{ID: uuid.NewString(), Name: name, Step: step, Fingerprint: cachedFingerprint(n),
		Node: map[string]any{"uuid": n.UUID, "properties": n.Properties, "target_raid_config": n.TargetRAIDConfig}}, IssuedAt: now}
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

// ResetAgentToken forgets the node's agent token and starts a new boot
// (with a new nonce when its boot path carries one, delivered by the boot
// script's next fetch), so the next lookup gets a new token: for a node an
// operator rebooted outside the controller. The reset is recorded in the
// node's history.
func (c *sessions) ResetAgentToken(ctx context.Context, ident string) error {
	_, err := store.MutateNodeEvents(ctx, c.st, ident, func(n *store.Node) ([]*store.Event, error) {
		a := &n.Operation.Agent
		held := fmt.Sprintf("held by %s (boot %s)", orUnknown(a.Address), orUnknown(a.BootID))
		if a.Token == "" {
			held = "none issued"
		}
		c.bootAgain(n)
		next := "the next lookup gets a new one"
		switch {
		case a.NonceVia == store.NonceVirtualMedia:
			next = "the next lookup carrying the nonce of the node's virtual-media ISO gets a new one"
		case a.BootNonce != "":
			next = "the next lookup carrying the nonce of the boot script's next fetch gets a new one"
		}
		return []*store.Event{c.newEvent(n.UUID, "WARNING", "agent",
			"agent token reset through the API ("+held+"); "+next)}, nil
	})
	if errors.Is(err, store.ErrNotFound) {
		return NotFound("Node %s could not be found.", ident)
	}
	return err
}
