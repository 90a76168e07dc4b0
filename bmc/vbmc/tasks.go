package vbmc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"
)

// Redfish task states and statuses used here.
const (
	TaskNew       = "New"
	TaskRunning   = "Running"
	TaskCompleted = "Completed"
	TaskException = "Exception"
)

// maxTasks bounds the task table; the oldest finished tasks are dropped.
const maxTasks = 100

// image is where a task's firmware comes from: a URL the BMC downloads
// (SimpleUpdate) or the bytes a client pushed (MultipartHttpPushUri).
type image struct {
	// name is the URL, or the pushed file's name, for the task's messages.
	name string
	// action is the URI the update was asked at, for the task's Payload.
	action string
	// pushed: data is the image; else name is downloaded.
	pushed bool
	data   []byte
}

// read verifies the image (downloading it first when pulled).
func (im image) read(ctx context.Context) (FirmwareHeader, error) {
	if im.pushed {
		return readFirmwareImage(bytes.NewReader(im.data))
	}
	return fetchFirmware(ctx, im.name)
}

// task is one firmware update. Fields are guarded by firmware.mu.
type task struct {
	id       string
	img      image
	target   target
	state    string
	status   string // OK, Warning, Critical
	percent  int
	start    time.Time
	end      time.Time
	messages []map[string]any
}

func (t *task) path() string { return "/redfish/v1/TaskService/Tasks/" + t.id }

func message(id, severity, text string, args ...string) map[string]any {
	return map[string]any{"@odata.type": "#Message.v1_1_1.Message", "MessageId": id,
		"Message": text, "Severity": severity, "MessageArgs": args}
}

// start registers a task for img and runs it in the background, and
// returns its document as created (New); nil once the server is closed.
func (f *firmware) start(img image, t target) map[string]any {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ctx.Err() != nil {
		return nil
	}
	f.nextTask++
	tk := &task{id: strconv.Itoa(f.nextTask), img: img, target: t, state: TaskNew, status: "OK", start: time.Now()}
	f.tasks[tk.id] = tk
	f.taskOrder = append(f.taskOrder, tk.id)
	f.trimTasks()
	doc := tk.doc() // before run can move it on
	f.wg.Add(1)
	go f.run(tk)
	f.log.Info("vbmc: firmware update started", "task", tk.id, "image", img.name, "pushed", img.pushed, "bytes", len(img.data), "node", t.node, "target", t.id)
	return doc
}

// trimTasks drops the oldest finished tasks beyond maxTasks. Called with
// f.mu held.
func (f *firmware) trimTasks() {
	for i := 0; len(f.taskOrder) > maxTasks && i < len(f.taskOrder); {
		tk := f.tasks[f.taskOrder[i]]
		if tk != nil && (tk.state == TaskNew || tk.state == TaskRunning) {
			i++
			continue
		}
		delete(f.tasks, f.taskOrder[i])
		f.taskOrder = append(f.taskOrder[:i], f.taskOrder[i+1:]...)
	}
}

// update changes a task under the lock.
func (f *firmware) update(tk *task, fn func(*task)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(tk)
}

// sleep waits d, or returns false when the server closes.
func (f *firmware) sleep(d time.Duration) bool {
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-f.ctx.Done():
		return false
	case <-tm.C:
		return true
	}
}

// run is a task's life: download (a pulled image) and verify (to 20 %),
// flash (to 100 % over UpdateDuration), then the outcome. A pushed image
// is verified the same way: a corrupt upload fails the task, not the POST.
func (f *firmware) run(tk *task) {
	defer f.wg.Done()
	f.update(tk, func(t *task) { t.state, t.percent = TaskRunning, 5 })
	hdr, err := tk.img.read(f.ctx)
	f.update(tk, func(t *task) { t.img.data = nil }) // verified or not, the bytes are done with
	if f.ctx.Err() != nil {
		return
	}
	if err == nil && tk.target.kind != "" && hdr.Component != tk.target.kind {
		err = fmt.Errorf("%w: the image is for component %s, not %s (%s)", errImageInvalid, hdr.Component, tk.target.kind, tk.target.id)
	}
	var comp *component
	if err == nil {
		f.mu.Lock()
		comp = f.find(tk.target.node, hdr.Component)
		f.mu.Unlock()
		if comp == nil {
			err = fmt.Errorf("%w: the image is for component %q, which %s does not have", errImageInvalid, hdr.Component, tk.target.node)
		}
	}
	if err != nil {
		id, text := "Update.1.0.TransferFailed", fmt.Sprintf("Transfer of image '%s' failed: %v", tk.img.name, err)
		if errors.Is(err, errImageInvalid) {
			id, text = "Update.1.0.VerificationFailed", fmt.Sprintf("Verification of image '%s' failed: %v", tk.img.name, err)
		}
		f.log.Info("vbmc: firmware update failed", "task", tk.id, "error", err)
		f.update(tk, func(t *task) {
			t.state, t.status, t.end = TaskException, "Critical", time.Now()
			t.messages = append(t.messages, message(id, "Critical", text, tk.img.name))
		})
		return
	}
	f.update(tk, func(t *task) {
		t.percent = 20
		t.messages = append(t.messages, message("Update.1.0.TargetDetermined", "OK",
			fmt.Sprintf("The target device '%s' will be updated with image '%s'.", comp.id, tk.img.name), comp.id, tk.img.name))
	})
	f.mu.Lock()
	opts := f.opts
	f.mu.Unlock()
	const steps = 8
	for i := 1; i <= steps; i++ {
		if opts.StallTasks && i == steps/2 {
			f.update(tk, func(t *task) { t.percent = 50 })
			<-f.ctx.Done()
			return
		}
		if !f.sleep(opts.UpdateDuration / steps) {
			return
		}
		f.update(tk, func(t *task) { t.percent = 20 + 80*i/steps })
	}
	f.finish(tk, comp, hdr.Version, opts)
}

// finish records a successful flash: a BMC runs its new firmware at once
// (after restarting), a BIOS or NIC image waits for the next boot.
func (f *firmware) finish(tk *task, comp *component, version string, opts FirmwareOptions) {
	f.mu.Lock()
	defer f.mu.Unlock()
	tk.state, tk.percent, tk.end = TaskCompleted, 100, time.Now()
	tk.messages = append(tk.messages, message("Update.1.0.UpdateSuccessful", "OK",
		fmt.Sprintf("Device '%s' successfully updated with image '%s'.", comp.id, tk.img.name), comp.id, tk.img.name))
	if comp.kind == FirmwareBMC {
		comp.version, comp.pending = version, ""
		if opts.OfflineAfterBMCUpdate {
			f.offlineUntil = time.Now().Add(opts.BMCRestart)
		}
	} else {
		comp.pending = version
		tk.messages = append(tk.messages, message("Update.1.0.AwaitToActivate", "OK",
			fmt.Sprintf("Awaiting for an action to proceed with activating an installed software image: %s.", "ForceRestart"), "ForceRestart"))
	}
	f.log.Info("vbmc: firmware update completed", "task", tk.id, "node", comp.node, "component", comp.kind, "version", version, "active", comp.version)
	if opts.PurgeCompletedTasks {
		delete(f.tasks, tk.id)
	}
}

// Close stops the background work of firmware updates and waits for it.
// Tasks still running stay as they are; new updates are refused.
func (s *Server) Close() {
	s.fw.cancel()
	s.fw.wg.Wait()
}

// offline answers 503 while the BMC restarts after a BMC update and
// reports whether it did.
func (f *firmware) offline(w http.ResponseWriter) bool {
	f.mu.Lock()
	left := time.Until(f.offlineUntil)
	f.mu.Unlock()
	if left <= 0 {
		return false
	}
	w.Header().Set("Retry-After", strconv.Itoa(int(left/time.Second)+1))
	w.Header().Set("Connection", "close")
	redfishError(w, http.StatusServiceUnavailable, "ServiceTemporarilyUnavailable", "The BMC is restarting after a firmware update.")
	return true
}

func (s *Server) taskRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /redfish/v1/TaskService", s.auth(s.taskService))
	mux.HandleFunc("GET /redfish/v1/TaskService/Tasks", s.auth(s.listTasks))
	mux.HandleFunc("GET /redfish/v1/TaskService/Tasks/{task}", s.auth(s.getTask))
}

func (s *Server) taskService(w http.ResponseWriter, _ *http.Request) {
	ts := odata("/redfish/v1/TaskService", "#TaskService.v1_2_0.TaskService")
	ts["Id"], ts["Name"] = "TaskService", "Task Service"
	ts["ServiceEnabled"] = true
	ts["CompletedTaskOverWritePolicy"] = "Oldest"
	ts["LifeCycleEventOnTaskStateChange"] = false
	ts["Status"] = map[string]any{"State": "Enabled", "Health": "OK"}
	ts["Tasks"] = link("/redfish/v1/TaskService/Tasks")
	writeJSON(w, http.StatusOK, ts)
}

func (s *Server) listTasks(w http.ResponseWriter, _ *http.Request) {
	s.fw.mu.Lock()
	var members []string
	for _, id := range s.fw.taskOrder {
		if _, ok := s.fw.tasks[id]; ok {
			members = append(members, "/redfish/v1/TaskService/Tasks/"+id)
		}
	}
	s.fw.mu.Unlock()
	writeJSON(w, http.StatusOK, collection("/redfish/v1/TaskService/Tasks", "#TaskCollection.TaskCollection", "Task Collection", members))
}

func (s *Server) getTask(w http.ResponseWriter, r *http.Request) {
	s.fw.mu.Lock()
	var doc map[string]any
	if tk, ok := s.fw.tasks[r.PathValue("task")]; ok {
		doc = tk.doc()
	}
	s.fw.mu.Unlock()
	if doc == nil {
		redfishError(w, http.StatusNotFound, "ResourceMissingAtURI", fmt.Sprintf("The resource at the URI %s was not found.", r.URL.Path))
		return
	}
	writeJSON(w, http.StatusOK, doc)
}

// doc is the Redfish Task document. Called with firmware.mu held.
func (tk *task) doc() map[string]any {
	d := odata(tk.path(), "#Task.v1_4_3.Task")
	d["Id"], d["Name"] = tk.id, "Firmware update task "+tk.id
	d["TaskState"], d["TaskStatus"], d["PercentComplete"] = tk.state, tk.status, tk.percent
	d["StartTime"] = tk.start.UTC().Format(time.RFC3339)
	if !tk.end.IsZero() {
		d["EndTime"] = tk.end.UTC().Format(time.RFC3339)
	}
	msgs := make([]any, 0, len(tk.messages))
	for _, m := range tk.messages {
		msgs = append(msgs, m)
	}
	d["Messages"] = msgs
	d["Payload"] = map[string]any{"HttpOperation": "POST", "TargetUri": tk.img.action}
	return d
}
