package hardware

import (
	"context"
	"sync"

	"github.com/anvil-metal/anvil/protocol"
)

// FakeManager is a Manager for tests of code that consumes managers (the
// dispatcher here, the agent's executor elsewhere). RunFunc decides what Run
// does; Calls records every step it was asked to run.
type FakeManager struct {
	ManagerName    string
	ManagerVersion string
	Level          SupportLevel
	Catalogue      Catalogue
	RunFunc        func(ctx context.Context, kind Kind, step protocol.Step, args map[string]any, progress ProgressFunc) (any, error)

	mu    sync.Mutex
	calls []string
}

var _ Manager = (*FakeManager)(nil)

// Name implements Manager.
func (f *FakeManager) Name() string { return f.ManagerName }

// Version implements Manager.
func (f *FakeManager) Version() string { return f.ManagerVersion }

// Support implements Manager.
func (f *FakeManager) Support(context.Context) SupportLevel { return f.Level }

// Steps implements Manager.
func (f *FakeManager) Steps(context.Context) Catalogue { return f.Catalogue }

// Run implements Manager: it records the call and delegates to RunFunc, or
// returns ErrNotSupported when RunFunc is nil.
func (f *FakeManager) Run(ctx context.Context, kind Kind, step protocol.Step, args map[string]any, progress ProgressFunc) (any, error) {
	f.mu.Lock()
	f.calls = append(f.calls, string(kind)+":"+step.Step)
	f.mu.Unlock()
	if f.RunFunc == nil {
		return nil, ErrNotSupported
	}
	return f.RunFunc(ctx, kind, step, args, progress)
}

// Calls returns the "kind:step" calls made so far.
func (f *FakeManager) Calls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.calls...)
}
