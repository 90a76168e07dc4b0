package conductor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/anvil-metal/anvil/controller/diskcheck"
	"github.com/anvil-metal/anvil/controller/state"
	"github.com/anvil-metal/anvil/controller/store"
	"github.com/anvil-metal/anvil/protocol"
)

// The disk guard: before an erase step (and deploy's write_image) the
// agent reports what it sees (the inventory command, which every agent
// answers) and the controller compares it with what the node is expected
// to have (controller/diskcheck). Only then is the step itself issued, so a
// disk hidden by a missing driver fails the step before anything is erased,
// and the node can never reach available with an unerased disk.

// The guard keeps its records beyond one operation in the node's
// operation record (store.DiskRecords): the last comparison, which the
// API shows as driver_internal_info disk_check (`anvil node show` reads
// it), and the disks seen at the last deploy, which the cleaning after an
// undeploy expects.

// diskGuard checks the disks before a guarded step.
type diskGuard struct {
	*core
	// complete ends the guarded step when the check fails
	// (stepRunner.completeAsync).
	complete func(ctx context.Context, nodeUUID, stepKey string, stepErr error, summary string, agent *agentReport, mut func(m *store.Node)) error
}

// guardedStep reports whether a step needs the disk check first: every
// in-band erase step, the disk burn-in (it writes every disk it sees, so a
// disk hidden by a missing driver would pass untested), and writing the
// deploy image (root device hints).
func guardedStep(kind string, step protocol.Step) bool {
	if step.Interface != protocol.InterfaceDeploy {
		return false
	}
	switch step.Step {
	case "erase_devices", "erase_devices_metadata", "erase_devices_express", "burnin_disk":
		return true
	case "write_image":
		return kind == "deploy"
	}
	return false
}

// issueGuardedStep leaves the inventory command that precedes a guarded
// step; the step follows when the check passes (diskCheckDone). Resuming
// after a restart keeps a check or step already issued.
func issueGuardedStep(m *store.Node, name string, step protocol.Step, now time.Time) {
	if p := m.Operation.Agent.Command; p != nil {
		if p.Name == protocol.CmdInventory && p.Guards != nil && p.Guards.Key() == step.Key() {
			return
		}
		if p.Name == name && p.Step != nil && p.Step.Key() == step.Key() {
			return
		}
	}
	issueCommand(m, protocol.CmdInventory, nil, now)
	s := step
	m.Operation.Agent.Command.Guards, m.Operation.Agent.Command.GuardedCommand = &s, name
}

// diskCheckDone compares the inventory the agent reported before a guarded
// step with the node's expected disks: the step is issued, or fails.
func (c *diskGuard) diskCheckDone(ctx context.Context, n *store.Node, pending store.AgentCommand, st protocol.CommandStatus) error {
	step := *pending.Guards
	key := step.Key()
	cur := state.State(n.ProvisionState)
	// what the guarded step does to disks, for the messages of a failed
	// check: none of it was done.
	done := "erased"
	if step.Step == "burnin_disk" {
		done = "written"
	}
	clearCmd := func(m *store.Node) { m.Operation.Agent.Command = nil }
	fail := func(err error) error {
		return c.complete(ctx, n.UUID, key, err, "", nil, clearCmd)
	}
	if st.State == protocol.CommandFailed {
		msg := "no reason given"
		if st.Error != nil {
			msg = oneLine(st.Error.Message)
		}
		return fail(fmt.Errorf("the agent could not report the disks it sees (%s), so the step cannot be shown to reach every disk; nothing was %s", msg, done))
	}
	var seen protocol.Inventory
	if err := json.Unmarshal(st.Result, &seen); err != nil {
		return fail(fmt.Errorf("the agent's report of the disks it sees does not decode (%v); nothing was %s", err, done))
	}
	exp, err := c.expectedDisks(ctx, n)
	if err != nil {
		return fail(fmt.Errorf("%w; nothing was %s", err, done))
	}
	r := diskcheck.Compare(exp, seen)
	failed := r.Failed()
	msg := r.ErrorFor(done)
	if pending.GuardedCommand == protocol.CmdExecuteDeployStep {
		// Deploy writes one disk: it fails when the disk the root device
		// hints name is missing; the rest is history.
		failed, msg = deployCheck(r)
	}
	rec := &store.DiskCheck{Step: key, At: c.now().Format("2006-01-02T15:04:05Z07:00"), OK: !failed, Result: r}
	summary := fmt.Sprintf("disk check before %s: %s", key, oneLine(r.Summary()))
	if failed {
		sev := "ERROR"
		if _, err := store.MutateNodeEvents(ctx, c.st, n.UUID, func(m *store.Node) ([]*store.Event, error) {
			if m.ProvisionState != string(cur) {
				return nil, errStale
			}
			m.Operation.Disks.Check = rec
			return []*store.Event{c.newEvent(m.UUID, sev, "agent", summary)}, nil
		}); err != nil {
			return err
		}
		return fail(errors.New(oneLine(msg)))
	}
	_, err = store.MutateNodeEvents(ctx, c.st, n.UUID, func(m *store.Node) ([]*store.Event, error) {
		if m.ProvisionState != string(cur) {
			return nil, errStale
		}
		m.Operation.Disks.Check = rec
		if pending.GuardedCommand == protocol.CmdExecuteDeployStep {
			var disks []protocol.Disk
			for _, d := range seen.Disks {
				if diskcheck.Erasable(d) && !d.Removable {
					disks = append(disks, protocol.Disk{Name: d.Name, Serial: d.Serial, WWN: d.WWN, Model: d.Model, Size: d.Size, ByPath: d.ByPath})
				}
			}
			m.Operation.Disks.AtDeploy = disks
		}
		issueCommand(m, pending.GuardedCommand, &step, c.now())
		return []*store.Event{c.newEvent(m.UUID, "INFO", "agent", summary)}, nil
	})
	return err
}

// withDisklessNote adds to a finished step's summary that the node was
// allowed to have no disks, when the disk check before this step passed
// only by that flag: "no devices to erase" alone would read as if the
// agent had looked at every disk.
func withDisklessNote(n *store.Node, stepKey, summary string) string {
	rec := n.Operation.Disks.Check
	if rec == nil || rec.Step != stepKey || !rec.OK || !rec.NoDisks || rec.DisklessAllowedBy == "" {
		return summary
	}
	note := "no disks present, allowed by " + rec.DisklessAllowedBy
	if summary = strings.TrimSpace(summary); summary == "" {
		return note
	}
	return note + "; " + summary
}

// deployCheck fails a deploy only for the disks the root device hints
// name; other differences are recorded, not fatal.
func deployCheck(r diskcheck.Result) (bool, string) {
	var hinted []diskcheck.Disk
	for _, d := range r.Missing {
		for _, f := range d.From {
			if f == diskcheck.FromRootHint {
				hinted = append(hinted, d)
				break
			}
		}
	}
	if len(hinted) == 0 {
		return false, ""
	}
	only := diskcheck.Result{Missing: hinted, Seen: r.Seen}
	return true, "the disk the root device hints name is missing, so the image is not written to any other: " + only.Error()
}

// expectedDisks gathers what the node should have: its stored inspection
// inventory (none when never inspected), the disks it had when deployed,
// and its properties.
func (c *diskGuard) expectedDisks(ctx context.Context, n *store.Node) (diskcheck.Expectation, error) {
	var inspected *protocol.Inventory
	raw, err := c.st.GetInventory(ctx, n.UUID)
	switch {
	case errors.Is(err, store.ErrNotFound), err == nil && n.Operation.Disks.InventoryFromBMC:
		// never inspected, or out of band: a BMC lists physical drives,
		// which behind a RAID controller the ramdisk never sees
	case err != nil:
		return diskcheck.Expectation{}, fmt.Errorf("read the node's inspection inventory: %w", err)
	default:
		var inv protocol.Inventory
		if err := json.Unmarshal(raw, &inv); err != nil {
			return diskcheck.Expectation{}, fmt.Errorf("the node's stored inventory does not decode: %w", err)
		}
		inspected = &inv
	}
	return diskcheck.Expect(inspected, n.Operation.Disks.AtDeploy, n.Properties)
}
