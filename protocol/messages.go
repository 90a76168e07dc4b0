package protocol

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
)

// Version names this wire protocol; the agent sends it in its user agent
// and heartbeats so the controller can refuse an incompatible agent.
const Version = "anvil/1"

// MaxMessageBytes bounds a lookup or heartbeat document.
const MaxMessageBytes = 4 << 20

// Paths of the agent endpoints (Ironic's).
const (
	LookupPath    = "/v1/lookup"
	HeartbeatPath = "/v1/heartbeat/" // + node uuid
)

// Lookup query parameters beyond Ironic's addresses and node_uuid.
const (
	// LookupBootID is the agent's boot id (new on every boot).
	LookupBootID = "boot_id"
	// LookupNonce is the per-boot nonce the controller put on the kernel
	// command line (CmdlineNonce) of the boot it started (the iPXE
	// script, GRUB configuration or virtual-media ISO); while the boot has
	// one, lookup requires it.
	LookupNonce = "nonce"
)

// CmdlineNonce is the kernel command line parameter carrying the boot's
// nonce.
const CmdlineNonce = "anvil.token"

// LookupResponse answers GET /v1/lookup?addresses=<macs>&node_uuid=&boot_id=.
// "node" and "config" are Ironic's keys; the config carries our extras.
type LookupResponse struct {
	Node   LookupNode  `json:"node"`
	Config AgentConfig `json:"config"`
}

// LookupNode is what the agent may know about its node.
type LookupNode struct {
	UUID         string         `json:"uuid"`
	Name         string         `json:"name,omitempty"`
	Properties   map[string]any `json:"properties"`
	InstanceInfo map[string]any `json:"instance_info"`
}

// AgentConfig is pushed by the controller so the ramdisk rarely needs
// rebuilding to change behaviour.
type AgentConfig struct {
	// HeartbeatTimeout is Ironic's key (seconds): the agent must heartbeat
	// well within it.
	HeartbeatTimeout int `json:"heartbeat_timeout"`
	// HeartbeatInterval is how often to heartbeat when idle (seconds).
	HeartbeatInterval float64 `json:"heartbeat_interval"`
	// AgentToken is minted for this boot; it must be sent in every heartbeat.
	AgentToken         string       `json:"agent_token"`
	AgentTokenRequired bool         `json:"agent_token_required"`
	Erase              *ErasePolicy `json:"erase,omitempty"`
}

// ErasePolicy are the operator's erase knobs (IPA's agent_erase_* keys).
// Every field is a pointer: nil (absent from the document) keeps the
// agent's default, so a policy that sets only some knobs, or one written by
// a controller that does not know a newer knob, cannot silently turn off
// secure erase or the zero pass by sending Go's zero value. A document
// with every field present decodes exactly as before.
type ErasePolicy struct {
	Concurrency         *int  `json:"concurrency,omitempty"`
	Iterations          *int  `json:"iterations,omitempty"`
	Zeroize             *bool `json:"zeroize,omitempty"`
	SkipReadOnly        *bool `json:"skip_read_only,omitempty"`
	AllowDiscard        *bool `json:"allow_discard,omitempty"`
	EnableNVMeFormat    *bool `json:"enable_nvme_format,omitempty"`
	EnableATAErase      *bool `json:"enable_ata_erase,omitempty"`
	ContinueOnSecureErr *bool `json:"continue_if_secure_erase_fails,omitempty"`
}

// Heartbeat is POST /v1/heartbeat/{node}: who the agent is, what it can do
// and how its current command is going.
type Heartbeat struct {
	AgentToken   string `json:"agent_token"`
	AgentVersion string `json:"agent_version"`
	// BootID is new on every boot, so the controller can tell a reboot
	// (and a reboot-requested step finishing) from a silent agent.
	BootID string `json:"boot_id"`
	// Fingerprint identifies the step catalogue (hardware managers and
	// their versions); Steps carries the catalogue itself, sent on the
	// first heartbeat of a boot and whenever the controller asks.
	Fingerprint string            `json:"fingerprint"`
	Steps       *StepCatalogue    `json:"steps,omitempty"`
	Command     *CommandStatus    `json:"command,omitempty"`
	BootTimings []BootPhase       `json:"boot_timings,omitempty"`
	Extra       map[string]string `json:"extra,omitempty"`
}

// StepCatalogue is the agent's in-band steps.
type StepCatalogue struct {
	Fingerprint string           `json:"fingerprint"`
	Managers    []ManagerVersion `json:"managers"`
	Clean       []Step           `json:"clean"`
	Deploy      []Step           `json:"deploy"`
}

// ManagerVersion names one hardware manager in the catalogue.
type ManagerVersion struct {
	Name    string `json:"name"`
	Version string `json:"version"`
}

// BootPhase is one boot milestone, seconds since the kernel started.
type BootPhase struct {
	Phase   string  `json:"phase"` // kernel, network, lookup, heartbeat
	Seconds float64 `json:"seconds"`
}

// Command states.
const (
	CommandRunning   = "RUNNING"
	CommandSucceeded = "SUCCEEDED"
	CommandFailed    = "FAILED"
)

// Command names the controller sends.
const (
	CmdGetSteps          = "get_steps"
	CmdExecuteCleanStep  = "execute_clean_step"
	CmdExecuteDeployStep = "execute_deploy_step"
	CmdInventory         = "inventory"
	CmdCollectLogs       = "collect_logs"
	CmdPowerOff          = "power_off"
	CmdReboot            = "reboot"
)

// knownCommand reports whether name is a command of this protocol.
func knownCommand(name string) bool {
	switch name {
	case CmdGetSteps, CmdExecuteCleanStep, CmdExecuteDeployStep, CmdInventory, CmdCollectLogs, CmdPowerOff, CmdReboot:
		return true
	}
	return false
}

// CommandStatus reports the agent's current (or last) command. A final
// state is repeated in every heartbeat until the controller acknowledges it.
type CommandStatus struct {
	ID       string          `json:"id"`
	Name     string          `json:"name"`
	State    string          `json:"state"`
	Progress *Progress       `json:"progress,omitempty"`
	Result   json.RawMessage `json:"result,omitempty"`
	// Summary says in one line, for people, what a finished command did
	// (each device's erase method or skip reason, the image written); the
	// controller puts it in the node's history.
	Summary    string     `json:"summary,omitempty"`
	Error      *Error     `json:"error,omitempty"`
	StartedAt  time.Time  `json:"started_at"`
	FinishedAt *time.Time `json:"finished_at,omitempty"`
}

// MaxSummary bounds CommandStatus.Summary: it is stored in every
// history event of a finished step.
const MaxSummary = 4096

// Progress of a long command.
type Progress struct {
	Percent    float64 `json:"percent"`
	Message    string  `json:"message,omitempty"`
	Device     string  `json:"device,omitempty"`
	BytesDone  uint64  `json:"bytes_done,omitempty"`
	BytesTotal uint64  `json:"bytes_total,omitempty"`
}

// HeartbeatResponse is the controller's answer: the next command, if any.
type HeartbeatResponse struct {
	// Ack is the id of a finished command the controller has recorded;
	// the agent stops reporting it.
	Ack     string   `json:"ack,omitempty"`
	Command *Command `json:"command,omitempty"`
	// HeartbeatInterval (seconds) until the next heartbeat.
	HeartbeatInterval float64 `json:"heartbeat_interval"`
	// SendSteps asks for the full step catalogue in the next heartbeat.
	SendSteps bool `json:"send_steps,omitempty"`
	// Abort is the id of the running command an operator aborted: the
	// agent stops it at its next safe point (between chunks of an
	// overwrite; an ATA security erase or NVMe format already sent runs
	// to completion) and reports it failed (CommandAborted) with what it
	// did so far. An agent that ignores it is powered off after a bound.
	Abort string `json:"abort,omitempty"`
}

// Command is work for the agent.
type Command struct {
	ID   string `json:"id"`
	Name string `json:"name"`
	// Step (with Args) for execute_*_step.
	Step *Step `json:"step,omitempty"`
	// Fingerprint the controller validated the step against; the agent
	// refuses to run a step when its catalogue changed since
	// (ErrTypeVersionMismatch), as IPA does with clean_version.
	Fingerprint string `json:"fingerprint,omitempty"`
	// Node context the step may need (target_raid_config, instance_info).
	Node map[string]any `json:"node,omitempty"`
}

// Validate checks a heartbeat's content.
func (h *Heartbeat) Validate() error {
	var errs []string
	if h.AgentToken == "" {
		errs = append(errs, "agent_token is required")
	}
	if h.AgentVersion == "" {
		errs = append(errs, "agent_version is required")
	}
	if h.BootID == "" {
		errs = append(errs, "boot_id is required")
	}
	if h.Steps != nil {
		if err := h.Steps.Validate(); err != nil {
			errs = append(errs, err.Error())
		} else if h.Steps.Fingerprint != h.Fingerprint {
			errs = append(errs, fmt.Sprintf("steps.fingerprint %q differs from fingerprint %q", h.Steps.Fingerprint, h.Fingerprint))
		}
	}
	if h.Command != nil {
		if err := h.Command.Validate(); err != nil {
			errs = append(errs, err.Error())
		}
	}
	for _, p := range h.BootTimings {
		if p.Phase == "" || p.Seconds < 0 {
			errs = append(errs, fmt.Sprintf("boot timing %+v needs a phase and a non-negative time", p))
		}
	}
	if len(errs) > 0 {
		return errors.New("invalid heartbeat: " + strings.Join(errs, "; "))
	}
	return nil
}

// Validate checks every step of the catalogue and duplicate names.
func (c *StepCatalogue) Validate() error {
	if c.Fingerprint == "" {
		return errors.New("steps.fingerprint is required")
	}
	for kind, steps := range map[string][]Step{"clean": c.Clean, "deploy": c.Deploy} {
		seen := map[string]bool{}
		for _, s := range steps {
			if err := s.Validate(); err != nil {
				return fmt.Errorf("%s steps: %w", kind, err)
			}
			if seen[s.Key()] {
				return fmt.Errorf("%s steps: %s listed twice", kind, s.Key())
			}
			seen[s.Key()] = true
		}
	}
	return nil
}

// Validate checks a command status.
func (s *CommandStatus) Validate() error {
	if s.ID == "" || !knownCommand(s.Name) {
		return fmt.Errorf("command needs an id and a known name, got id %q name %q", s.ID, s.Name)
	}
	switch s.State {
	case CommandRunning:
	case CommandSucceeded:
		if s.Error != nil {
			return fmt.Errorf("command %s succeeded but carries an error", s.ID)
		}
	case CommandFailed:
		if s.Error == nil {
			return fmt.Errorf("command %s failed without an error", s.ID)
		}
	default:
		return fmt.Errorf("command %s: unknown state %q", s.ID, s.State)
	}
	if len(s.Summary) > MaxSummary {
		return fmt.Errorf("command %s: summary of %d bytes, at most %d", s.ID, len(s.Summary), MaxSummary)
	}
	if p := s.Progress; p != nil && (p.Percent < 0 || p.Percent > 100 || (p.BytesTotal > 0 && p.BytesDone > p.BytesTotal)) {
		return fmt.Errorf("command %s: progress %+v out of range", s.ID, *p)
	}
	return nil
}

// Validate checks a command before it is sent or run.
func (c *Command) Validate() error {
	if c.ID == "" || !knownCommand(c.Name) {
		return fmt.Errorf("command needs an id and a known name, got id %q name %q", c.ID, c.Name)
	}
	if c.Name == CmdExecuteCleanStep || c.Name == CmdExecuteDeployStep {
		if c.Step == nil {
			return fmt.Errorf("command %s (%s) needs a step", c.ID, c.Name)
		}
		if err := c.Step.Validate(); err != nil {
			return fmt.Errorf("command %s: %w", c.ID, err)
		}
	}
	return nil
}

// decode reads one JSON document, refusing trailing data, bounded to
// MaxMessageBytes. strict is the controller reading an agent: it refuses
// unknown fields (it knows every agent field it supports) and, before
// decoding, what it could not store (CheckStoredJSON: nesting, NUL,
// invalid UTF-8), since a heartbeat's results are stored. The agent
// ignores fields it does not know in the controller's replies, since a
// ramdisk image outlives controller upgrades and must keep working when a
// newer controller adds a field.
func decode(r io.Reader, v any, strict bool) error {
	body, err := io.ReadAll(io.LimitReader(r, MaxMessageBytes+1))
	if err != nil {
		return fmt.Errorf("malformed message: %w", err)
	}
	if len(body) > MaxMessageBytes {
		return fmt.Errorf("message larger than %d bytes", MaxMessageBytes)
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	if strict {
		if err := CheckStoredJSON(body); err != nil {
			return fmt.Errorf("malformed message: %w", err)
		}
		dec.DisallowUnknownFields()
	}
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("malformed message: %w", err)
	}
	if dec.More() {
		return errors.New("malformed message: trailing data after the JSON document")
	}
	return nil
}

// DecodeHeartbeat reads and validates a heartbeat (controller side:
// unknown fields are refused).
func DecodeHeartbeat(r io.Reader) (*Heartbeat, error) {
	var h Heartbeat
	if err := decode(r, &h, true); err != nil {
		return nil, err
	}
	return &h, h.Validate()
}

// DecodeHeartbeatResponse reads and validates the controller's reply
// (agent side: unknown fields are ignored, see decode).
func DecodeHeartbeatResponse(r io.Reader) (*HeartbeatResponse, error) {
	var h HeartbeatResponse
	if err := decode(r, &h, false); err != nil {
		return nil, err
	}
	if h.HeartbeatInterval <= 0 {
		return nil, fmt.Errorf("invalid heartbeat response: heartbeat_interval %v must be positive", h.HeartbeatInterval)
	}
	if h.Command != nil {
		if err := h.Command.Validate(); err != nil {
			return nil, fmt.Errorf("invalid heartbeat response: %w", err)
		}
	}
	return &h, nil
}

// DecodeLookupResponse reads and validates a lookup answer.
func DecodeLookupResponse(r io.Reader) (*LookupResponse, error) {
	var l LookupResponse
	dec := json.NewDecoder(io.LimitReader(r, MaxMessageBytes))
	// Lookup answers carry Ironic's extra config keys (metrics, ...):
	// unknown fields are ignored here so an Ironic answer also decodes.
	if err := dec.Decode(&l); err != nil {
		return nil, fmt.Errorf("malformed lookup response: %w", err)
	}
	if l.Node.UUID == "" {
		return nil, errors.New("invalid lookup response: node.uuid is missing")
	}
	if l.Config.AgentToken == "" || l.Config.AgentToken == "******" {
		return nil, errors.New("invalid lookup response: no agent token for this boot")
	}
	if l.Config.HeartbeatTimeout <= 0 && l.Config.HeartbeatInterval <= 0 {
		return nil, errors.New("invalid lookup response: neither heartbeat_timeout nor heartbeat_interval is set")
	}
	return &l, nil
}
