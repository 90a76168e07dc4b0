package store

import (
	"encoding/json"
	"reflect"
	"time"

	"github.com/anvil-metal/anvil/protocol"
)

// Operation is the conductor's working state of a node: the steps of the
// cleaning or deployment under way and how far it got, what the user asked
// for, and the session with the node's agent. It is stored beside the node
// (its own column), written in the same statement as the node, so it shares
// the node's revision check and lease fencing. The API shows it inside
// driver_internal_info under Ironic's keys (InternalInfo); nothing else
// reads those keys.
type Operation struct {
	// Clean and Deploy are the planned steps and the index of the one
	// running (or next); nil until the plan is made.
	Clean  *StepPlan `json:"clean,omitempty"`
	Deploy *StepPlan `json:"deploy,omitempty"`
	// Service is the servicing plan (1.87); UserServiceSteps what the
	// service request asked for; ServiceDisableRamdisk its disable_ramdisk
	// (1.108: out-of-band steps only, no agent boot).
	Service               *StepPlan       `json:"service,omitempty"`
	UserServiceSteps      []protocol.Step `json:"user_service_steps,omitempty"`
	ServiceDisableRamdisk bool            `json:"service_disable_ramdisk,omitempty"`
	// ManualClean: the cleaning was requested with steps (manageable
	// after it), not the automated cleaning of provide/undeploy.
	ManualClean bool `json:"manual_clean,omitempty"`
	// CleaningRequestedBy: the policy and the user of the request that
	// started the cleaning (provide, undeploy or clean), for the
	// sanitization records.
	CleaningRequestedBy string `json:"cleaning_requested_by,omitempty"`
	// UserCleanSteps and UserDeploySteps are what the request asked for,
	// resolved against the node's steps when the plan is made.
	UserCleanSteps  []protocol.Step `json:"user_clean_steps,omitempty"`
	UserDeploySteps []protocol.Step `json:"user_deploy_steps,omitempty"`
	Agent           AgentSession    `json:"agent,omitzero"`
	// Disks are the disk guard's records, which outlive the operation.
	Disks DiskRecords `json:"disks,omitzero"`
	// Firmware is the firmware.update step under way (nil: none).
	Firmware *FirmwareUpdate `json:"firmware,omitempty"`
	// DeployTiming times the deploy under way, from the active request
	// to active (nil: none, or one requested before it was kept).
	DeployTiming *DeployTiming `json:"deploy_timing,omitempty"`
}

// DeployTiming is when a deploy was requested and when its agent was
// ready (booted, or found running on fast track): the boot and steps
// split of its duration.
type DeployTiming struct {
	RequestedAt  time.Time `json:"requested_at"`
	AgentReadyAt time.Time `json:"agent_ready_at,omitzero"`
	// Path is "fast track" or "full boot" once the agent is ready.
	Path string `json:"path,omitempty"`
}

// FastTrack is an agent the controller left running after its
// operation ended (fast track, Ironic's [deploy]fast_track): the next
// operation may start on it instead of booting the ramdisk again.
type FastTrack struct {
	// Since is when the agent was left running (its idle began).
	Since time.Time `json:"since"`
	// BootID and TokenSum (SHA-256 of the token, hex) are the boot and
	// token the controller issued to the agent it left running: only
	// that agent is used again.
	BootID   string `json:"boot_id"`
	TokenSum string `json:"token_sum"`
	// AgentSince is when the controller booted the node into this
	// agent's ramdisk.
	AgentSince time.Time `json:"agent_since,omitzero"`
}

// StepPlan is the ordered steps of one cleaning or deployment and the index
// of the current one: a restart resumes at Steps[Index].
type StepPlan struct {
	Steps []protocol.Step `json:"steps"`
	Index int             `json:"index"`
	// StartedAt is when Steps[Index] started (its result's start).
	StartedAt time.Time `json:"started_at,omitzero"`
}

// AgentSession is what the controller knows of the node's agent.
type AgentSession struct {
	Token  string `json:"token,omitempty"` // secret the agent proves itself with
	BootID string `json:"boot_id,omitempty"`
	// VoidTokenSum is the SHA-256 (hex) of a token of this boot that a
	// second lookup replaced before any heartbeat used it (its answer was
	// lost): a heartbeat that brings it is a second claimant.
	VoidTokenSum string `json:"void_token_sum,omitempty"`
	// Version is the agent's last reported version; like Ironic's
	// agent_version it outlives the session (nil: never heard of).
	Version       *string                 `json:"version,omitempty"`
	LastHeartbeat time.Time               `json:"last_heartbeat,omitzero"`
	BootTimings   []protocol.BootPhase    `json:"boot_timings,omitempty"`
	Steps         *StepCache              `json:"steps,omitempty"`
	Command       *AgentCommand           `json:"command,omitempty"`
	CommandStatus *protocol.CommandStatus `json:"command_status,omitempty"`
	Await         *Await                  `json:"await,omitempty"`
	// Booted: the ramdisk is up for the current operation.
	Booted bool `json:"booted,omitempty"`
	// LeftRamdisk: a driver step (a BIOS or firmware change) rebooted
	// the node out of its ramdisk. The agent's token was revoked with
	// it, and no lookup is answered until the controller boots the
	// ramdisk again: a ramdisk that comes up by itself (a server that
	// boots from the network first) is not this operation's agent.
	LeftRamdisk bool `json:"left_ramdisk,omitempty"`
	// BootNonce is minted when the controller starts a boot whose boot
	// path it serves (its iPXE script or GRUB configuration, or the
	// node's virtual-media ISO) and put on the agent's kernel command
	// line there; while it is set, only a lookup carrying it may get the
	// token. "": the ramdisk boots some other way and the first lookup
	// gets the token.
	BootNonce string `json:"boot_nonce,omitempty"`
	// NonceVia is how the nonce reaches the node: NonceNetboot (the boot
	// script, served once) or NonceVirtualMedia (the ISO, fetched by the
	// BMC under a key only it knows).
	NonceVia string `json:"nonce_via,omitempty"`
	// NonceServedTo is the address the boot script carrying the nonce
	// was first served to: the same address may fetch it again before
	// the lookup (a firmware retry), anybody else is a second claimant.
	NonceServedTo string `json:"nonce_served_to,omitempty"`
	// NonceLegacyServed reads the flag of the release before NonceVia
	// (the script had been served with the nonce); never written.
	NonceLegacyServed bool `json:"nonce_served,omitempty"`
	// BootStartedAt is when the controller started this boot (before
	// powering the node): only a DHCP lease given since binds the boot
	// script's nonce, not one left from an earlier boot.
	BootStartedAt time.Time `json:"boot_started_at,omitzero"`
	// PreviousBootID is the boot id of the agent of the boot before this
	// one: still running while the node reboots, its lookups are refused
	// (it is not a claimant of this boot).
	PreviousBootID string `json:"previous_boot_id,omitempty"`
	// Address is where the lookup that got the token came from.
	Address string `json:"address,omitempty"`
	// Claims are the latest second claimants refused (MaxClaims at most);
	// they outlive the session, as alarms for the operator.
	Claims []Claim `json:"claims,omitempty"`
	// Alarm is the second claimant that ended this boot's trust: the
	// token is revoked with it, and the lifecycle engine stops the
	// operation (failed, powered off) when it sees it.
	Alarm *Claim `json:"alarm,omitempty"`
	// FastTrack is set while the agent is kept running between
	// operations (fast track); wiping the session ends it.
	FastTrack *FastTrack `json:"fast_track,omitempty"`
}

// How a boot's nonce reaches the node (AgentSession.NonceVia).
const (
	NonceNetboot      = "netboot"
	NonceVirtualMedia = "vmedia"
)

// Claim is a lookup or heartbeat refused because this boot's token was
// already issued to another address or boot: a possible takeover attempt.
type Claim struct {
	At            time.Time `json:"at"`
	Via           string    `json:"via"` // lookup | heartbeat | boot script
	Address       string    `json:"address"`
	BootID        string    `json:"boot_id"`
	HolderAddress string    `json:"holder_address"`
	HolderBootID  string    `json:"holder_boot_id"`
}

// MaxClaims bounds the claims a node keeps (the history keeps them all).
const MaxClaims = 5

// AddClaim records c, dropping the oldest beyond MaxClaims.
func (a *AgentSession) AddClaim(c Claim) {
	a.Claims = append(a.Claims, c)
	if len(a.Claims) > MaxClaims {
		a.Claims = append([]Claim(nil), a.Claims[len(a.Claims)-MaxClaims:]...)
	}
}

// StepCache is the agent's step catalogue as last reported.
type StepCache struct {
	Fingerprint  string                    `json:"fingerprint"`
	Managers     []protocol.ManagerVersion `json:"managers"`
	Clean        []protocol.Step           `json:"clean"`
	Deploy       []protocol.Step           `json:"deploy"`
	AgentVersion string                    `json:"agent_version"`
	RefreshedAt  time.Time                 `json:"refreshed_at"`
}

// AgentCommand is work the conductor left for the agent; the heartbeat
// handler delivers it.
type AgentCommand struct {
	protocol.Command
	IssuedAt time.Time `json:"issued_at"`
	// Guards is the step an inventory command checks the disks for
	// (controller/conductor/diskguard.go), issued as GuardedCommand when
	// the check passes; never sent to the agent.
	Guards         *protocol.Step `json:"guards,omitempty"`
	GuardedCommand string         `json:"guarded_command,omitempty"`
	// AbortRequestedAt: an operator aborted the running step; the
	// heartbeat replies carry the abort until the agent reports the end.
	AbortRequestedAt *time.Time `json:"abort_requested_at,omitempty"`
}

// Await records that the node was (re)booted into the ramdisk and what to
// do once the agent is back.
type Await struct {
	Reason    string    `json:"reason"` // boot | reboot
	Since     time.Time `json:"since"`
	OldBootID string    `json:"old_boot_id"`
	Step      string    `json:"step,omitempty"` // step to complete when the agent is back
	// Summary is what the agent said the step did before the reboot it
	// requested; the step's result is already stored.
	Summary string `json:"summary,omitempty"`
}

// Ironic's driver_internal_info keys for the operation (ours where Ironic
// has none).
const (
	keyCleanSteps      = "clean_steps"
	keyCleanStepIndex  = "clean_step_index"
	keyManualClean     = "cleaning_manual"
	keyRequestedBy     = "cleaning_requested_by"
	keyDeploySteps     = "deploy_steps"
	keyDeployStepIndex = "deploy_step_index"
	keyUserCleanSteps  = "user_clean_steps"
	keyUserDeploySteps = "user_deploy_steps"
	keyToken           = "agent_secret_token"
	keyBootID          = "agent_boot_id"
	keyAgentVersion    = "agent_version"
	keyLastHeartbeat   = "agent_last_heartbeat"
	keyBootTimings     = "agent_boot_timings"
	keyStepCache       = "agent_step_cache"
	keyCommand         = "agent_command"
	keyCommandStatus   = "agent_command_status"
	keyAwait           = "agent_await"
	keyAgentBooted     = "agent_booted"
	keyLeftRamdisk     = "agent_left_ramdisk"
	keyBootNonce       = "agent_boot_nonce"
	keyAgentAddress    = "agent_lookup_address"
	keyClaims          = "agent_claims"
	keyNonceVia        = "agent_nonce_via"
	keyNonceServedTo   = "agent_nonce_served_to"
	keyAlarm           = "agent_alarm"
	keyBootStarted     = "agent_boot_started_at"
	keyPreviousBoot    = "agent_previous_boot_id"
	keyFirmware        = "firmware_updates" // Ironic's redfish firmware interface keeps its updates there
	keyServiceSteps    = "service_steps"
	keyServiceIndex    = "service_step_index"
	keyUserService     = "user_service_steps"
	keyNoRamdisk       = "service_disable_ramdisk"
	keyFastTrack       = "agent_fast_track"
	keyDeployTiming    = "deploy_timing"
)

// SecretInternalKey reports whether a driver_internal_info key holds a
// secret of the agent session (its token, the boot's nonce), which the API
// masks.
func SecretInternalKey(k string) bool { return k == keyToken || k == keyBootNonce }

// operationKeys lists every key InternalInfo writes.
var operationKeys = []string{keyCleanSteps, keyCleanStepIndex, keyManualClean, keyRequestedBy, keyDeploySteps, keyDeployStepIndex,
	keyUserCleanSteps, keyUserDeploySteps, keyToken, keyBootID, keyAgentVersion, keyLastHeartbeat, keyBootTimings,
	keyStepCache, keyCommand, keyCommandStatus, keyAwait, keyAgentBooted, keyBootNonce, keyAgentAddress, keyClaims,
	keyNonceVia, keyNonceServedTo, keyAlarm, keyBootStarted, keyPreviousBoot, keyDiskCheck, keyDisksAtDeploy, keyFirmware, keyLeftRamdisk,
	keyServiceSteps, keyServiceIndex, keyUserService, keyNoRamdisk, keyFastTrack, keyDeployTiming}

// InternalInfo is the node's driver_internal_info as Ironic shows it: the
// node's own keys and the operation under Ironic's keys, each valued as its
// JSON (so maps have sorted keys and numbers are float64, as when these
// keys were stored in driver_internal_info itself). The token is not
// masked here: the API masks, an export keeps it.
func (n *Node) InternalInfo() map[string]any {
	op := &n.Operation
	if op.empty() {
		return n.DriverInternalInfo
	}
	out := make(map[string]any, len(n.DriverInternalInfo)+len(operationKeys))
	for k, v := range n.DriverInternalInfo {
		out[k] = v
	}
	set := func(key string, v any) { out[key] = jsonValue(v) }
	if p := op.Clean; p != nil {
		set(keyCleanSteps, p.Steps)
		out[keyCleanStepIndex] = float64(p.Index)
	}
	if p := op.Deploy; p != nil {
		set(keyDeploySteps, p.Steps)
		out[keyDeployStepIndex] = float64(p.Index)
	}
	if p := op.Service; p != nil {
		set(keyServiceSteps, p.Steps)
		out[keyServiceIndex] = float64(p.Index)
	}
	if op.UserServiceSteps != nil {
		set(keyUserService, op.UserServiceSteps)
	}
	if op.ServiceDisableRamdisk {
		out[keyNoRamdisk] = true
	}
	if op.ManualClean {
		out[keyManualClean] = true
	}
	if op.CleaningRequestedBy != "" {
		out[keyRequestedBy] = op.CleaningRequestedBy
	}
	if op.UserCleanSteps != nil {
		set(keyUserCleanSteps, op.UserCleanSteps)
	}
	if op.UserDeploySteps != nil {
		set(keyUserDeploySteps, op.UserDeploySteps)
	}
	a := &op.Agent
	if a.Token != "" {
		out[keyToken] = a.Token
		out[keyBootID] = a.BootID // the boot id the token went to, "" if none was sent
	}
	if a.Version != nil {
		out[keyAgentVersion] = *a.Version
	}
	if !a.LastHeartbeat.IsZero() {
		out[keyLastHeartbeat] = a.LastHeartbeat.Format(time.RFC3339Nano)
	}
	if a.BootTimings != nil {
		set(keyBootTimings, a.BootTimings)
	}
	if a.Steps != nil {
		set(keyStepCache, a.Steps)
	}
	if a.Command != nil {
		set(keyCommand, a.Command)
	}
	if a.CommandStatus != nil {
		set(keyCommandStatus, a.CommandStatus)
	}
	if a.Await != nil {
		set(keyAwait, a.Await)
	}
	if a.Booted {
		out[keyAgentBooted] = true
	}
	if a.LeftRamdisk {
		out[keyLeftRamdisk] = true
	}
	if a.BootNonce != "" {
		out[keyBootNonce] = a.BootNonce
	}
	if a.Address != "" {
		out[keyAgentAddress] = a.Address
	}
	if len(a.Claims) > 0 {
		set(keyClaims, a.Claims)
	}
	if a.NonceVia != "" {
		out[keyNonceVia] = a.NonceVia
	}
	if a.NonceServedTo != "" {
		out[keyNonceServedTo] = a.NonceServedTo
	}
	if a.Alarm != nil {
		set(keyAlarm, a.Alarm)
	}
	if !a.BootStartedAt.IsZero() {
		out[keyBootStarted] = a.BootStartedAt.Format(time.RFC3339Nano)
	}
	if a.PreviousBootID != "" {
		out[keyPreviousBoot] = a.PreviousBootID
	}
	if op.Firmware != nil {
		set(keyFirmware, op.Firmware)
	}
	if a.FastTrack != nil {
		set(keyFastTrack, a.FastTrack)
	}
	if op.DeployTiming != nil {
		set(keyDeployTiming, op.DeployTiming)
	}
	op.Disks.show(out)
	return out
}

func (op *Operation) empty() bool {
	a := &op.Agent
	return op.Clean == nil && op.Deploy == nil && op.Service == nil && op.UserServiceSteps == nil && !op.ServiceDisableRamdisk && !op.ManualClean && op.CleaningRequestedBy == "" && op.UserCleanSteps == nil && op.UserDeploySteps == nil &&
		a.Token == "" && a.BootID == "" && a.Version == nil && a.LastHeartbeat.IsZero() && a.BootTimings == nil && a.Steps == nil &&
		a.Command == nil && a.CommandStatus == nil && a.Await == nil && !a.Booted && !a.LeftRamdisk && a.BootNonce == "" &&
		a.NonceVia == "" && a.NonceServedTo == "" && !a.NonceLegacyServed && a.Address == "" && len(a.Claims) == 0 && a.Alarm == nil &&
		a.BootStartedAt.IsZero() && a.PreviousBootID == "" && op.Disks.empty() && op.Firmware == nil && a.FastTrack == nil && op.DeployTiming == nil
}

// jsonValue is v as encoding/json decodes its encoding into an any.
func jsonValue(v any) any {
	b, err := json.Marshal(v)
	if err != nil {
		return nil // the operation's types always encode
	}
	var out any
	_ = json.Unmarshal(b, &out)
	return out
}

// SplitInternalInfo takes the operation out of a driver_internal_info that
// holds it under Ironic's keys (a database or an export written before the
// operation had its own record) and returns it with the keys left. Only a
// value that the record shows back exactly is taken; any other (one that
// does not decode, or a partial step written by hand) stays among the
// other keys, so nothing is lost and InternalInfo is what it was.
func SplitInternalInfo(dii map[string]any) (Operation, map[string]any) {
	var op Operation
	rest := make(map[string]any, len(dii))
	for k, v := range dii {
		rest[k] = v
	}
	take := func(key string, dst any) bool { return takeValue(rest, key, dst) }
	// takeTime takes a time written as RFC 3339 with nanoseconds, only if
	// it shows back exactly as written.
	takeTime := func(key string, dst *time.Time) {
		if v, ok := rest[key].(string); ok {
			if t, err := time.Parse(time.RFC3339Nano, v); err == nil && t.Format(time.RFC3339Nano) == v {
				*dst = t
				delete(rest, key)
			}
		}
	}
	plan := func(stepsKey, indexKey string) *StepPlan {
		var p StepPlan
		hasSteps := take(stepsKey, &p.Steps)
		var idx float64 // Ironic and older releases wrote it as a JSON number
		hasIndex := take(indexKey, &idx)
		if !hasSteps && !hasIndex {
			return nil
		}
		p.Index = int(idx)
		return &p
	}
	op.Clean = plan(keyCleanSteps, keyCleanStepIndex)
	op.Deploy = plan(keyDeploySteps, keyDeployStepIndex)
	op.Service = plan(keyServiceSteps, keyServiceIndex)
	take(keyUserService, &op.UserServiceSteps)
	take(keyNoRamdisk, &op.ServiceDisableRamdisk)
	take(keyManualClean, &op.ManualClean)
	take(keyRequestedBy, &op.CleaningRequestedBy)
	take(keyUserCleanSteps, &op.UserCleanSteps)
	take(keyUserDeploySteps, &op.UserDeploySteps)
	a := &op.Agent
	take(keyToken, &a.Token)
	take(keyBootID, &a.BootID)
	var version string
	if take(keyAgentVersion, &version) {
		a.Version = &version
	}
	takeTime(keyLastHeartbeat, &a.LastHeartbeat)
	take(keyBootTimings, &a.BootTimings)
	take(keyStepCache, &a.Steps)
	take(keyCommand, &a.Command)
	take(keyCommandStatus, &a.CommandStatus)
	take(keyAwait, &a.Await)
	take(keyAgentBooted, &a.Booted)
	take(keyLeftRamdisk, &a.LeftRamdisk)
	take(keyBootNonce, &a.BootNonce)
	take(keyAgentAddress, &a.Address)
	take(keyClaims, &a.Claims)
	take(keyNonceVia, &a.NonceVia)
	take(keyNonceServedTo, &a.NonceServedTo)
	take(keyAlarm, &a.Alarm)
	takeTime(keyBootStarted, &a.BootStartedAt)
	take(keyPreviousBoot, &a.PreviousBootID)
	take(keyFirmware, &op.Firmware)
	take(keyFastTrack, &a.FastTrack)
	take(keyDeployTiming, &op.DeployTiming)
	op.Disks.take(rest)
	return op, rest
}

// takeValue decodes rest[key] into dst (a pointer) and deletes it from
// rest if the decoded value shows it back exactly; any other value (one
// that does not decode, or a partial step written by hand) stays, and dst
// is left alone. It reports whether a non-null value was taken.
func takeValue(rest map[string]any, key string, dst any) bool {
	v, ok := rest[key]
	if !ok {
		return false
	}
	if v != nil {
		fresh := reflect.New(reflect.TypeOf(dst).Elem())
		b, err := json.Marshal(v)
		if err != nil || json.Unmarshal(b, fresh.Interface()) != nil || !reflect.DeepEqual(jsonValue(v), jsonValue(fresh.Interface())) {
			return false // not what this release wrote: left as it is
		}
		reflect.ValueOf(dst).Elem().Set(fresh.Elem())
	}
	delete(rest, key)
	return v != nil
}

// EncodeOperation and DecodeOperation are the stores' codec for the
// operation column; an empty operation is stored as NULL (nil).
func EncodeOperation(op *Operation) ([]byte, error) {
	if op.empty() {
		return nil, nil
	}
	return json.Marshal(op)
}

// DecodeOperation decodes the operation column (nil: idle).
func DecodeOperation(b []byte, op *Operation) error {
	*op = Operation{}
	if len(b) == 0 {
		return nil
	}
	return json.Unmarshal(b, op)
}

// AdoptLegacyOperation moves an operation that n's driver_internal_info
// holds under Ironic's keys (written by the release before Operation, or
// an export of it) into n.Operation, keeping an operation n already has.
// It reports whether anything moved.
func (n *Node) AdoptLegacyOperation() bool {
	op, rest := SplitInternalInfo(n.DriverInternalInfo)
	if op.empty() {
		return false
	}
	if n.Operation.empty() {
		n.Operation = op
	}
	n.DriverInternalInfo = rest
	return true
}
