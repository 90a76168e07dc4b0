package conductor

// The firmware flow: firmware.update as a state machine per component,
// kept in the node's Operation (store.FirmwareUpdate) so that a restart
// resumes it, and firmware.verify against a baseline. An update leaves
// the node waiting (clean wait); the runtime's timer kicks it every
// CheckInterval and advance moves the current component one phase on:
//
//	pending   → the BMC is asked to pull and flash the image (SimpleUpdate)
//	flashing  → its task is read until it ends; a failed task fails the
//	            step with the BMC's messages, a stalled or overlong one
//	            after FirmwareConfig's bounds, a vanished one goes on to
//	            the read-back, which alone can then show success
//	verifying → (bios, NICs: after a reboot that activates the image) the
//	            version is read until it is the one asked for, or has
//	            changed when none was given; a BMC that restarts after
//	            its own update is waited for up to OfflineTimeout
//	done      → the next component (BMC → BIOS → NICs)
//
// Power sync leaves a node with an update under way alone, and the wait
// state's generic timeouts give way to these bounds.

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/anvil-metal/anvil/bmc"
	"github.com/anvil-metal/anvil/controller/state"
	"github.com/anvil-metal/anvil/controller/store"
	"github.com/anvil-metal/anvil/protocol"
)

// firmwareDriver is a Driver that reads and updates firmware through the
// node's BMC (the redfish type).
type firmwareDriver interface {
	FirmwareComponents(ctx context.Context, n *store.Node) ([]bmc.FirmwareComponent, error)
	StartFirmwareUpdate(ctx context.Context, n *store.Node, c bmc.FirmwareComponent, url string) (string, error)
	FirmwareTask(ctx context.Context, n *store.Node, uri string) (bmc.FirmwareTask, error)
}

// firmwareProvider is a Driver with a firmware interface.
type firmwareProvider interface {
	// FirmwareInterface is n's firmware interface (nil: none).
	FirmwareInterface(n *store.Node) firmwareDriver
}

// firmwareOf is d's firmware interface for n (nil: none).
func firmwareOf(n *store.Node, d Driver) firmwareDriver {
	if p, ok := d.(firmwareProvider); ok {
		return p.FirmwareInterface(n)
	}
	return nil
}

// firmwareFlow runs the firmware steps.
type firmwareFlow struct {
	*machine
	steps *stepRunner // the step's end
}

func (c *firmwareFlow) cfgs() FirmwareConfig { return c.cfg.Firmware }

// execute runs a firmware step: verify at once, update by starting the
// flow (the node then waits).
func (c *firmwareFlow) execute(ctx context.Context, n *store.Node, d Driver, step protocol.Step) (StepStatus, error) {
	fd := firmwareOf(n, d)
	if fd == nil {
		return StepDone, fmt.Errorf("step %s: firmware is not supported by the %s driver (use the redfish hardware type)", step.Key(), d.Name())
	}
	switch step.Step {
	case "verify":
		return StepDone, c.verify(ctx, n, d, fd, step)
	case "update":
		return c.begin(ctx, n, d, fd, step)
	}
	return StepDone, fmt.Errorf("the firmware interface has no step %s", step.Key())
}

// verify compares the versions the BMC reports with the baseline.
func (c *firmwareFlow) verify(ctx context.Context, n *store.Node, d Driver, fd firmwareDriver, step protocol.Step) error {
	b, err := baselineArg(n, step.Args)
	if err != nil {
		return err
	}
	comps, err := fd.FirmwareComponents(ctx, n)
	if err != nil {
		return fmt.Errorf("reading the firmware versions: %w", err)
	}
	c.cache(ctx, n, comps, nil)
	return b.check(comps)
}

// begin records the update's plan (the node's versions and power state
// now) and leaves the node waiting. A restart that runs the step again
// finds its record and keeps it: nothing is requested twice.
func (c *firmwareFlow) begin(ctx context.Context, n *store.Node, d Driver, fd firmwareDriver, step protocol.Step) (StepStatus, error) {
	ph, ok := phaseOf(n)
	if !ok {
		return StepDone, fmt.Errorf("step %s: node is in %s, not running steps", step.Key(), n.ProvisionState)
	}
	idx := (*ph.plan(&n.Operation)).Index
	if fu := n.Operation.Firmware; fu != nil && fu.Step == step.Key() && fu.Index == idx {
		return StepWait, nil
	}
	settings, err := updateSettings(step.Args)
	if err != nil {
		return StepDone, err
	}
	for _, s := range settings {
		if s.Checksum == "" {
			continue
		}
		if err := checkImage(ctx, c.httpClient(), s); err != nil {
			return StepDone, err
		}
	}
	comps, err := fd.FirmwareComponents(ctx, n)
	if err != nil {
		return StepDone, fmt.Errorf("reading the firmware versions before the update: %w", err)
	}
	have := map[string]string{}
	for _, cp := range comps {
		have[cp.Component] = cp.Version
	}
	ps, err := d.PowerState(ctx, n)
	if err != nil {
		return StepDone, fmt.Errorf("reading the power state before the update: %w", err)
	}
	fu := &store.FirmwareUpdate{Step: step.Key(), Index: idx, PowerWasOn: ps == PowerOn}
	now := c.now()
	var plan []string
	for _, s := range settings {
		before, found := have[s.Component]
		if !found {
			return StepDone, fmt.Errorf("the BMC reports no firmware component %s (it has %s)", s.Component, componentNames(comps))
		}
		fu.Items = append(fu.Items, store.FirmwareItem{Component: s.Component, URL: s.URL, Version: s.Version, Wait: s.Wait,
			Before: before, Phase: store.FirmwarePending})
		if len(fu.Items) == 1 {
			fu.Items[0].Since = now
		}
		plan = append(plan, fmt.Sprintf("%s %s → %s", s.Component, before, orAny(s.Version)))
	}
	ev := c.newEvent(n.UUID, "INFO", "firmware", "firmware update planned, one component at a time: "+strings.Join(plan, ", "))
	reboots := slices.ContainsFunc(fu.Items, func(it store.FirmwareItem) bool { return it.Component != bmc.ComponentBMC })
	_, err = store.MutateNodeEvents(ctx, c.st, n.UUID, func(m *store.Node) ([]*store.Event, error) {
		m.Operation.Firmware = fu
		if reboots && UsesAgent(m) && m.Operation.Agent.Booted && !m.Operation.Agent.LeftRamdisk {
			// BIOS and NIC images activate at a reboot, which leaves the ramdisk
			leaveRamdisk(&m.Operation.Agent, c.now())
		}
		return []*store.Event{ev}, nil
	})
	if err != nil {
		return StepDone, err
	}
	return StepWait, nil
}

func (c *firmwareFlow) httpClient() *http.Client {
	if c.cfgs().HTTPClient != nil {
		return c.cfgs().HTTPClient
	}
	return &http.Client{Timeout: 30 * time.Minute, CheckRedirect: bmc.NoDowngrade}
}

func componentNames(comps []bmc.FirmwareComponent) string {
	var names []string
	for _, c := range comps {
		names = append(names, c.Component)
	}
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}

func orNothing(s string) string {
	if s == "" {
		return "(nothing)"
	}
	return s
}

func orAny(v string) string {
	if v == "" {
		return "(the image's version)"
	}
	return v
}

// advance moves the node's update one phase on; moved says something
// changed (the runtime then goes on at once rather than at the next
// timer).
func (c *firmwareFlow) advance(ctx context.Context, n *store.Node, d Driver) (bool, error) {
	fu := n.Operation.Firmware
	ph, ok := phaseOf(n)
	fd := firmwareOf(n, d)
	if !ok || n.ProvisionState != string(ph.wait) || *ph.plan(&n.Operation) == nil ||
		(*ph.plan(&n.Operation)).Index != fu.Index || currentStepKey(n) != fu.Step {
		// Not this step's record (it should have gone with its step).
		_, err := store.MutateNode(ctx, c.st, n.UUID, func(m *store.Node) error {
			m.Operation.Firmware = nil
			return nil
		})
		return true, err
	}
	if fd == nil {
		return true, c.fail(ctx, n, d, fmt.Errorf("the node's firmware interface is off (firmware_interface %q) while its update runs", n.Interfaces.Firmware))
	}
	if fu.Current >= len(fu.Items) {
		return true, c.finish(ctx, n, d)
	}
	it := fu.Items[fu.Current]
	switch it.Phase {
	case store.FirmwarePending:
		return true, c.request(ctx, n, fd, it)
	case store.FirmwareRequesting:
		// A restart (or another controller) found the request half sent.
		return true, c.failByID(ctx, n, flashing(fmt.Errorf("the controller stopped while asking the BMC to flash %s from %s: whether "+
			"the BMC started is unknown, so it is not asked again; check the BMC's task list before running the step again", it.Component, it.URL)))
	case store.FirmwareFlashing:
		return c.watch(ctx, n, d, fd, it)
	case store.FirmwareVerifying:
		return c.readBack(ctx, n, fd, it)
	}
	return true, c.fail(ctx, n, d, fmt.Errorf("component %s is in an unknown phase %q", it.Component, it.Phase))
}

// save writes the current item (as the flow saw it) and events, if the
// record is still the one advance read, and makes n's record the one
// written, so that the flow goes on from it.
func (c *firmwareFlow) save(ctx context.Context, n *store.Node, it store.FirmwareItem, next bool, events ...*store.Event) error {
	fu := n.Operation.Firmware
	saved, err := store.MutateNodeEvents(ctx, c.st, n.UUID, func(m *store.Node) ([]*store.Event, error) {
		cur := m.Operation.Firmware
		if cur == nil || cur.Step != fu.Step || cur.Index != fu.Index || cur.Current != fu.Current {
			return nil, fmt.Errorf("%w: the firmware update moved on", errStale)
		}
		cur.Items[cur.Current] = it
		if next {
			cur.Current++
			if cur.Current < len(cur.Items) {
				// the next component's clock starts now: a BMC that
				// does not answer its request is timed from here
				cur.Items[cur.Current].Since = c.now()
			}
		}
		return events, nil
	})
	if err == nil {
		n.Operation.Firmware = saved.Operation.Firmware
	}
	return err
}

// request asks the BMC to flash the current component.
func (c *firmwareFlow) request(ctx context.Context, n *store.Node, fd firmwareDriver, it store.FirmwareItem) error {
	comps, err := fd.FirmwareComponents(ctx, n)
	if err != nil {
		return c.offline(ctx, n, it, fmt.Errorf("reading the firmware inventory: %w", err))
	}
	var target *bmc.FirmwareComponent
	for i := range comps {
		if comps[i].Component == it.Component {
			target = &comps[i]
		}
	}
	switch {
	case target == nil:
		return c.failByID(ctx, n, fmt.Errorf("the BMC no longer reports component %s (it has %s)", it.Component, componentNames(comps)))
	case !target.Updateable:
		return c.failByID(ctx, n, fmt.Errorf("the BMC says component %s is not updateable", it.Component))
	}
	// The marker is written before the request: a restart that finds it
	// cannot know whether the BMC took the request, and asks nothing again.
	pending := it
	it.Phase = store.FirmwareRequesting
	if err := c.save(ctx, n, it, false); err != nil {
		return err
	}
	task, err := fd.StartFirmwareUpdate(ctx, n, *target, it.URL)
	if err != nil {
		switch {
		case errors.Is(err, bmc.ErrNotSent) || errors.Is(err, bmc.ErrBusy):
			// nothing was started (no session, or the BMC said busy): asked again next round
			if serr := c.save(ctx, n, pending, false); serr != nil {
				return serr
			}
			return c.offline(ctx, n, pending, err)
		case errors.Is(err, bmc.ErrUnreachable):
			return c.failByID(ctx, n, flashing(fmt.Errorf("the BMC did not answer the request to flash %s from %s: it may have started "+
				"the flash, so it is not asked again; check the BMC's task list before running the step again: %w", it.Component, it.URL, err)))
		}
		return c.failByID(ctx, n, fmt.Errorf("the update of %s from %s was not started: %w", it.Component, it.URL, err))
	}
	now := c.now()
	it.Phase, it.Task, it.Since, it.Progressed, it.Contact, it.Percent = store.FirmwareFlashing, task, now, now, now, 0
	return c.save(ctx, n, it, false, c.newEvent(n.UUID, "INFO", "firmware",
		fmt.Sprintf("firmware update of %s from %s requested (task %s)", it.Component, it.URL, task)))
}

// watch reads the BMC's task.
func (c *firmwareFlow) watch(ctx context.Context, n *store.Node, d Driver, fd firmwareDriver, it store.FirmwareItem) (bool, error) {
	tk, err := fd.FirmwareTask(ctx, n, it.Task)
	now := c.now()
	cfg := c.cfgs()
	if err == nil && !tk.Gone && !it.TaskSeen {
		it.TaskSeen = true
		if err := c.save(ctx, n, it, false); err != nil {
			return false, err
		}
	}
	switch {
	case err != nil:
		return false, c.offline(ctx, n, it, fmt.Errorf("reading task %s: %w", it.Task, err))
	case tk.Gone && !it.TaskSeen && now.Sub(it.Since) < cfg.GoneGrace:
		return false, nil // not created yet, perhaps: asked again next round
	case tk.Failed():
		msg := tk.Message()
		if msg == "" {
			msg = "no message"
		}
		return true, c.failByID(ctx, n, fmt.Errorf("the BMC's update of %s failed (task %s ended %s/%s): %s", it.Component, it.Task, tk.State, tk.Status, msg))
	case tk.Gone || tk.Succeeded():
		it.TaskGone = tk.Gone
		how := "completed"
		if tk.Gone {
			how = "vanished before it was seen to end (the BMC purged it); the version read back decides"
		}
		if tk.Message() != "" {
			how += ": " + tk.Message()
		}
		events := []*store.Event{c.newEvent(n.UUID, "INFO", "firmware", fmt.Sprintf("firmware update of %s: task %s %s", it.Component, it.Task, how))}
		reboot := it.Component != bmc.ComponentBMC // BIOS and NIC images are staged until the next boot
		boot := ""
		if reboot {
			boot = c.activationBoot(ctx, n, d)
			it.Rebooted = true
			events = append(events, c.newEvent(n.UUID, "INFO", "firmware", "rebooting the node to activate the "+it.Component+" firmware"))
		}
		// Saved before the reboot: a restart never reboots twice (a
		// second reset during the POST that writes the image could cut it).
		it.Phase, it.Since, it.Contact, it.Percent = store.FirmwareVerifying, now, now, 100
		if err := c.save(ctx, n, it, false, events...); err != nil {
			return true, err
		}
		if reboot {
			if err := d.SetPower(ctx, n, boot); err != nil {
				return true, c.failByID(ctx, n, fmt.Errorf("rebooting to activate the %s firmware: %w", it.Component, err))
			}
		}
		return true, nil
	case now.Sub(it.Since) > cfg.TaskTimeout:
		return true, c.failByID(ctx, n, flashing(fmt.Errorf("the BMC's update of %s did not finish within %s (task %s %s at %d%%): %s",
			it.Component, cfg.TaskTimeout, it.Task, tk.State, tk.Percent, orNothing(tk.Message()))))
	case tk.Percent != it.Percent && tk.Percent >= 0:
		ev := []*store.Event{}
		if tk.Percent/25 != it.Percent/25 {
			ev = append(ev, c.newEvent(n.UUID, "INFO", "firmware", fmt.Sprintf("firmware update of %s: %d%% (task %s)", it.Component, tk.Percent, tk.State)))
		}
		it.Percent, it.Progressed, it.Contact = tk.Percent, now, now
		return false, c.save(ctx, n, it, false, ev...)
	case now.Sub(it.Progressed) > cfg.StallTimeout:
		return true, c.failByID(ctx, n, flashing(fmt.Errorf("the BMC's update of %s stalled: task %s %s at %d%% for %s: %s",
			it.Component, it.Task, tk.State, max(tk.Percent, 0), now.Sub(it.Progressed).Round(time.Second), orNothing(tk.Message()))))
	case now.Sub(it.Contact) > time.Minute:
		it.Contact = now // so that a BMC away later is timed from here
		return false, c.save(ctx, n, it, false)
	}
	return false, nil
}

// activationBoot is the power action that activates staged firmware: a
// reboot of a node that is on, a power-on of one that is off (finish
// powers it off again).
func (c *firmwareFlow) activationBoot(ctx context.Context, n *store.Node, d Driver) string {
	if ps, err := d.PowerState(ctx, n); err == nil && ps == PowerOff {
		return PowerOn
	}
	return Rebooting
}

// readBack reads the version until it shows the update.
func (c *firmwareFlow) readBack(ctx context.Context, n *store.Node, fd firmwareDriver, it store.FirmwareItem) (bool, error) {
	now := c.now()
	settle := time.Duration(it.Wait) * time.Second
	if it.Rebooted {
		settle = max(settle, c.cfgs().ActivationSettle)
	}
	if now.Before(it.Since.Add(settle)) {
		return false, nil
	}
	comps, err := fd.FirmwareComponents(ctx, n)
	if err != nil {
		// A BMC restarting after its own update is away for a while.
		return false, c.offline(ctx, n, it, fmt.Errorf("reading the version back: %w", err))
	}
	got, found := "", false
	for _, cp := range comps {
		if cp.Component == it.Component {
			got, found = cp.Version, true
		}
	}
	ok := found && got != "" && ((it.Version != "" && got == it.Version) || (it.Version == "" && got != it.Before))
	if ok {
		it.After, it.Phase = got, store.FirmwareDone
		if err := c.save(ctx, n, it, true, c.newEvent(n.UUID, "INFO", "firmware",
			fmt.Sprintf("firmware of %s updated: %s → %s, read back from the BMC", it.Component, it.Before, got))); err != nil {
			return true, err
		}
		// the versions just read are the cache's, with what was flashed
		// so far (finish reads nothing again)
		flashed := map[string]string{}
		for _, done := range n.Operation.Firmware.Items {
			if done.Phase == store.FirmwareDone {
				flashed[done.Component] = done.After
			}
		}
		c.cache(ctx, n, comps, flashed)
		return true, nil
	}
	if now.Sub(it.Since) <= c.cfgs().VerifyTimeout {
		return false, nil
	}
	want := "a version other than " + it.Before
	if it.Version != "" {
		want = it.Version
	}
	why := ""
	if it.TaskGone {
		why = " (the BMC dropped its task before it was seen to end)"
	} else if it.Version == "" {
		why = " (to flash the version already running, give the setting a version)"
	}
	err = fmt.Errorf("component %s reads %s %s after the update, expected %s%s", it.Component, orNothing(got), c.cfgs().VerifyTimeout, want, why)
	if it.Rebooted {
		err = flashing(err) // the POST may still be writing it
	}
	return true, c.failByID(ctx, n, err)
}

// offline handles a BMC that did not answer: the flow waits for it up to
// OfflineTimeout since it last answered, then fails.
func (c *firmwareFlow) offline(ctx context.Context, n *store.Node, it store.FirmwareItem, err error) error {
	since := it.Contact
	if since.IsZero() {
		since = it.Since
	}
	if since.IsZero() {
		return c.failByID(ctx, n, err) // never reached the BMC for this component
	}
	if c.now().Sub(since) > c.cfgs().OfflineTimeout {
		err = fmt.Errorf("the BMC has not answered for %s during the update of %s: %w", c.now().Sub(since).Round(time.Second), it.Component, err)
		if it.Phase != store.FirmwarePending {
			err = flashing(err)
		}
		return c.failByID(ctx, n, err)
	}
	c.log.Info("firmware update: the BMC did not answer; waiting", "node", n.UUID, "component", it.Component, "err", err)
	return nil
}

// flashInProgress marks a failure while the BMC may still be writing an
// image (a task not seen to end, a BMC away, a POST that may be writing
// it): the failed node is not powered off, since a power action during a
// flash can leave the component unusable.
type flashInProgress struct{ err error }

func flashing(err error) error { return &flashInProgress{err} }

func (e *flashInProgress) Error() string {
	return e.err.Error() + "; the BMC may still be flashing, so the node was left powered as it was: check the BMC before any power action"
}

func (e *flashInProgress) Unwrap() error { return e.err }

// keepsPower reports whether err is a flashInProgress.
func keepsPower(err error) bool {
	var f *flashInProgress
	return errors.As(err, &f)
}

// finish leaves the power as found and ends the step (readBack cached
// the versions as each component was done).
func (c *firmwareFlow) finish(ctx context.Context, n *store.Node, d Driver) error {
	fu := n.Operation.Firmware
	rebooted := false
	var done []string
	for _, it := range fu.Items {
		rebooted = rebooted || it.Rebooted
		done = append(done, fmt.Sprintf("%s %s → %s", it.Component, it.Before, it.After))
	}
	summary := "firmware updated: " + strings.Join(done, ", ")
	drop := func(m *store.Node) { m.Operation.Firmware = nil }
	kind := "clean"
	if ph, ok := phaseOf(n); ok {
		kind = ph.kind
	}
	if rebooted && agentNeededAfter(n, d, kind, protocol.Step{Interface: protocol.InterfaceFirmware, Step: "update"}) {
		_, err := c.steps.backToRamdisk(ctx, n, d, fu.Step, summary, drop)
		if err != nil {
			return c.fail(ctx, n, d, err)
		}
		return nil
	}
	if rebooted && !fu.PowerWasOn {
		if _, err := powerOff(ctx, d, n, offLeaveOn); err != nil {
			return c.fail(ctx, n, d, fmt.Errorf("powering the node off again after the update: %w", err))
		}
	}
	return c.steps.completeAsync(ctx, n.UUID, fu.Step, nil, summary, nil, drop)
}

// failByID fails the step (looking the driver up again is not needed:
// failing makes no BMC call).
func (c *firmwareFlow) failByID(ctx context.Context, n *store.Node, err error) error {
	return c.fail(ctx, n, nil, err)
}

// fail ends the step with err; the versions are cached as they are now
// where the driver can read them.
func (c *firmwareFlow) fail(ctx context.Context, n *store.Node, d Driver, err error) error {
	fu := n.Operation.Firmware
	if fd := firmwareOf(n, d); fd != nil {
		if comps, rerr := fd.FirmwareComponents(ctx, n); rerr == nil {
			c.cache(ctx, n, comps, nil)
		}
	}
	return c.steps.completeAsync(ctx, n.UUID, fu.Step, err, "", nil, func(m *store.Node) { m.Operation.Firmware = nil })
}

// cache stores the versions read; flashed names the versions an update
// wrote (last_version_flashed).
func (c *firmwareFlow) cache(ctx context.Context, n *store.Node, comps []bmc.FirmwareComponent, flashed map[string]string) {
	if err := c.st.ReplaceFirmwareComponents(ctx, n.UUID, firmwareToStore(comps, flashed)); err != nil {
		c.log.Warn("caching the firmware versions failed", "node", n.UUID, "err", err)
	}
}

// kickUpdates schedules every node with an update under way: the runtime
// runs it each CheckInterval (the flow polls the BMC then).
func (c *firmwareFlow) kickUpdates(ctx context.Context) {
	no := false
	for _, st := range []state.State{state.CleanWait, state.DeployWait, state.ServiceWait} {
		s := string(st)
		nodes, err := c.st.ListNodes(ctx, store.NodeFilter{ProvisionState: &s, Maintenance: &no}, store.Page{})
		if err != nil {
			c.log.Error("listing waiting nodes failed", "state", s, "err", err)
			continue
		}
		for _, n := range nodes {
			if n.Operation.Firmware != nil {
				c.kick(n.UUID)
			}
		}
	}
}
