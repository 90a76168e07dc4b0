package bmc

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"
)

// fakeFirmware is a fake node's firmware: versions per component, staged
// versions that activate at the next boot (BIOS, NICs; a BMC's is active
// at once), and update tasks. Images are registered with
// Fake.SetFirmwareImage: a URL the fake does not know fails its task, as a
// BMC that cannot download the image.
type fakeFirmware struct {
	versions map[string]string // component -> active version
	staged   map[string]string // component -> version active after the next boot
	tasks    map[string]*fakeTask
	next     int
	// offlineUntil: the BMC restarts after its own update and answers
	// nothing until then.
	offlineUntil time.Time
}

type fakeTask struct {
	component, version string
	polls              int // reads so far
	fail               string
	flashed            bool
}

// FakeFirmwareImage is what an image URL flashes on a fake node.
type FakeFirmwareImage struct {
	Component, Version string
	// Fail makes the task end in Exception with this message (a corrupt
	// image).
	Fail string
}

// FakeFirmwareKnobs make a fake node's updates misbehave like real BMCs.
type FakeFirmwareKnobs struct {
	// PollsToComplete is how many task reads see it Running before it
	// completes (default 1).
	PollsToComplete int
	// PurgeTasks: a task that completes is gone (404) at once, before
	// anyone reads its completion (iDRAC); failed tasks stay.
	PurgeTasks bool
	// StallTasks: tasks stay Running at 50% for ever.
	StallTasks bool
	// BusyUpdates: the next N update requests are answered busy (503);
	// nothing starts.
	BusyUpdates int
	// LostUpdateAnswers: the next N update requests start their task but
	// their answer is lost (no answer in time).
	LostUpdateAnswers int
	// OfflineAfterBMCUpdate: after a BMC image is flashed, every command
	// fails as unreachable for this long (the BMC restarts).
	OfflineAfterBMCUpdate time.Duration
}

func newFakeFirmware() fakeFirmware {
	return fakeFirmware{versions: map[string]string{ComponentBIOS: "1.0.0", ComponentBMC: "1.0.0", "nic:NIC.1": "1.0.0"},
		staged: map[string]string{}, tasks: map[string]*fakeTask{}}
}

// boot activates staged versions (called at POST, as the BIOS applies).
func (fw *fakeFirmware) boot() {
	maps.Copy(fw.versions, fw.staged)
	fw.staged = map[string]string{}
}

// SetFirmwareImage registers what url flashes on every fake node.
func (f *Fake) SetFirmwareImage(url string, img FakeFirmwareImage) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.images == nil {
		f.images = map[string]FakeFirmwareImage{}
	}
	f.images[url] = img
}

// SetFirmwareKnobs replaces the node's update knobs.
func (f *Fake) SetFirmwareKnobs(id string, k FakeFirmwareKnobs) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.node(id).fwKnobs = k
}

// FirmwareVersions returns the node's active and staged versions.
func (f *Fake) FirmwareVersions(id string) (active, staged map[string]string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fw := f.node(id).fw
	return maps.Clone(fw.versions), maps.Clone(fw.staged)
}

// firmware implements firmwareSession.
func (s fakeSession) firmware(context.Context) ([]FirmwareComponent, error) {
	var out []FirmwareComponent
	err := s.f.doNode(s.id, "get_firmware", func(n *fakeNode) error {
		for _, c := range slices.Sorted(maps.Keys(n.fw.versions)) {
			out = append(out, FirmwareComponent{Component: c, Version: n.fw.versions[c], Name: "fake " + c,
				InventoryURI: "/fake/" + s.id + "/" + c, Updateable: true})
		}
		return nil
	})
	return out, err
}

// simpleUpdate implements firmwareSession.
func (s fakeSession) simpleUpdate(_ context.Context, imageURL, target string) (string, error) {
	var uri string
	err := s.f.doNode(s.id, "update_firmware", func(n *fakeNode) error {
		if n.fwKnobs.BusyUpdates > 0 {
			n.fwKnobs.BusyUpdates--
			return classified(kindBusy, errors.New("fake BMC: 503 Service Unavailable"))
		}
		img, ok := s.f.images[imageURL]
		t := &fakeTask{component: img.Component, version: img.Version, fail: img.Fail}
		if !ok {
			t.fail = fmt.Sprintf("Unable to download the image from %s.", imageURL)
		} else if target != "" && target != "/fake/"+s.id+"/"+img.Component {
			return fmt.Errorf("fake BMC: image for %s cannot be applied to %s", img.Component, target)
		}
		n.fw.next++
		uri = "/fake/" + s.id + "/tasks/" + strconv.Itoa(n.fw.next)
		n.fw.tasks[uri] = t
		if n.fwKnobs.LostUpdateAnswers > 0 {
			n.fwKnobs.LostUpdateAnswers--
			return classified(kindUnreachable, errors.New("fake BMC: no answer in time"))
		}
		return nil
	})
	return uri, err
}

// task implements firmwareSession. A task completes at its
// PollsToComplete-th read and then flashes (activates or stages).
func (s fakeSession) task(_ context.Context, uri string) (FirmwareTask, error) {
	var out FirmwareTask
	err := s.f.doNode(s.id, "get_firmware_task", func(n *fakeNode) error {
		t, ok := n.fw.tasks[uri]
		if !ok {
			out = FirmwareTask{URI: uri, Gone: true, Percent: -1}
			return nil
		}
		t.polls++
		need := max(n.fwKnobs.PollsToComplete, 1)
		switch {
		case n.fwKnobs.StallTasks || t.polls < need:
			out = FirmwareTask{URI: uri, State: "Running", Status: "OK", Percent: 50}
			return nil
		case t.fail != "":
			out = FirmwareTask{URI: uri, State: "Exception", Status: "Critical", Percent: 100, Messages: []string{t.fail}}
		default:
			if !t.flashed {
				t.flashed = true
				if t.component == ComponentBMC {
					n.fw.versions[t.component] = t.version
					n.fw.offlineUntil = time.Now().Add(n.fwKnobs.OfflineAfterBMCUpdate)
				} else {
					n.fw.staged[t.component] = t.version
				}
			}
			out = FirmwareTask{URI: uri, State: "Completed", Status: "OK", Percent: 100, Messages: []string{"Update successful."}}
			if n.fwKnobs.PurgeTasks {
				// purged as it completed: nobody sees the completion
				delete(n.fw.tasks, uri)
				out = FirmwareTask{URI: uri, Gone: true, Percent: -1}
			}
		}
		return nil
	})
	return out, err
}
