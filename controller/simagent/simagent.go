// Package simagent is a simulated anvil agent: it speaks the real pull
// protocol over HTTP (lookup, heartbeat, commands) with scripted step
// outcomes, so controller behaviour can be tested and load-tested without
// booting a ramdisk. It imports only protocol, like the real agent.
package simagent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/anvil-metal/anvil/protocol"

	"github.com/anvil-metal/anvil/internal/pause"
)

// Outcome scripts what a step does when the simulated agent runs it.
type Outcome struct {
	Fail    string        // non-empty: the step fails with this message
	Runs    int           // heartbeats the step stays RUNNING before finishing
	Bytes   uint64        // with Runs: progress also in bytes of Device
	Device  string        // the device the progress is about
	Result  any           // result to report (with Fail: the partial result)
	Summary string        // its one-line summary
	Release chan struct{} // if set, the step runs until this is closed
}

// ErrUnauthorized is returned by Heartbeat on 401 (token stale).
var ErrUnauthorized = errors.New("agent token rejected")

// Agent is one simulated node agent.
type Agent struct {
	API     string
	MACs    []string
	HTTP    *http.Client
	Clean   []protocol.Step
	Deploy  []protocol.Step
	Version string
	// Outcomes by step key ("deploy.erase_devices") or command name ("inventory").
	Outcomes  map[string]Outcome
	Inventory protocol.Inventory
	// Nonce is presented at lookup (the boot's anvil.token=), if set.
	Nonce string
	// IgnoreAbort makes the agent ignore an abort (as an agent predating
	// aborts does); otherwise an aborted step stops at once, reporting
	// CommandAborted with its outcome's Result and Summary as the partial
	// result.
	IgnoreAbort bool

	mu          sync.Mutex
	bootID      string
	token       string
	node        string
	fingerprint string
	current     *protocol.CommandStatus
	curKey      string
	commands    []protocol.Command
	runsLeft    int
	seen        map[string]bool
	sentSteps   bool
	ran         []string
	aborts      []string
}

// Aborts lists the command ids the controller asked to abort.
func (a *Agent) Aborts() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.aborts...)
}

// New returns an agent with IPA's default generic steps.
func New(api string, macs ...string) *Agent {
	a := &Agent{API: strings.TrimRight(api, "/"), MACs: macs, HTTP: &http.Client{Timeout: 10 * time.Second},
		Version: "simagent 1.0 (" + protocol.Version + ")", Outcomes: map[string]Outcome{}, seen: map[string]bool{},
		Clean: []protocol.Step{
			{Interface: "deploy", Step: "erase_devices_metadata", Priority: 99, Abortable: true, ArgsInfo: args(sharedArg)},
			{Interface: "deploy", Step: "erase_devices", Priority: 10, Abortable: true, ArgsInfo: args(erasePolicyArgs()...)},
			{Interface: "deploy", Step: "erase_devices_express", Priority: 0, ArgsInfo: args(sharedArg)},
			verifyHardware(),
			{Interface: "raid", Step: "delete_configuration", Priority: 0},
			{Interface: "raid", Step: "create_configuration", Priority: 0, ArgsInfo: args("!target_raid_config")},
			{Interface: "deploy", Step: "burnin_cpu", Priority: 0, Abortable: true, ArgsInfo: args("agent_burnin_cpu_timeout", "agent_burnin_cpu_cpu")},
			{Interface: "deploy", Step: "burnin_memory", Priority: 0, Abortable: true, ArgsInfo: args("agent_burnin_vm_timeout", "agent_burnin_vm_vm", "agent_burnin_vm_vm-bytes")},
			{Interface: "deploy", Step: "burnin_disk", Priority: 0, Abortable: true, ArgsInfo: args("agent_burnin_fio_disk_loops", "agent_burnin_fio_disk_runtime")},
			{Interface: "deploy", Step: "burnin_network", Priority: 0, Abortable: true, ArgsInfo: args("agent_burnin_fio_network_config", "agent_burnin_fio_network_runtime", "agent_burnin_fio_network_pairing_timeout")},
		},
		Deploy: []protocol.Step{
			{Interface: "deploy", Step: "erase_devices_metadata", Priority: 0, Abortable: true, ArgsInfo: args(sharedArg)},
			{Interface: "deploy", Step: "write_image", Priority: 0, ArgsInfo: args("!image_url", "!image_checksum", "image_disk_format", "root_device", "configdrive")},
			verifyHardware(),
		},
		Inventory: protocol.Inventory{CPU: protocol.CPU{Count: 4, Architecture: "x86_64", ModelName: "Simulated CPU"},
			Memory: protocol.Memory{Total: 8 << 30, PhysicalMB: 8192},
			Disks:  []protocol.Disk{{Name: "/dev/nvme0n1", Size: 64 << 30, Serial: "SIM-0001", Controller: "nvme"}},
			PCI:    []protocol.PCIDevice{{Address: "0000:00:04.0", Vendor: "1b36", Device: "0010", Class: "010802", Driver: "nvme"}}},
	}
	for _, m := range macs {
		a.Inventory.Interfaces = append(a.Inventory.Interfaces, protocol.NIC{Name: "eth" + fmt.Sprint(len(a.Inventory.Interfaces)), MACAddress: m, HasCarrier: true})
	}
	a.Boot()
	return a
}

// The real agent's argument names (hardware/generic; TestCatalogueIsTheRealAgents
// keeps them in step), so manual cleaning validates the same way against
// a simulated agent.
const sharedArg = "erase_shared_filesystems"

func erasePolicyArgs() []string {
	return []string{"agent_continue_if_ata_erase_failed", "agent_continue_if_secure_erase_failed", "agent_enable_ata_secure_erase",
		"agent_enable_nvme_secure_erase", "agent_erase_devices_iterations", "agent_erase_devices_zeroize",
		"agent_erase_skip_read_only", "allow_discard", "allow_zeroout", "concurrency", "continue_if_secure_erase_failed",
		"disk_erasure_concurrency", "enable_ata_secure_erase", "enable_nvme_secure_erase", sharedArg, "iterations",
		"skip_read_only", "skip_removable", "verify_samples", "zeroize",
	}
}

// verifyHardware is the real agent's deploy.verify_hardware; the simulated
// one passes unless an Outcome says otherwise.
func verifyHardware() protocol.Step {
	return protocol.Step{Interface: "deploy", Step: "verify_hardware", Priority: 0,
		ArgsInfo: args("hardware_profile", "health_checks", "health_thresholds", "properties", "inventory")}
}

// args builds argsinfo from names; a leading "!" marks a required one.
func args(names ...string) map[string]protocol.ArgInfo {
	m := make(map[string]protocol.ArgInfo, len(names))
	for _, n := range names {
		name, required := strings.CutPrefix(n, "!")
		m[name] = protocol.ArgInfo{Description: "simulated: " + name, Required: required}
	}
	return m
}

// Resume makes this agent the one of a running boot that looked up before
// (the process restarted in the ramdisk with its token, or the test holds
// a session a previous controller issued): no command is running.
func (a *Agent) Resume(node, bootID, token string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.node, a.bootID, a.token, a.current, a.sentSteps = node, bootID, token, nil, true
	a.fingerprint = fingerprint(a.Clean, a.Deploy)
}

// Boot simulates a (re)boot: a new boot id, no token, no command.
func (a *Agent) Boot() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.bootID, a.token, a.current, a.sentSteps = uuid.NewString(), "", nil, false
	a.fingerprint = fingerprint(a.Clean, a.Deploy)
}

func fingerprint(clean, deploy []protocol.Step) string {
	b, _ := json.Marshal([]any{clean, deploy})
	return fmt.Sprintf("sim:%x", len(b)*7919+int(b[len(b)/2]))
}

// Token is the current agent token.
func (a *Agent) Token() string { a.mu.Lock(); defer a.mu.Unlock(); return a.token }

// Commands lists every command the agent started, in order.
func (a *Agent) Commands() []protocol.Command {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]protocol.Command(nil), a.commands...)
}

// Ran lists the commands the agent executed ("deploy.erase_devices", "inventory").
func (a *Agent) Ran() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.ran...)
}

// Steps lists the steps the agent executed, leaving out other commands
// (the inventory the controller asks for before each erase step).
func (a *Agent) Steps() []string {
	var out []string
	for _, r := range a.Ran() {
		if strings.Contains(r, ".") {
			out = append(out, r)
		}
	}
	return out
}

// Lookup finds the node and gets this boot's token.
func (a *Agent) Lookup(ctx context.Context) error {
	q := url.Values{"addresses": {strings.Join(a.MACs, ",")}, "boot_id": {a.bootID}}
	if a.Nonce != "" {
		q.Set("nonce", a.Nonce)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, a.API+protocol.LookupPath+"?"+q.Encode(), nil)
	if err != nil {
		return err
	}
	req.Header.Set("X-OpenStack-Ironic-API-Version", "1.82")
	res, err := a.HTTP.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(res.Body)
		return fmt.Errorf("lookup: HTTP %d: %s", res.StatusCode, b)
	}
	lr, err := protocol.DecodeLookupResponse(res.Body)
	if err != nil {
		return err
	}
	a.mu.Lock()
	a.token, a.node = lr.Config.AgentToken, lr.Node.UUID
	a.mu.Unlock()
	return nil
}

// Heartbeat sends one heartbeat, then acts on the reply: a new command is
// started (and finishes per its Outcome on later heartbeats).
func (a *Agent) Heartbeat(ctx context.Context) (*protocol.HeartbeatResponse, error) {
	a.mu.Lock()
	hb := protocol.Heartbeat{AgentToken: a.token, AgentVersion: a.Version, BootID: a.bootID, Fingerprint: a.fingerprint}
	if !a.sentSteps {
		hb.Steps = &protocol.StepCatalogue{Fingerprint: a.fingerprint, Managers: []protocol.ManagerVersion{{Name: "simulated", Version: "1.0"}},
			Clean: a.Clean, Deploy: a.Deploy}
		hb.BootTimings = []protocol.BootPhase{{Phase: "kernel", Seconds: 0.8}, {Phase: "heartbeat", Seconds: 4.2}}
	}
	a.advance()
	if a.current != nil {
		st := *a.current
		hb.Command = &st
	}
	node := a.node
	a.mu.Unlock()

	body, _ := json.Marshal(hb)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, a.API+protocol.HeartbeatPath+node, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("X-OpenStack-Ironic-API-Version", "1.82")
	req.Header.Set("Content-Type", "application/json")
	res, err := a.HTTP.Do(req)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	if res.StatusCode == http.StatusUnauthorized {
		return nil, ErrUnauthorized
	}
	if res.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(res.Body)
		return nil, fmt.Errorf("heartbeat: HTTP %d: %s", res.StatusCode, b)
	}
	reply, err := protocol.DecodeHeartbeatResponse(res.Body)
	if err != nil {
		return nil, err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if hb.Steps != nil {
		a.sentSteps = true
	}
	if reply.SendSteps {
		a.sentSteps = false
	}
	if a.current != nil && reply.Ack == a.current.ID && a.current.State != protocol.CommandRunning {
		a.current = nil
	}
	if reply.Abort != "" {
		a.aborts = append(a.aborts, reply.Abort)
		if cur := a.current; !a.IgnoreAbort && cur != nil && cur.ID == reply.Abort && cur.State == protocol.CommandRunning {
			out := a.Outcomes[a.curKey]
			summary := out.Summary
			if p := cur.Progress; out.Bytes > 0 && p != nil {
				// what a real agent says of a stopped overwrite
				summary = fmt.Sprintf("%s failed after writing %d of %d bytes: context canceled", p.Device, p.BytesDone, p.BytesTotal)
			}
			a.finish(&protocol.Error{Type: protocol.ErrTypeAborted, Code: 500, Message: "aborted by the controller"}, out.Result, summary)
		}
	}
	if reply.Command != nil && (a.current == nil || a.current.State != protocol.CommandRunning) && !a.seen[reply.Command.ID] {
		a.start(*reply.Command)
	}
	return reply, nil
}

// start begins a command; it reports RUNNING until its outcome says done.
func (a *Agent) start(c protocol.Command) {
	a.seen[c.ID] = true
	key := c.Name
	if c.Step != nil {
		key = c.Step.Key()
	}
	a.ran = append(a.ran, key)
	a.commands = append(a.commands, c)
	a.curKey = key
	a.current = &protocol.CommandStatus{ID: c.ID, Name: c.Name, State: protocol.CommandRunning,
		StartedAt: time.Now().UTC(), Progress: &protocol.Progress{Percent: 0, Message: "starting " + key}}
	a.runsLeft = a.Outcomes[key].Runs
	if c.Fingerprint != "" && c.Fingerprint != a.fingerprint {
		a.finish(&protocol.Error{Type: protocol.ErrTypeVersionMismatch, Code: 409, Message: "step catalogue changed"}, nil, "")
	}
}

// advance moves the running command along its scripted outcome.
func (a *Agent) advance() {
	cur := a.current
	if cur == nil || cur.State != protocol.CommandRunning {
		return
	}
	out := a.Outcomes[a.curKey]
	if out.Release != nil {
		select {
		case <-out.Release:
		default:
			cur.Progress.Percent = min(cur.Progress.Percent+10, 90)
			return
		}
	}
	if a.runsLeft > 0 {
		// evenly over the runs, never 100 before the step is done
		done := out.Runs - a.runsLeft + 1
		a.runsLeft--
		cur.Progress.Percent = float64(100*done) / float64(out.Runs+1)
		if out.Bytes > 0 {
			cur.Progress.BytesTotal, cur.Progress.Device = out.Bytes, out.Device
			cur.Progress.BytesDone = out.Bytes * uint64(done) / uint64(out.Runs+1)
		}
		return
	}
	if out.Fail != "" {
		a.finish(&protocol.Error{Type: protocol.ErrTypeBlockDeviceErase, Code: 500, Message: out.Fail}, out.Result, out.Summary)
		return
	}
	result := out.Result
	if cur.Name == protocol.CmdInventory {
		result = a.Inventory
	}
	a.finish(nil, result, out.Summary)
}

func (a *Agent) finish(e *protocol.Error, result any, summary string) {
	now := time.Now().UTC()
	a.current.FinishedAt = &now
	a.current.Progress = &protocol.Progress{Percent: 100, Message: "done"}
	// Like the real agent, a failed step reports its partial result and
	// summary with the error.
	a.current.State, a.current.Error, a.current.Summary = protocol.CommandSucceeded, e, summary
	if e != nil {
		a.current.State = protocol.CommandFailed
	}
	if result != nil {
		a.current.Result, _ = json.Marshal(result)
	}
}

// Run looks up and heartbeats every interval until ctx ends, re-looking up
// when the token is rejected. Errors are retried, never fatal.
func (a *Agent) Run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for ctx.Err() == nil {
		if a.Token() == "" {
			if a.Lookup(ctx) != nil {
				pause.For(ctx, interval)
				continue
			}
		}
		if _, err := a.Heartbeat(ctx); errors.Is(err, ErrUnauthorized) {
			a.mu.Lock()
			a.token = ""
			a.mu.Unlock()
		}
		select {
		case <-ctx.Done():
		case <-t.C:
		}
	}
}

// FirmwareBoot does what a node's network-boot firmware does before the
// ramdisk runs: it fetches the node's iPXE script (GET
// /v1/boot/{mac}/ipxe) and takes the boot's nonce (anvil.token=) off the
// kernel command line, for the agent's lookup. A controller that serves
// no boot scripts (404) gives none: the ramdisk then boots without a
// nonce, as from a configuration of the operator's own.
func FirmwareBoot(ctx context.Context, hc *http.Client, api, mac string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(api, "/")+"/v1/boot/"+mac+"/ipxe", nil)
	if err != nil {
		return "", err
	}
	res, err := hc.Do(req)
	if err != nil {
		return "", err
	}
	defer res.Body.Close()
	body, err := io.ReadAll(io.LimitReader(res.Body, 64<<10))
	if err != nil {
		return "", err
	}
	switch res.StatusCode {
	case http.StatusOK:
	case http.StatusNotFound:
		return "", nil
	default:
		return "", fmt.Errorf("boot script: HTTP %d: %s", res.StatusCode, body)
	}
	for _, f := range strings.Fields(string(body)) {
		if v, ok := strings.CutPrefix(f, protocol.CmdlineNonce+"="); ok {
			return v, nil
		}
	}
	return "", nil
}
