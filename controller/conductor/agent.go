package conductor

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
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

// AgentConfig tunes the in-band side: what agents are told and how long the
// controller waits for them.
type AgentConfig struct {
	HeartbeatInterval time.Duration // how often an idle agent heartbeats
	// BootTimeout: the ramdisk must call back this soon after a (re)boot.
	BootTimeout time.Duration
	// SilenceTimeout: a booted agent must heartbeat at least this often.
	SilenceTimeout time.Duration
	// StepTimeout: default limit of one in-band step run, for steps that do
	// not declare max_seconds (0: no limit).
	StepTimeout time.Duration
	Erase       *protocol.ErasePolicy
}

func (a *AgentConfig) defaults() {
	if a.HeartbeatInterval <= 0 {
		a.HeartbeatInterval = 10 * time.Second
	}
	if a.BootTimeout <= 0 {
		a.BootTimeout = 15 * time.Minute
	}
	if a.SilenceTimeout <= 0 {
		a.SilenceTimeout = 5 * time.Minute
	}
}

// Keys of driver_internal_info for the agent (Ironic's where they exist).
const (
	diiToken         = "agent_secret_token"
	diiBootID        = "agent_boot_id"
	diiAgentVersion  = "agent_version"
	diiLastHeartbeat = "agent_last_heartbeat"
	diiBootTimings   = "agent_boot_timings"
	diiStepCache     = "agent_step_cache"     // stepCache
	diiCommand       = "agent_command"        // pendingCommand the worker wants run
	diiCommandStatus = "agent_command_status" // last status the agent reported
	diiAwait         = "agent_await"          // await: waiting for the ramdisk to (re)boot
	diiAgentBooted   = "agent_booted"         // the ramdisk is up for the current operation
	diiBootNonce     = "agent_boot_nonce"     // nonce in the iPXE script served for this operation
)

// stepCache is the agent's step catalogue as last reported.
type stepCache struct {
	Fingerprint  string                    `json:"fingerprint"`
	Managers     []protocol.ManagerVersion `json:"managers"`
	Clean        []protocol.Step           `json:"clean"`
	Deploy       []protocol.Step           `json:"deploy"`
	AgentVersion string                    `json:"agent_version"`
	RefreshedAt  time.Time                 `json:"refreshed_at"`
}

// pendingCommand is work the worker left for the agent; the heartbeat
// handler delivers it. Persisted, so it survives a controller restart.
type pendingCommand struct {
	protocol.Command
	IssuedAt time.Time `json:"issued_at"`
	// Guards is the step an inventory command checks the disks for
	// (diskguard.go), issued as GuardedCommand when the check passes.
	Guards         *protocol.Step `json:"guards,omitempty"`
	GuardedCommand string         `json:"guarded_command,omitempty"`
}

// await records that the node was (re)booted into the ramdisk and what to do
// once the agent is back.
type await struct {
	Reason    string    `json:"reason"` // boot | reboot
	Since     time.Time `json:"since"`
	OldBootID string    `json:"old_boot_id"`
	Step      string    `json:"step,omitempty"` // step to complete when the agent is back
}

func getDII[T any](n *store.Node, key string) (T, bool) {
	var v T
	raw, ok := n.DriverInternalInfo[key]
	if !ok || raw == nil {
		return v, false
	}
	b, err := json.Marshal(raw)
	if err != nil || json.Unmarshal(b, &v) != nil {
		return v, false
	}
	return v, true
}

func setDII(n *store.Node, key string, v any) {
	var m any
	b, _ := json.Marshal(v)
	_ = json.Unmarshal(b, &m)
	n.DriverInternalInfo[key] = m
}

// UsesAgent reports whether the node's deploy interface runs in-band steps.
func UsesAgent(n *store.Node) bool { return n.Interfaces.Deploy == "direct" }

func usesAgentInspect(n *store.Node) bool { return n.Interfaces.Inspect == "agent" }

func newToken() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

// notFoundf is a 404 refusal with a reason.
func notFoundf(format string, a ...any) error {
	return &Error{Code: CodeNotFound, Msg: fmt.Sprintf(format, a...)}
}

// Lookup finds the node an agent runs on, by node UUID or by any MAC of its
// ports, and hands out the agent token of this boot. The same boot id gets
// the same token again (a lost reply is no dead end); a new boot id gets a
// new token and invalidates the previous boot's.
func (c *Conductor) Lookup(ctx context.Context, macs []string, nodeUUID, bootID, nonce string) (*protocol.LookupResponse, error) {
	ident := nodeUUID
	if ident == "" {
		var err error
		if ident, err = c.nodeByMACs(ctx, macs); err != nil {
			return nil, err
		}
	}
	var token string
	n, err := store.MutateNodeEvents(ctx, c.st, ident, func(n *store.Node) ([]*store.Event, error) {
		if !state.LookupAllowed(state.State(n.ProvisionState)) {
			return nil, notFoundf("Node %s is in provision state %q, which does not expect an agent; lookup is allowed while cleaning, deploying, inspecting or rescuing.", n.UUID, n.ProvisionState)
		}
		dii := n.DriverInternalInfo
		if want, _ := dii[diiBootNonce].(string); want != "" && subtle.ConstantTimeCompare([]byte(want), []byte(nonce)) != 1 {
			return nil, &Error{Code: CodeForbidden, Msg: fmt.Sprintf("Node %s was network-booted with a per-boot nonce and this lookup carried none or another one: only the machine that booted the controller's iPXE script may look itself up (check anvil.token= on its kernel command line).", n.UUID)}
		}
		cur, _ := dii[diiToken].(string)
		curBoot, _ := dii[diiBootID].(string)
		if cur != "" && bootID != "" && bootID == curBoot {
			token = cur
			return nil, errUnchanged
		}
		token = newToken()
		dii[diiToken] = token
		dii[diiBootID] = bootID
		delete(dii, diiLastHeartbeat)
		delete(dii, diiBootTimings)
		return []*store.Event{c.newEvent(n.UUID, "INFO", "agent", fmt.Sprintf("agent of boot %s looked up; token issued", bootID))}, nil
	})
	if errors.Is(err, errUnchanged) {
		n, err = c.st.GetNode(ctx, ident)
	}
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return nil, notFoundf("Node %s could not be found.", ident)
		}
		return nil, err
	}
	name := ""
	if n.Name != nil {
		name = *n.Name
	}
	info := map[string]any{}
	for k, v := range n.InstanceInfo {
		if k != "rescue_password" {
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

// errUnchanged aborts a mutation that has nothing to write.
var errUnchanged = errors.New("unchanged")

func (c *Conductor) nodeByMACs(ctx context.Context, macs []string) (string, error) {
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
		return "", invalid("At least one of 'addresses' and 'node_uuid' parameters is required, with valid MAC addresses")
	}
	switch len(found) {
	case 0:
		return "", notFoundf("No node has a port with any of the MAC addresses %s; create a port for one of them (baremetal port create MAC --node NODE).", strings.Join(valid, ", "))
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
	return "", notFoundf("The MAC addresses %s belong to ports of several nodes (%s); fix the ports.", strings.Join(valid, ", "), strings.Join(ids, ", "))
}

// Heartbeat records an agent's heartbeat in one write and answers with the
// next command. It never waits for the node's worker: work it enables is
// handed over with Kick.
func (c *Conductor) Heartbeat(ctx context.Context, ident string, hb *protocol.Heartbeat) (*protocol.HeartbeatResponse, error) {
	resp := &protocol.HeartbeatResponse{HeartbeatInterval: c.cfg.Agent.HeartbeatInterval.Seconds()}
	kick := false
	n, err := store.MutateNodeWith(ctx, c.st, ident, func(n *store.Node) (context.Context, []*store.Event, error) {
		*resp = protocol.HeartbeatResponse{HeartbeatInterval: c.cfg.Agent.HeartbeatInterval.Seconds()}
		kick = false
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
			return nil, notFoundf("Node %s could not be found.", ident)
		}
		return nil, err
	}
	if kick {
		c.Kick(n.UUID)
	}
	return resp, nil
}

// heartbeat applies one heartbeat to n and fills resp. material reports a
// change that must survive a power loss (anything but last-seen, agent
// version and the progress of a still-running command).
func (c *Conductor) heartbeat(n *store.Node, hb *protocol.Heartbeat, resp *protocol.HeartbeatResponse, kick *bool) (events []*store.Event, material bool, err error) {
	dii := n.DriverInternalInfo
	want, _ := dii[diiToken].(string)
	if want == "" {
		return nil, false, &Error{Code: CodeUnauthorized, Msg: fmt.Sprintf("No agent token was issued for node %s: look the node up first.", n.UUID)}
	}
	if subtle.ConstantTimeCompare([]byte(want), []byte(hb.AgentToken)) != 1 {
		return nil, false, &Error{Code: CodeUnauthorized, Msg: "Invalid or missing agent token received."}
	}
	if boot, _ := dii[diiBootID].(string); boot != "" && boot != hb.BootID {
		return nil, false, &Error{Code: CodeUnauthorized, Msg: fmt.Sprintf("The token was issued to boot %s, not %s: look the node up again.", boot, hb.BootID)}
	}
	now := c.now()
	first := dii[diiLastHeartbeat] == nil
	material = first || hb.Steps != nil || dii[diiAgentVersion] != hb.AgentVersion
	dii[diiLastHeartbeat] = now.Format(time.RFC3339Nano)
	dii[diiAgentVersion] = hb.AgentVersion
	if first && len(hb.BootTimings) > 0 {
		setDII(n, diiBootTimings, hb.BootTimings)
	}
	fingerprint := cachedFingerprint(n)
	if hb.Steps != nil {
		setDII(n, diiStepCache, stepCache{Fingerprint: hb.Steps.Fingerprint, Managers: hb.Steps.Managers,
			Clean: hb.Steps.Clean, Deploy: hb.Steps.Deploy, AgentVersion: hb.AgentVersion, RefreshedAt: now})
		if fingerprint != hb.Steps.Fingerprint {
			events = append(events, c.newEvent(n.UUID, "INFO", "agent", fmt.Sprintf("agent step catalogue cached: %d clean, %d deploy steps (fingerprint %s)",
				len(hb.Steps.Clean), len(hb.Steps.Deploy), hb.Steps.Fingerprint)))
		}
		fingerprint = hb.Steps.Fingerprint
	}
	if fingerprint == "" || fingerprint != hb.Fingerprint {
		resp.SendSteps = true
	}
	if aw, waiting := getDII[await](n, diiAwait); waiting && !resp.SendSteps && agentBack(n, aw) {
		*kick = true // the ramdisk is back; the worker continues
	}
	pending, hasPending := getDII[pendingCommand](n, diiCommand)
	if st := hb.Command; st != nil {
		prev, _ := getDII[protocol.CommandStatus](n, diiCommandStatus)
		setDII(n, diiCommandStatus, st)
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
	return events, material || len(events) > 0 || *kick, nil
}

// issueCommand leaves a command for the agent (delivered by the next
// heartbeat) in the same write as the caller's other changes.
func (c *Conductor) issueCommand(n *store.Node, name string, step *protocol.Step) {
	cmd := pendingCommand{Command: protocol.Command{ID: uuid.NewString(), Name: name, Step: step, Fingerprint: cachedFingerprint(n),
		Node: map[string]any{"uuid": n.UUID, "properties": n.Properties, "instance_info": n.InstanceInfo,
			"target_raid_config": n.TargetRAIDConfig}}, IssuedAt: c.now()}
	if step == nil {
		cmd.Fingerprint = ""
	}
	setDII(n, diiCommand, cmd)
	delete(n.DriverInternalInfo, diiCommandStatus)
}

// bootRamdisk sets PXE for the next boot and reboots the node into the
// agent ramdisk; the caller moves the node to a wait state with the await
// record this returns.
func (c *Conductor) bootRamdisk(ctx context.Context, n *store.Node, d Driver, reason, step string) (await, error) {
	if err := d.SetBootDevice(ctx, n, "pxe", false); err != nil {
		return await{}, fmt.Errorf("set boot device pxe: %w", err)
	}
	if err := d.SetPower(ctx, n, Rebooting); err != nil {
		return await{}, fmt.Errorf("reboot into the agent ramdisk: %w", err)
	}
	boot, _ := n.DriverInternalInfo[diiBootID].(string)
	return await{Reason: reason, Since: c.now(), OldBootID: boot, Step: step}, nil
}

// wipeAgent forgets the agent of an operation that ended: its token (so a
// lingering agent can no longer act), command and readiness.
func wipeAgent(n *store.Node) {
	for _, k := range []string{diiToken, diiBootID, diiCommand, diiCommandStatus, diiAwait, diiAgentBooted, diiLastHeartbeat, diiBootNonce} {
		delete(n.DriverInternalInfo, k)
	}
}

// tearDownAgent ends an agent operation that failed or was aborted, as
// Ironic tears cleaning down: the agent's token dies (it can no longer act)
// and the node is powered off by the worker (the power action holds the
// reservation until done).
func (c *Conductor) tearDownAgent(n *store.Node) {
	wipeAgent(n)
	if UsesAgent(n) || usesAgentInspect(n) {
		n.TargetPowerState = strp(PowerOff)
		n.Reservation = strp(c.cfg.Host)
	}
}

// agentBack reports whether the agent of a new boot has heartbeated with
// its catalogue since the await began.
func agentBack(n *store.Node, aw await) bool {
	boot, _ := n.DriverInternalInfo[diiBootID].(string)
	last, _ := n.DriverInternalInfo[diiLastHeartbeat].(string)
	t, err := time.Parse(time.RFC3339Nano, last)
	if err != nil || boot == "" || boot == aw.OldBootID || t.Before(aw.Since) {
		return false
	}
	return cachedFingerprint(n) != ""
}

// cachedFingerprint reads the cached catalogue's fingerprint without
// decoding the catalogue: heartbeats compare it every time.
func cachedFingerprint(n *store.Node) string {
	cache, _ := n.DriverInternalInfo[diiStepCache].(map[string]any)
	fp, _ := cache["fingerprint"].(string)
	return fp
}

// agentWait advances a node waiting for its agent (clean wait, wait
// call-back, inspect wait): the ramdisk came back, or a command finished.
func (c *Conductor) agentWait(ctx context.Context, n *store.Node, d Driver) error {
	cur := state.State(n.ProvisionState)
	if aw, ok := getDII[await](n, diiAwait); ok {
		if !agentBack(n, aw) {
			return nil
		}
		return c.agentIsBack(ctx, n, d, aw)
	}
	pending, ok := getDII[pendingCommand](n, diiCommand)
	if !ok {
		return nil
	}
	st, ok := getDII[protocol.CommandStatus](n, diiCommandStatus)
	if !ok || st.ID != pending.ID || st.State == protocol.CommandRunning {
		return nil
	}
	if pending.Name == protocol.CmdInventory && cur == state.InspectWait {
		return c.finishInspection(ctx, n, d, st)
	}
	if pending.Name == protocol.CmdInventory && pending.Guards != nil {
		return c.diskCheckDone(ctx, n, pending, st)
	}
	if pending.Step == nil {
		return nil
	}
	key := pending.Step.Key()
	clearCmd := func(m *store.Node) {
		delete(m.DriverInternalInfo, diiCommand)
	}
	if st.State == protocol.CommandFailed {
		msg := "the agent reported a failure"
		if st.Error != nil {
			msg = st.Error.Message
			if st.Error.Details != "" {
				msg += ": " + st.Error.Details
			}
			if st.Error.Type != "" {
				msg = st.Error.Type + ": " + msg
			}
		}
		// The agent's summary of the step's partial result (each device
		// erased, skipped or failed and why) goes with the error into
		// last_error and the history, where operators look first.
		if sum := oneLine(st.Summary); sum != "" {
			msg += "; step result: " + sum
		}
		// Agent text (an mdadm error, a summary) must not break the
		// one-line last_error or history event.
		return c.completeAsync(ctx, n.UUID, key, errors.New(oneLine(msg)), "", clearCmd)
	}
	if pending.Step.RebootRequested {
		aw, err := c.bootRamdisk(ctx, n, d, "reboot", key)
		if err != nil {
			return c.completeAsync(ctx, n.UUID, key, fmt.Errorf("step requested a reboot, which failed: %w", err), "", clearCmd)
		}
		_, err = store.MutateNodeEvents(ctx, c.st, n.UUID, func(m *store.Node) ([]*store.Event, error) {
			if m.ProvisionState != string(cur) {
				return nil, errStale
			}
			clearCmd(m)
			setDII(m, diiAwait, aw)
			m.PowerState = strp(PowerOn) // our own reboot: not a drift for power sync
			return []*store.Event{c.newEvent(m.UUID, "INFO", "agent", fmt.Sprintf("step %s requested a reboot; rebooted, waiting for the agent's new boot", key))}, nil
		})
		return err
	}
	return c.completeAsync(ctx, n.UUID, key, nil, st.Summary, clearCmd)
}

// agentIsBack continues after the ramdisk (re)booted.
func (c *Conductor) agentIsBack(ctx context.Context, n *store.Node, d Driver, aw await) error {
	cur := state.State(n.ProvisionState)
	ready := func(m *store.Node) error {
		delete(m.DriverInternalInfo, diiAwait)
		m.DriverInternalInfo[diiAgentBooted] = true
		return nil
	}
	switch {
	case aw.Step != "":
		// the reboot (into the ramdisk, or requested by a step) completes that step
		return c.completeAsync(ctx, n.UUID, aw.Step, nil, "", func(m *store.Node) { _ = ready(m) })
	case cur == state.InspectWait:
		_, err := store.MutateNodeEvents(ctx, c.st, n.UUID, func(m *store.Node) ([]*store.Event, error) {
			if m.ProvisionState != string(cur) {
				return nil, errStale
			}
			_ = ready(m)
			c.issueCommand(m, protocol.CmdInventory, nil)
			return nil, nil
		})
		return err
	default:
		_, err := c.transition(ctx, n.UUID, cur, state.EvResume, ready,
			c.newEvent(n.UUID, "INFO", "agent", "agent ramdisk is up; continuing"))
		if err == nil {
			c.Kick(n.UUID)
		}
		return err
	}
}

// inbandStep starts a step on the agent: the command is left for the next
// heartbeat and the node waits.
func (c *Conductor) inbandStep(ctx context.Context, n *store.Node, kind string, step protocol.Step) (StepStatus, error) {
	name := protocol.CmdExecuteCleanStep
	if kind == "deploy" {
		name = protocol.CmdExecuteDeployStep
	}
	_, err := store.MutateNode(ctx, c.st, n.UUID, func(m *store.Node) error {
		// Resuming after a restart may run this again: a command already
		// issued for this step keeps its id, so the agent (which never
		// re-runs an id) cannot execute the step twice. Completing a step
		// clears its command, so a later identical step gets a new one.
		if guardedStep(kind, step) {
			c.issueGuardedStep(m, name, step)
			return nil
		}
		if p, ok := getDII[pendingCommand](m, diiCommand); ok && p.Name == name && p.Step != nil && p.Step.Key() == step.Key() {
			return nil
		}
		s := step
		c.issueCommand(m, name, &s)
		return nil
	})
	if err != nil {
		return StepDone, err
	}
	return StepWait, nil
}

// cachedSteps returns the agent's cached steps of a kind.
func cachedSteps(n *store.Node, kind string) []protocol.Step {
	cache, ok := getDII[stepCache](n, diiStepCache)
	if !ok {
		return nil
	}
	if kind == "deploy" {
		return cache.Deploy
	}
	return cache.Clean
}

// mergeSteps lists out-of-band steps and the agent's in-band steps; an
// out-of-band step with the same interface.step shadows the in-band one
// (that is how deploy.write_image wraps the agent's step).
func mergeSteps(oob, inband []protocol.Step) []protocol.Step {
	seen := map[string]bool{}
	out := make([]protocol.Step, 0, len(oob)+len(inband))
	for _, s := range oob {
		seen[s.Key()] = true
		out = append(out, s)
	}
	for _, s := range inband {
		if !seen[s.Key()] {
			out = append(out, s)
		}
	}
	return out
}

// StepCache is the cached catalogue as the API shows it.
type StepCache struct {
	Fingerprint  string
	AgentVersion string
	RefreshedAt  time.Time
	Managers     []protocol.ManagerVersion
	Clean        []protocol.Step
	Deploy       []protocol.Step
}

// CachedSteps returns the node's cached agent catalogue (ok=false: none yet).
func (c *Conductor) CachedSteps(n *store.Node) (StepCache, bool) {
	cache, ok := getDII[stepCache](n, diiStepCache)
	if !ok {
		return StepCache{}, false
	}
	return StepCache{Fingerprint: cache.Fingerprint, AgentVersion: cache.AgentVersion, RefreshedAt: cache.RefreshedAt,
		Managers: cache.Managers, Clean: cache.Clean, Deploy: cache.Deploy}, true
}

// CleanStepsFor lists every clean step the node offers now: the driver's
// out-of-band steps and, for agent nodes, the cached in-band ones.
func (c *Conductor) CleanStepsFor(n *store.Node) []protocol.Step {
	d, ok := c.drivers[n.Driver]
	if !ok {
		return nil
	}
	if UsesAgent(n) {
		return mergeSteps(d.CleanSteps(n), cachedSteps(n, "clean"))
	}
	return d.CleanSteps(n)
}

// BootNonce returns the per-boot nonce to put on the kernel command line of
// the node's iPXE script, minting one if none is outstanding. iPXE may fetch
// the script more than once: the same nonce is handed out until the
// operation ends (wipeAgent), so any of those fetches boots a valid agent.
func (c *Conductor) BootNonce(ctx context.Context, nodeUUID string) (string, error) {
	var nonce string
	_, err := store.MutateNode(ctx, c.st, nodeUUID, func(n *store.Node) error {
		if cur, _ := n.DriverInternalInfo[diiBootNonce].(string); cur != "" {
			nonce = cur
			return errUnchanged
		}
		nonce = newToken()
		n.DriverInternalInfo[diiBootNonce] = nonce
		return nil
	})
	if errors.Is(err, errUnchanged) {
		err = nil
	}
	return nonce, err
}
