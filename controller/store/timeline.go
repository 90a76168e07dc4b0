package store

import (
	"context"
	"time"
)

// Boot timeline stage names: what the controller saw of a node's boot, in
// the order a network boot goes through them. StageBoot opens a new boot.
const (
	StageBoot       = "boot"            // the controller (re)boots the node into the ramdisk
	StageBootDevice = "bmc.boot_device" // the BMC's boot device set
	StagePower      = "bmc.power"       // a power action on the BMC
	StageDHCP       = "dhcp"            // a DHCP exchange: discover/offer, request/ack
	StageTFTP       = "tftp"            // a TFTP download (or its failure)
	StageBootScript = "http.script"     // the iPXE/GRUB script fetched
	StageHTTP       = "http"            // an HTTP download of the kernel, ramdisk or a loader
	StageISO        = "vmedia.iso"      // the virtual-media ISO fetched by the BMC
	StageLookup     = "lookup"          // the agent looked the node up
	StageHeartbeat  = "heartbeat"       // the agent's first heartbeat of the boot
	StageStepStart  = "step.start"      // a step handed to the agent
	StageStepEnd    = "step.end"        // a step's result
	StageTimeout    = "timeout"         // the controller gave up waiting
	OutcomeOK       = "ok"
	OutcomeNotFound = "not found"
)

// Bounds of the boot timeline: the newest MaxBootsPerNode boots of a node,
// at most MaxStagesPerBoot stages each (beyond it the oldest but the first
// make room: the latest stages say where a boot stopped), of which at most
// MaxUnauthenticatedPerBoot unauthenticated ones (they make room among
// themselves and never evict another stage), details of at most
// MaxStageDetail bytes.
const (
	MaxBootsPerNode           = 10
	MaxStagesPerBoot          = 64
	MaxUnauthenticatedPerBoot = 12
	MaxStageDetail            = 512
)

// Unauthenticated reports whether anyone on the provisioning LAN could
// have caused s without the node's credentials: a refused lookup, a boot
// script refused, an HTTP download that failed (a name the boot chain did
// not serve). A stranger can repeat them at will, so they are bounded
// apart from the boot's chain and a timeout does not quote them first.
func (s BootStage) Unauthenticated() bool {
	switch s.Stage {
	case StageLookup, StageBootScript, StageHTTP:
		return s.Outcome != "" && s.Outcome != OutcomeOK
	}
	return false
}

// BootStage is one thing the controller saw of a node's boot.
type BootStage struct {
	At      time.Time `json:"at"`
	Stage   string    `json:"stage"`
	Detail  string    `json:"detail,omitempty"`
	Outcome string    `json:"outcome,omitempty"`
	// BootID is the agent's boot id, on the stages the agent made (lookup).
	BootID string `json:"boot_id,omitempty"`
}

// Bound clips the stage's texts to the store's bounds.
func (s *BootStage) Bound() {
	s.Detail = clip(s.Detail, MaxStageDetail)
	s.Stage = clip(s.Stage, 64)
	s.Outcome = clip(s.Outcome, 64)
	s.BootID = clip(s.BootID, 64)
}

// Boot is one boot of a node: from the controller's (re)boot into the
// ramdisk (or the first stage seen, for a boot it did not start) to the
// next.
type Boot struct {
	// Number counts the node's boots as the timeline saw them.
	Number int64 `json:"number"`
	// BootID is the agent's boot id once it looked up ("": not yet).
	BootID string      `json:"boot_id,omitempty"`
	Stages []BootStage `json:"stages"`
}

// NodeBootStages are stages of one node's boot timeline, in order.
type NodeBootStages struct {
	NodeUUID string
	Stages   []BootStage
}

// BootTimelines keeps each node's boot timeline; a node's goes with it.
type BootTimelines interface {
	// AddBootStages appends each node's stages, in order, to the node's
	// current boot; a StageBoot stage starts a new one. Older boots
	// beyond MaxBootsPerNode are dropped. The batch is one write (many
	// nodes booting at once cost one transaction, not one each); if a
	// node does not exist, nothing is written and the error is
	// ErrNotFound.
	AddBootStages(ctx context.Context, batch []NodeBootStages) error
	// ListBoots returns the node's newest boots first (at most limit,
	// 0: all kept), each boot's stages in the order they were added.
	ListBoots(ctx context.Context, nodeUUID string, limit int) ([]Boot, error)
}
