package conductor

// The boot timeline's side of the conductor: the stages of a boot only
// the conductor sees (its reboot into the ramdisk, the agent's lookup and
// first heartbeat, steps), and the sentence a wait timeout adds to
// last_error saying where the boot stopped (controller/timeline).

import (
	"context"
	"fmt"
	"time"

	"github.com/anvil-metal/anvil/controller/store"
	"github.com/anvil-metal/anvil/controller/timeline"
)

// Timeline records boot stages without waiting (controller/timeline's
// Recorder).
type Timeline interface {
	RecordStage(nodeUUID string, s store.BootStage)
}

// stage records a stage of the node's current boot, if a timeline is set.
func (c *core) stage(nodeUUID string, s store.BootStage) {
	if c.cfg.Timeline == nil {
		return
	}
	if s.At.IsZero() {
		s.At = c.now()
	}
	c.cfg.Timeline.RecordStage(nodeUUID, s)
}

// outcomeOf is a stage's outcome for err.
func outcomeOf(err error) string {
	if err != nil {
		return store.OutcomeFailed + ": " + err.Error()
	}
	return store.OutcomeOK
}

// whereBootStopped is the sentence a timeout of a node waiting for its
// agent ends with: the last stage its current boot reached and what was
// expected next; "" when the timeline saw nothing of the boot. A boot
// older than since (the wait's start) is not this wait's.
func (c *core) whereBootStopped(ctx context.Context, n *store.Node, since time.Time) string {
	if c.cfg.Timeline == nil {
		return ""
	}
	boots, err := c.st.ListBoots(ctx, n.UUID, 1)
	if err != nil || len(boots) == 0 || len(boots[0].Stages) == 0 {
		return ""
	}
	last := boots[0].Stages[len(boots[0].Stages)-1]
	if !since.IsZero() && last.At.Before(since.Add(-time.Minute)) {
		return ""
	}
	why := timeline.Explain(boots[0])
	if why == "" {
		return ""
	}
	return fmt.Sprintf(" Where the boot stopped: %s.", why)
}

// bootDetail says why the controller boots n into the ramdisk.
func bootDetail(n *store.Node, reason, step string) string {
	d := "into the agent ramdisk for " + n.ProvisionState
	switch {
	case reason == "reboot" && step != "":
		d += " (a reboot requested by step " + step + ")"
	case step != "":
		d += " (for step " + step + ")"
	case reason != "" && reason != "boot":
		d += " (" + reason + ")"
	}
	return d
}
