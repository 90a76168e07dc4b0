package conductor

// The conductor's configuration and its defaults.

import (
	"log/slog"
	"net/http"
	"time"

	"github.com/anvil-metal/anvil/controller/erasure"
	"github.com/anvil-metal/anvil/controller/inspectrules"
	"github.com/anvil-metal/anvil/protocol"
)

// Config tunes the conductor. New fills the settings left zero whose zero
// means "unset" from DefaultConfig; a zero timeout or power-sync interval
// disables it.
type Config struct {
	Host    string // holder name written into node reservations
	Workers int    // concurrent node operations
	// AutomatedClean is the fleet default; a node's automated_clean overrides it.
	AutomatedClean bool
	// PriorityOverrides maps "interface.step" to a clean priority (0 disables).
	PriorityOverrides map[string]int
	// Wait-state timeouts; 0 disables.
	CleanWaitTimeout   time.Duration
	DeployWaitTimeout  time.Duration
	InspectWaitTimeout time.Duration
	RescueWaitTimeout  time.Duration
	// ServiceWaitTimeout fails nodes in service wait (Ironic's
	// [conductor]service_callback_timeout, 30 minutes).
	ServiceWaitTimeout time.Duration
	CheckInterval      time.Duration // how often wait-state timeouts are checked
	Agent              AgentConfig
	PowerSync          PowerSyncConfig
	Firmware           FirmwareConfig
	// LeaseTTL is how long a node stays owned by this controller without a
	// renewal (renewed every LeaseTTL/4); a dead controller's nodes are
	// taken over by the others after it. Default 20 s.
	LeaseTTL time.Duration
	// SoleController says no other controller can use the store (SQLite):
	// leases left by a previous run are then cleared at start instead of
	// waited out.
	SoleController bool
	// Records signs a sanitization record for every device an
	// erase_devices run erased; nil: no records are written.
	Records *erasure.Signer
	// RamdiskSHA256 returns the SHA-256 (hex) of the ramdisk the controller
	// serves, for the records' tool.image_sha256 ("" or nil: unknown).
	RamdiskSHA256 func() string
	Logger        *slog.Logger
	Now           func() time.Time
	// InspectionRules are the built-in inspection rules (Ironic's
	// [inspection_rules]built_in_rules), run after the stored ones at the
	// end of every inspection (inspectrules.go).
	InspectionRules []inspectrules.Rule
	// Media makes per-node ISOs for redfish-virtual-media boots (nil:
	// such boots fail with a message saying so).
	Media VirtualMedia
	// DataImages serves the images of the vmedia API's
	// image_download_source "local" (nil: only "http" works).
	DataImages DataImages
	// VmediaCheckTimeout bounds the wait for a vmedia API insert to show
	// in its slot (0: 30 s).
	VmediaCheckTimeout time.Duration
	// BootScripts says the controller serves the nodes' boot scripts
	// (--boot-dir): every boot it starts then carries a nonce in the
	// script, and only a lookup with it gets the token (trust.go).
	BootScripts bool
	// Leases, set when the controller's DHCP server gives addresses
	// (full mode), binds the script's nonce to the address leased to the
	// node's port.
	Leases LeaseBook
	// Suppressed, if set, counts history events left out by a node's
	// budget for requests from strangers (what: "agent").
	Suppressed func(what string, n int)
	// Timeline, if set, records the stages of boots the conductor sees,
	// and timeouts of nodes waiting for their agent say where the boot
	// stopped (controller/timeline).
	Timeline Timeline
	// FastTrack keeps the agent running between operations (fasttrack.go).
	FastTrack FastTrackConfig
	// DeployTimed, if set, is told the boot and steps parts of every
	// deploy that reached active, and the path its agent took
	// ("fast track", "full boot").
	DeployTimed func(path string, boot, steps time.Duration)
}

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
	// AbortTimeout: an aborted step's agent must report it stopped this
	// soon, else the node is powered off (the fallback).
	AbortTimeout time.Duration
	Erase        *protocol.ErasePolicy
}

// PowerSyncConfig tunes the periodic power-state check.
type PowerSyncConfig struct {
	// Interval within which every managed node is checked once; 0 disables.
	Interval time.Duration
	// Ticks per interval: the fleet is read in this many keyset pages, so a
	// tick never reads the whole table.
	Ticks int
	// MaxFailures in a row put the node in maintenance with fault "power
	// failure" (Ironic's power_state_sync_max_retries, 3).
	MaxFailures int
	// Enforce sets the recorded state back on a resting node outside
	// maintenance when the BMC reports another one (Ironic's
	// force_power_state_during_sync).
	Enforce bool
	// Workers bounds concurrent BMC reads (default 8): slow BMCs must not
	// stretch a tick, and many must not be polled at once.
	Workers int
}

// DefaultConfig is a production controller's configuration, the one place
// its defaults are written: anvil-controller's flags take their defaults
// from it.
func DefaultConfig() Config {
	return Config{
		Host: "anvil", Workers: 16, AutomatedClean: true,
		CleanWaitTimeout: 30 * time.Minute, DeployWaitTimeout: 30 * time.Minute, ServiceWaitTimeout: 30 * time.Minute,
		CheckInterval: 10 * time.Second, LeaseTTL: 20 * time.Second,
		Agent: AgentConfig{HeartbeatInterval: 10 * time.Second, BootTimeout: 15 * time.Minute,
			SilenceTimeout: 5 * time.Minute, StepTimeout: 12 * time.Hour, AbortTimeout: time.Minute},
		FastTrack: FastTrackConfig{Timeout: 300 * time.Second},
		PowerSync: PowerSyncConfig{Interval: time.Minute, Ticks: 60, MaxFailures: 3, Enforce: true, Workers: 8},
		Firmware: FirmwareConfig{TaskTimeout: time.Hour, StallTimeout: 20 * time.Minute, OfflineTimeout: 10 * time.Minute,
			VerifyTimeout: 20 * time.Minute, ActivationSettle: 2 * time.Minute, GoneGrace: 2 * time.Minute},
	}
}

// FirmwareConfig bounds each component of a firmware update (firmware.go).
// They replace the wait state's timeout while an update runs: a BMC
// update alone can take longer than a clean wait allows.
type FirmwareConfig struct {
	// TaskTimeout: the BMC's task must end within it.
	TaskTimeout time.Duration
	// StallTimeout: the task's progress must move within it.
	StallTimeout time.Duration
	// OfflineTimeout: how long the BMC may not answer (it restarts after
	// its own update) before the step fails.
	OfflineTimeout time.Duration
	// VerifyTimeout: the new version must read back within it of the
	// task's end (a BIOS shows its new version after the POST).
	VerifyTimeout time.Duration
	// ActivationSettle is how long after the reboot that activates a BIOS
	// or NIC image the version is first read: the image is written at
	// POST, and a version that reads as asked before then (the version
	// already running, reflashed) must not let the next power action cut
	// the flash.
	ActivationSettle time.Duration
	// GoneGrace: a task the BMC does not know before it was ever read
	// is polled again for this long (some BMCs create it late).
	GoneGrace time.Duration
	// HTTPClient downloads images to check their checksums (nil: a
	// default client with a 30-minute timeout).
	HTTPClient *http.Client
}

// WithDefaults is cfg with every unset setting at its default.
func (cfg Config) WithDefaults() Config {
	cfg.defaults()
	return cfg
}

func (cfg *Config) defaults() {
	d := DefaultConfig()
	fill(&cfg.Host, d.Host)
	fill(&cfg.Workers, d.Workers)
	fill(&cfg.CheckInterval, d.CheckInterval)
	fill(&cfg.LeaseTTL, d.LeaseTTL)
	fill(&cfg.Agent.HeartbeatInterval, d.Agent.HeartbeatInterval)
	fill(&cfg.Agent.BootTimeout, d.Agent.BootTimeout)
	fill(&cfg.Agent.SilenceTimeout, d.Agent.SilenceTimeout)
	fill(&cfg.Agent.AbortTimeout, d.Agent.AbortTimeout)
	fill(&cfg.FastTrack.Timeout, d.FastTrack.Timeout)
	fill(&cfg.PowerSync.Ticks, d.PowerSync.Ticks)
	fill(&cfg.PowerSync.MaxFailures, d.PowerSync.MaxFailures)
	fill(&cfg.PowerSync.Workers, d.PowerSync.Workers)
	fill(&cfg.Firmware.TaskTimeout, d.Firmware.TaskTimeout)
	fill(&cfg.Firmware.StallTimeout, d.Firmware.StallTimeout)
	fill(&cfg.Firmware.OfflineTimeout, d.Firmware.OfflineTimeout)
	fill(&cfg.Firmware.VerifyTimeout, d.Firmware.VerifyTimeout)
	fill(&cfg.Firmware.ActivationSettle, d.Firmware.ActivationSettle)
	fill(&cfg.Firmware.GoneGrace, d.Firmware.GoneGrace)
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
}

// fill sets an unset (zero or negative) setting to its default.
func fill[T int | time.Duration | string](v *T, def T) {
	var zero T
	if *v <= zero {
		*v = def
	}
}
