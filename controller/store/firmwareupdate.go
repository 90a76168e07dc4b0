package store

import "time"

// FirmwareUpdate is a firmware.update step under way: its components, one
// at a time, each with how far it got. It is part of the node's Operation
// (written with the node), so a restarted controller, or another one
// taking the node over, resumes each component where it was: a flash
// requested is never requested again, a task is watched to its end.
type FirmwareUpdate struct {
	// Step is the step it belongs to ("firmware.update") and Index that
	// step's place in the plan: a record from an earlier step is never
	// taken for this one's.
	Step  string `json:"step"`
	Index int    `json:"index"`
	// Items are the components in the order they are flashed (bmc, bios,
	// NICs); Current is the one under way.
	Items   []FirmwareItem `json:"items"`
	Current int            `json:"current"`
	// PowerWasOn: the node was on when the step began; it is left as it
	// was found.
	PowerWasOn bool `json:"power_was_on"`
}

// Phases of a FirmwareItem.
const (
	FirmwarePending = "pending" // not started
	// FirmwareRequesting: the request is being sent; a restart that finds
	// it does not know whether the BMC took it, and asks nothing again.
	FirmwareRequesting = "requesting"
	FirmwareFlashing   = "flashing"  // the BMC's task runs
	FirmwareVerifying  = "verifying" // the node (or BMC) restarts; the version is read until it shows
	FirmwareDone       = "done"
)

// FirmwareItem is one component's update.
type FirmwareItem struct {
	Component string `json:"component"` // bios, bmc, nic:<id>
	URL       string `json:"url"`
	// Version is the version the image carries, when the request said it
	// (then success means the BMC reads it back); "" means any version
	// the completed task left.
	Version string `json:"version,omitempty"`
	// Wait is seconds to wait after the update before the read-back
	// (Ironic's "wait").
	Wait int `json:"wait,omitempty"`
	// Before is the version read when the step began.
	Before string `json:"before"`
	Phase  string `json:"phase"`
	// Task is the BMC's task; TaskGone says the BMC dropped it before it
	// was seen to end (then only a changed version shows success).
	Task     string `json:"task,omitempty"`
	TaskGone bool   `json:"task_gone,omitempty"`
	// TaskSeen: the task was read at least once (a task the BMC says it
	// does not know before that may not exist yet).
	TaskSeen bool `json:"task_seen,omitempty"`
	Percent  int  `json:"percent"`
	// Since is when the phase began; Progressed when the task's progress
	// last moved (a task stalled longer than the stall timeout fails);
	// Contact when the BMC last answered (a BMC away longer than the
	// offline timeout fails the step).
	Since      time.Time `json:"since"`
	Progressed time.Time `json:"progressed,omitzero"`
	Contact    time.Time `json:"contact,omitzero"`
	// Rebooted: the node was rebooted to activate the image.
	Rebooted bool `json:"rebooted,omitempty"`
	// After is the version read back once done.
	After string `json:"after,omitempty"`
}
