package ipa

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
)

// Command statuses, IPA's strings. VersionMismatch keeps IPA's historical
// text, which Ironic 21.4 accepts alongside VERSION_MISMATCH.
const (
	StatusRunning         = "RUNNING"
	StatusSucceeded       = "SUCCEEDED"
	StatusFailed          = "FAILED"
	StatusVersionMismatch = "CLEAN_VERSION_MISMATCH"
)

// RESTError is IPA's serialised exception (errors.RESTError): what a
// failed command carries in command_error. Ironic shows Details (or
// Message) in the node's last_error.
type RESTError struct {
	Type    string `json:"type"`
	Code    int    `json:"code"`
	Message string `json:"message"`
	Details string `json:"details"`
}

func (e *RESTError) Error() string { return e.Message + ": " + e.Details }

// fault is an error answered over HTTP instead of being recorded as a
// command result, in the WSME shape IPA's API uses:
// {"faultcode": "Client", "faultstring": "..."}.
type fault struct {
	status int
	msg    string
}

func (f *fault) Error() string { return f.msg }

// The faults IPA answers, with its texts: Ironic matches some of them
// ("agent is busy", "Unknown command", "agent_token").
func errUnknownCommand(name string) *fault {
	return &fault{400, "Invalid command: Unknown command: " + name}
}

func errUnknownExtension(ext string) *fault {
	return &fault{404, fmt.Sprintf("Not found: Extension with id %s not found.", ext)}
}

func errBadParams(format string, a ...any) *fault {
	return &fault{400, "Invalid command parameters: " + fmt.Sprintf(format, a...)}
}

// Result is one command's state, serialised as IPA's BaseCommandResult.
// Params are only shown to callers holding the agent token (see Server).
type Result struct {
	ID     string         `json:"id"`
	Name   string         `json:"command_name"`
	Params map[string]any `json:"command_params,omitempty"`
	Status string         `json:"command_status"`
	Error  *RESTError     `json:"command_error"`
	Result any            `json:"command_result"`
}

// handler runs one command. validate runs before the command is recorded
// and its error is answered over HTTP (IPA's async_command validators);
// run's error fails the command.
type handler struct {
	async    bool
	validate func(params map[string]any) error
	run      func(ctx context.Context, params map[string]any) (any, error)
}

// entry is a Result plus what only the executor needs.
type entry struct {
	res  Result
	done chan struct{}
}

// Commands executes IPA commands one at a time and keeps their results, in
// order, for the life of the agent (IPA's ExecuteCommandMixin).
type Commands struct {
	ctx        context.Context // async commands run under it
	handlers   map[string]handler
	extensions map[string]bool // known extension names, for IPA's two "unknown" errors
	log        *slog.Logger
	onDone     func() // an async command finished: heartbeat soon

	exec    sync.Mutex // one Execute at a time; sync commands run under it
	mu      sync.Mutex // guards order and byID
	order   []*entry
	byID    map[string]*entry
	unknown []string // names answered with "unknown command", for the log and tests
}

func newCommands(ctx context.Context, handlers map[string]handler, log *slog.Logger, onDone func()) *Commands {
	ext := map[string]bool{}
	for _, e := range ipaExtensions {
		ext[e] = true
	}
	for name := range handlers {
		e, _, _ := strings.Cut(name, ".")
		ext[e] = true
	}
	return &Commands{ctx: ctx, handlers: handlers, extensions: ext, log: log, onDone: onDone, byID: map[string]*entry{}}
}

// ipaExtensions are the extensions IPA 2023.1 loads plus system: a method
// missing from one of them is "Unknown command" (400), an extension outside
// them "not found" (404), as IPA answers.
var ipaExtensions = [...]string{"standby", "clean", "deploy", "flow", "image", "log", "rescue", "poll", "system"}

func newID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24)
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// Execute runs the named command ("extension.method"). It returns the
// recorded result (running, for async commands) or a *fault for requests
// IPA refuses without recording them.
func (c *Commands) Execute(name string, params map[string]any) (*Result, <-chan struct{}, error) {
	c.exec.Lock()
	defer c.exec.Unlock()
	ext, method, ok := strings.Cut(name, ".")
	if !ok || ext == "" || method == "" {
		return nil, nil, &fault{400, "Invalid command: Command name must be of the form <extension>.<name>"}
	}
	c.mu.Lock()
	if n := len(c.order); n > 0 && c.order[n-1].res.Status == StatusRunning {
		last := c.order[n-1].res.Name
		c.mu.Unlock()
		return nil, nil, &fault{409, "Agent is busy: executing command " + last}
	}
	c.mu.Unlock()
	h, known := c.handlers[name]
	if !known {
		c.mu.Lock()
		c.unknown = append(c.unknown, name)
		c.mu.Unlock()
		c.log.Warn("ipa: unknown command", "command", name)
		if !c.extensions[ext] {
			return nil, nil, errUnknownExtension(ext)
		}
		return nil, nil, errUnknownCommand(method)
	}
	if h.validate != nil {
		if err := h.validate(params); err != nil {
			return nil, nil, asFault(err)
		}
	}
	// command_name is the method alone, as IPA records it: Ironic matches
	// "execute_clean_step", not "clean.execute_clean_step".
	e := &entry{res: Result{ID: newID(), Name: method, Params: params, Status: StatusRunning}, done: make(chan struct{})}
	c.log.Info("ipa: command", "command", name, "id", e.res.ID, "async", h.async)
	if !h.async {
		out, err := h.run(c.ctx, params)
		c.finish(e, out, err)
		c.record(e)
		return c.snapshot(e), e.done, nil
	}
	c.record(e)
	go func() {
		out, err := h.run(c.ctx, params)
		c.finish(e, out, err)
		if c.onDone != nil {
			c.onDone()
		}
	}()
	return c.snapshot(e), e.done, nil
}

// asFault keeps faults and turns other validation errors into IPA's
// InvalidCommandParamsError.
func asFault(err error) *fault {
	var f *fault
	if errors.As(err, &f) {
		return f
	}
	return errBadParams("%s", err)
}

func (c *Commands) record(e *entry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.order = append(c.order, e)
	c.byID[e.res.ID] = e
}

// finish records the outcome; a *versionMismatch error gets IPA's own
// status so Ironic refreshes its cached steps instead of failing.
func (c *Commands) finish(e *entry, out any, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	defer close(e.done)
	if err == nil {
		e.res.Status, e.res.Result = StatusSucceeded, out
		c.log.Info("ipa: command succeeded", "command", e.res.Name, "id", e.res.ID)
		return
	}
	e.res.Status, e.res.Error = StatusFailed, toRESTError(err)
	var vm *versionMismatch
	if errors.As(err, &vm) {
		e.res.Status = StatusVersionMismatch
	}
	c.log.Error("ipa: command failed", "command", e.res.Name, "id", e.res.ID, "err", err)
}

func (c *Commands) snapshot(e *entry) *Result {
	c.mu.Lock()
	defer c.mu.Unlock()
	r := e.res
	return &r
}

// Get returns a command's result and a channel closed when it is done.
func (c *Commands) Get(id string) (*Result, <-chan struct{}, bool) {
	c.mu.Lock()
	e, ok := c.byID[id]
	c.mu.Unlock()
	if !ok {
		return nil, nil, false
	}
	return c.snapshot(e), e.done, true
}

// List returns every result, oldest first.
func (c *Commands) List() []Result {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]Result, 0, len(c.order))
	for _, e := range c.order {
		out = append(out, e.res)
	}
	return out
}

// Unknown lists the command names answered with an "unknown" error.
func (c *Commands) Unknown() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.unknown...)
}
