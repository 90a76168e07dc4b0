package conductor

// Fast track (Ironic's [deploy]fast_track): the agent ramdisk that ran a
// node's cleaning or inspection is left running while the node rests in
// available or manageable, heartbeating at the idle interval, and the
// next deploy, cleaning, inspection or service starts on it with no power
// action and no network boot. This file owns the decision
// (fastTrackDecision, one pure function), keeping an agent running and
// ending that, the idle checks (timeout, max idle) and the timing of
// deploys (boot against steps). Trust stays as for a fresh boot: the
// agent keeps the token it was issued for its boot, and any change of
// boot, a lookup or a heartbeat gap beyond the timeout ends fast track.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/anvil-metal/anvil/controller/state"
	"github.com/anvil-metal/anvil/controller/store"
	"github.com/anvil-metal/anvil/protocol"
)

// FastTrackConfig tunes fast track.
type FastTrackConfig struct {
	// Enabled is the fleet default (Ironic's [deploy]fast_track, off);
	// a node's driver_info.fast_track overrides it.
	Enabled bool
	// Timeout: the running agent's last heartbeat must be this recent
	// for an operation to start on it (Ironic's fast_track_timeout, 300 s).
	Timeout time.Duration
	// MaxIdle bounds how long a node stays on in the ramdisk between
	// operations; after it the node is powered off as without fast
	// track (0: unbounded).
	MaxIdle time.Duration
}

// Paths of an operation's start, as the history and the metrics name them.
const (
	pathFastTrack = "fast track"
	pathFullBoot  = "full boot"
)

// fastTrackEnabled reads driver_info.fast_track (a bool or its string),
// else the fleet default.
func fastTrackEnabled(n *store.Node, cfg FastTrackConfig) bool {
	switch v := n.DriverInfo["fast_track"].(type) {
	case bool:
		return v
	case string:
		switch strings.ToLower(strings.TrimSpace(v)) {
		case "true", "yes", "1", "on":
			return true
		case "false", "no", "0", "off":
			return false
		}
	}
	return cfg.Enabled
}

// tokenSum is the SHA-256 (hex) of an agent token: what the fast-track
// record keeps to tell that the token is still the one issued.
func tokenSum(tok string) string {
	s := sha256.Sum256([]byte(tok))
	return hex.EncodeToString(s[:])
}

// fastTrackDecision decides whether an operation starting now on n may
// use the agent left running (true) or must boot the ramdisk (false),
// and says why either way, for the history.
func fastTrackDecision(n *store.Node, now time.Time, cfg FastTrackConfig) (bool, string) {
	a := &n.Operation.Agent
	ft := a.FastTrack
	switch {
	case !fastTrackEnabled(n, cfg):
		if _, set := n.DriverInfo["fast_track"]; set {
			return false, "driver_info.fast_track is off for this node"
		}
		return false, "fast track is off (--fast-track)"
	case !UsesAgent(n) && !usesAgentInspect(n):
		return false, "the node's interfaces do not use the agent"
	case ft == nil:
		return false, "no agent was left running (the last operation ended its agent or powered the node off)"
	case a.Alarm != nil:
		return false, "a second claimant was seen for the running agent's boot"
	case a.LeftRamdisk:
		return false, "the node left the ramdisk"
	case deref(n.PowerState) != PowerOn:
		return false, fmt.Sprintf("the node is %s", orUnknown(deref(n.PowerState)))
	case a.Token == "" || tokenSum(a.Token) != ft.TokenSum:
		return false, "the agent's token is not the one issued to the agent left running"
	case a.BootID != ft.BootID:
		return false, fmt.Sprintf("the agent's boot changed (%s, the agent left running was boot %s)", orUnknown(a.BootID), orUnknown(ft.BootID))
	case a.LastHeartbeat.IsZero():
		return false, "the agent never heartbeated"
	case now.Sub(a.LastHeartbeat) > cfg.Timeout:
		return false, fmt.Sprintf("the agent's last heartbeat was %s ago, beyond the fast-track timeout of %s", now.Sub(a.LastHeartbeat).Round(time.Second), cfg.Timeout)
	case cfg.MaxIdle > 0 && now.Sub(ft.Since) > cfg.MaxIdle:
		return false, fmt.Sprintf("the node has been idle in the ramdisk for %s, beyond the maximum of %s (--fast-track-max-idle)", now.Sub(ft.Since).Round(time.Second), cfg.MaxIdle)
	}
	return true, fmt.Sprintf("the agent of boot %s is running (last heartbeat %s ago)", a.BootID, now.Sub(a.LastHeartbeat).Round(time.Second))
}

// canKeepAgent reports whether an operation ending now may leave n's
// agent running: fast track is on for n and its agent holds a token of
// a boot it has not left.
func canKeepAgent(n *store.Node, cfg FastTrackConfig) bool {
	a := &n.Operation.Agent
	return fastTrackEnabled(n, cfg) && a.Booted && a.Token != "" && a.BootID != "" && !a.LeftRamdisk && a.Alarm == nil &&
		!n.Retired && !n.Maintenance
}

// keepAgent leaves m's agent running after its operation ended (in the
// caller's write, instead of wipeAgent): no command, no await, and the
// record of the boot and token the next operation may use.
func keepAgent(m *store.Node, now time.Time) {
	a := &m.Operation.Agent
	since := a.BootStartedAt
	if since.IsZero() {
		since = now
	}
	a.Command, a.CommandStatus, a.Await, a.Booted = nil, nil, nil, false
	a.FastTrack = &store.FastTrack{Since: now, BootID: a.BootID, TokenSum: tokenSum(a.Token), AgentSince: since}
	m.PowerState = strp(PowerOn)
}

// keptEvent is the history line of an agent left running.
func (c *core) keptEvent(n *store.Node, what string) *store.Event {
	return c.newEvent(n.UUID, "INFO", "fast track", fmt.Sprintf("%s done: the agent of boot %s stays running (fast track), the node stays powered on", what, n.Operation.Agent.BootID))
}

// endFastTrack forgets m's agent left running (the token dies with it),
// in the caller's write; the next operation boots the ramdisk.
func (c *core) endFastTrack(m *store.Node, why string) *store.Event {
	boot := m.Operation.Agent.FastTrack.BootID
	wipeAgent(m)
	return c.newEvent(m.UUID, "WARNING", "fast track", fmt.Sprintf("fast track ends: %s; the agent of boot %s is no longer trusted and the next operation boots the node again", why, boot))
}

// endFastTrackOff is endFastTrack for a node resting on fast track,
// which is then powered off by its worker, as it would have been without
// fast track (the caller kicks it).
func (c *core) endFastTrackOff(m *store.Node, why string) *store.Event {
	ev := c.endFastTrack(m, why)
	if !state.Working(state.State(m.ProvisionState)) && deref(m.PowerState) != PowerOff && !m.DisablePowerOff && m.TargetPowerState == nil {
		m.TargetPowerState, m.Reservation = strp(PowerOff), strp(c.cfg.Host)
	}
	return ev
}

// startOnRunningAgent decides how an operation (what: "cleaning",
// "deploy", …) starting on n gets its agent. On fast track the running
// agent becomes this operation's (Booted, in the same write as more) and
// it reports true; otherwise the caller boots the ramdisk. The history
// says which path was taken and why, whenever fast track is on for n or
// an agent was left running.
func (c *agents) startOnRunningAgent(ctx context.Context, n *store.Node, what string, more func(m *store.Node)) (bool, error) {
	ok, why := fastTrackDecision(n, c.now(), c.cfg.FastTrack)
	if !ok && !fastTrackEnabled(n, c.cfg.FastTrack) && n.Operation.Agent.FastTrack == nil {
		return false, nil // fast track plays no part: nothing to say
	}
	cur := n.ProvisionState
	_, err := store.MutateNodeEvents(ctx, c.st, n.UUID, func(m *store.Node) ([]*store.Event, error) {
		if m.ProvisionState != cur {
			return nil, errStale
		}
		a := &m.Operation.Agent
		if !ok {
			a.FastTrack = nil // the coming boot starts a new session
			return []*store.Event{c.newEvent(m.UUID, "INFO", "fast track", fmt.Sprintf("%s: %s, not fast track: %s", what, pathFullBoot, why))}, nil
		}
		if a.FastTrack == nil || a.Token == "" || tokenSum(a.Token) != a.FastTrack.TokenSum {
			return nil, errStale // ended meanwhile (a lookup, a power action)
		}
		a.FastTrack, a.Booted, a.Await, a.Command, a.CommandStatus = nil, true, nil, nil, nil
		if more != nil {
			more(m)
		}
		return []*store.Event{c.newEvent(m.UUID, "INFO", "fast track", fmt.Sprintf("%s: %s, no power action and no network boot: %s", what, pathFastTrack, why))}, nil
	})
	if errors.Is(err, errStale) {
		return false, nil // decided again on the next pass
	}
	// No boot-timeline stage: the timeline's boot stage opens a new boot,
	// and this is the running one (the history says it).
	return ok, err
}

// agentReady records when a deploy's agent was ready, and how: the end
// of the deploy's boot part.
func agentReady(m *store.Node, now time.Time, path string) {
	if t := m.Operation.DeployTiming; t != nil && t.AgentReadyAt.IsZero() && state.State(m.ProvisionState) != state.Active {
		t.AgentReadyAt, t.Path = now, path
	}
}

// deployTimed is the history line of n's deploy reaching active now,
// with its total and its boot and steps parts, and the function that
// reports them to the metrics once it is written (nil, nil: not timed).
func (c *core) deployTimed(n *store.Node) (*store.Event, func()) {
	t := n.Operation.DeployTiming
	if t == nil || t.RequestedAt.IsZero() {
		return nil, nil
	}
	now := c.now()
	ready, path := t.AgentReadyAt, t.Path
	if ready.IsZero() {
		ready, path = t.RequestedAt, "no agent"
	}
	boot, steps := ready.Sub(t.RequestedAt), now.Sub(ready)
	report := func() {
		if c.cfg.DeployTimed != nil {
			c.cfg.DeployTimed(path, boot, steps)
		}
	}
	return c.newEvent(n.UUID, "INFO", "deploy", fmt.Sprintf("active %s after it was requested: boot %s (%s), steps %s",
		now.Sub(t.RequestedAt).Round(time.Millisecond), boot.Round(time.Millisecond), path, steps.Round(time.Millisecond))), report
}

// checkFastTrack ends fast track for resting nodes whose agent left
// running no longer qualifies (its heartbeats stopped, its boot changed,
// the maximum idle time passed): their token dies and they are powered
// off, as a node is without fast track.
func (c *stops) checkFastTrack(ctx context.Context) {
	no := false
	now := c.now()
	for _, st := range []state.State{state.Available, state.Manageable} {
		s := string(st)
		nodes, err := c.st.ListNodes(ctx, store.NodeFilter{ProvisionState: &s, Maintenance: &no}, store.Page{})
		if err != nil {
			c.log.Error("listing resting nodes failed", "state", s, "err", err)
			continue
		}
		for _, n := range nodes {
			if n.Operation.Agent.FastTrack == nil || n.Reservation != nil || n.TargetPowerState != nil {
				continue
			}
			ok, why := fastTrackDecision(n, now, c.cfg.FastTrack)
			if ok || !c.leases.lease(ctx, n) {
				continue
			}
			_, err := store.MutateNodeEvents(c.leases.fenced(ctx), c.st, n.UUID, func(m *store.Node) ([]*store.Event, error) {
				if m.Operation.Agent.FastTrack == nil || m.ProvisionState != s || m.Reservation != nil || m.TargetPowerState != nil {
					return nil, errStale
				}
				return []*store.Event{c.endFastTrackOff(m, why)}, nil
			})
			if err != nil && !errors.Is(err, errStale) {
				c.log.Error("ending fast track failed", "node", n.UUID, "err", err)
				continue
			}
			c.kick(n.UUID)
		}
	}
}

// idleAgent reports whether n's agent is one left running between
// operations (fast track) that no operation has taken yet.
func idleAgent(n *store.Node) bool { return n.Operation.Agent.FastTrack != nil }

// idleClaim ends fast track for an agent left running that a lookup or
// a heartbeat of another boot claimed: there is no operation to stop,
// and the agent cannot be told from the claimant.
func (c *core) idleClaim(n *store.Node, cl *store.Claim) []*store.Event {
	n.Operation.Agent.AddClaim(*cl) // kept by the wipe, for the operator
	return []*store.Event{c.endFastTrackOff(n, fmt.Sprintf("%s from %s while the agent of boot %s was kept running",
		cl.Via, whoIs(cl.Address, cl.BootID), orUnknown(cl.HolderBootID)))}
}

// inventoryOnRunningAgent is the inspection's start on a running agent:
// the inventory command is left in the same write.
func inventoryOnRunningAgent(now time.Time) func(m *store.Node) {
	return func(m *store.Node) { issueCommand(m, protocol.CmdInventory, nil, now) }
}
