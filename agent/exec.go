package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"strings"
	"sync"

	"github.com/anvil-metal/anvil/hardware"
	"github.com/anvil-metal/anvil/protocol"
)

// recentIDs is how many command ids the executor remembers to refuse a
// redelivered command; the controller re-sends a command only until it sees
// it RUNNING in a heartbeat, so a handful is plenty.
const recentIDs = 32

// work is what a command does; progress may be called from any goroutine.
type work func(ctx context.Context, progress hardware.ProgressFunc) (any, error)

// startOutcome says what the executor did with a command.
type startOutcome int

const (
	started   startOutcome = iota
	duplicate              // id already run (or running): not run again
	busy                   // another command is running: not started
)

// executor runs one command at a time in the background and holds the
// status the heartbeats report: the running command with its progress, or
// the last final one until the controller acknowledges it.
type executor struct {
	log   *slog.Logger
	clock Clock

	mu      sync.Mutex
	status  *protocol.CommandStatus // nil: nothing to report
	running bool
	recent  []string
	// finished gets the id of each command that ends, so the loop can
	// heartbeat at once instead of waiting out the interval. Buffered: a
	// missed wake-up only delays the report to the next interval.
	finished chan string
	wg       sync.WaitGroup
	// cancel stops the running command (an operator's abort); nil when
	// none runs.
	cancel context.CancelFunc
}

func newExecutor(log *slog.Logger, clock Clock) *executor {
	return &executor{log: log, clock: clock, finished: make(chan string, 1)}
}

// start runs w for cmd in a new goroutine unless the id was seen already or
// a command is running.
func (e *executor) start(ctx context.Context, cmd *protocol.Command, w work) startOutcome {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, id := range e.recent {
		if id == cmd.ID {
			return duplicate
		}
	}
	if e.running {
		return busy
	}
	if s := e.status; s != nil && s.State != protocol.CommandRunning {
		// The controller moved on without acknowledging; say so, since the
		// result will not be reported again.
		e.log.WarnContext(ctx, "new command replaces an unacknowledged result",
			"command_id", cmd.ID, "command", cmd.Name, "previous_id", s.ID, "previous", s.Name, "previous_state", s.State)
	}
	e.recent = append(e.recent, cmd.ID)
	if len(e.recent) > recentIDs {
		e.recent = e.recent[len(e.recent)-recentIDs:]
	}
	e.running = true
	e.status = &protocol.CommandStatus{ID: cmd.ID, Name: cmd.Name, State: protocol.CommandRunning, StartedAt: e.clock.Now().UTC()}
	cctx, cancel := context.WithCancel(ctx)
	e.cancel = cancel
	e.wg.Add(1)
	go e.run(cctx, cmd, w)
	return started
}

// abort stops the running command id at its next safe point: the work
// sees its context cancelled (an erase stops between chunks; a command
// already sent to a drive completes) and reports what it did so far. It
// reports whether such a command was running.
func (e *executor) abort(id string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.running || e.status == nil || e.status.ID != id || e.cancel == nil {
		return false
	}
	e.cancel()
	return true
}

func (e *executor) run(ctx context.Context, cmd *protocol.Command, w work) {
	defer e.wg.Done()
	log := e.log.With("command_id", cmd.ID, "command", cmd.Name)
	if cmd.Step != nil {
		log = log.With("step", cmd.Step.Step)
	}
	log.InfoContext(ctx, "command started")
	res, err := e.call(ctx, cmd, w)
	// A failed step's result is kept as a successful one's is: the erase
	// and RAID steps and write_image return what they planned and did
	// (per device: erased, skipped or failed and why) with their error,
	// and that is what an operator needs to see why the step failed.
	raw, summary, encErr := describe(res)
	if encErr != nil {
		encErr = fmt.Errorf("encode result of %s: %w", cmd.Name, encErr)
		if err == nil {
			err = encErr
		} else {
			log.WarnContext(ctx, "partial result of a failed command dropped", "err", encErr)
		}
	}
	now := e.clock.Now().UTC()
	e.mu.Lock()
	s := e.status
	s.FinishedAt = &now
	if err != nil {
		s.State, s.Error, s.Result, s.Summary = protocol.CommandFailed, wireError(err), raw, summary
		log.ErrorContext(ctx, "command failed", "error_type", s.Error.Type, "err", err, "summary", summary)
	} else {
		s.State, s.Result, s.Summary = protocol.CommandSucceeded, raw, summary
		log.InfoContext(ctx, "command succeeded", "duration", now.Sub(s.StartedAt).String())
	}
	e.running = false
	if e.cancel != nil {
		e.cancel()
		e.cancel = nil
	}
	e.mu.Unlock()
	select {
	case e.finished <- cmd.ID:
	default:
	}
}

// summarizer is a step result that can say in one line what it did.
type summarizer interface{ Summary() string }

// describe encodes a command's result (a successful one or the partial
// result of a failed one) and its one-line summary. No result, or one that
// encodes as null (a nil pointer), gives neither. A result that panics
// while being encoded or summarised is an error: the agent must outlive a
// bug in a hardware manager's result type too.
func describe(res any) (raw json.RawMessage, summary string, err error) {
	if res == nil {
		return nil, "", nil
	}
	defer func() {
		if r := recover(); r != nil {
			raw, summary, err = nil, "", fmt.Errorf("panic: %v", r)
		}
	}()
	if raw, err = json.Marshal(res); err != nil {
		return nil, "", err
	}
	if string(raw) == "null" {
		return nil, "", nil
	}
	if s, ok := res.(summarizer); ok {
		summary = truncate(s.Summary(), protocol.MaxSummary)
	}
	return raw, summary, nil
}

// truncate cuts s to at most n bytes on a rune boundary, marking the cut.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	const more = " …"
	// a rune cut in half at the end is dropped
	return strings.ToValidUTF8(s[:n-len(more)], "") + more
}

// call runs w, turning a panic into a failure: the agent must outlive any
// bug in a hardware manager.
func (e *executor) call(ctx context.Context, cmd *protocol.Command, w work) (res any, err error) {
	defer func() {
		if r := recover(); r != nil {
			e.log.ErrorContext(ctx, "command panicked", "command_id", cmd.ID, "panic", r, "stack", string(debug.Stack()))
			err = &protocol.Error{Type: protocol.ErrTypeInternal, Code: 500, Message: fmt.Sprintf("%s panicked: %v", cmd.Name, r)}
		}
	}()
	return w(ctx, func(p hardware.Progress) { e.progress(cmd.ID, p) })
}

// progress records the latest report of the running command, clamped so
// the heartbeat stays valid whatever a manager reports.
func (e *executor) progress(id string, p hardware.Progress) {
	p.Percent = min(max(p.Percent, 0), 100)
	if p.BytesTotal > 0 && p.BytesDone > p.BytesTotal {
		p.BytesDone = p.BytesTotal
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.status != nil && e.status.ID == id && e.running {
		e.status.Progress = &p
	}
}

// current returns a copy of the status to report, or nil.
func (e *executor) current() *protocol.CommandStatus {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.status == nil {
		return nil
	}
	s := *e.status
	if s.Progress != nil {
		p := *s.Progress
		s.Progress = &p
	}
	if s.FinishedAt != nil {
		t := *s.FinishedAt
		s.FinishedAt = &t
	}
	s.Result = append(json.RawMessage(nil), s.Result...)
	if len(s.Result) == 0 {
		s.Result = nil
	}
	return &s
}

// ack drops a final status the controller has recorded. Acks of a running
// or unknown command are ignored.
func (e *executor) ack(id string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.status != nil && e.status.ID == id && !e.running {
		e.status = nil
		return true
	}
	return false
}

// wait blocks until the running command (if any) returns; for tests and
// shutdown.
func (e *executor) wait() { e.wg.Wait() }

// wireError turns a step's error into the typed error the controller sees.
func wireError(err error) *protocol.Error {
	var pe *protocol.Error
	switch {
	case errors.As(err, &pe):
		return pe
	case errors.Is(err, hardware.ErrProtected):
		return &protocol.Error{Type: protocol.ErrTypeProtectedDevice, Code: 403, Message: err.Error()}
	case errors.Is(err, context.Canceled):
		return &protocol.Error{Type: protocol.ErrTypeAborted, Code: 500, Message: err.Error()}
	}
	return protocol.AsError(err)
}
