// Package hardware holds the agent's knowledge of the machine it runs on: the
// Manager model (IPA's hardware managers, explicit instead of plugin-loaded),
// the Dispatcher that merges and routes steps between managers, and the Guard
// every destructive operation must pass.
//
// Concrete work lives in sub-packages: disk (discovery from a sysfs root),
// erase, raid, imagewrite, and generic (the GenericManager wiring steps to
// them).
package hardware

import (
	"context"
	"errors"
	"fmt"

	"github.com/anvil-metal/anvil/protocol"
)

// ErrNotSupported is returned by Manager.Run when the manager does not
// implement the step, or cannot run it on this hardware; the Dispatcher then
// falls through to the next, more generic manager (IPA's
// IncompatibleHardwareMethodError).
var ErrNotSupported = errors.New("hardware: step not supported by this manager")

// SupportLevel says how well a manager fits this machine. Managers with
// SupportNone are ignored; higher levels are consulted first.
type SupportLevel int

// Support levels, with IPA's values so they read the same in logs and caches.
const (
	SupportNone            SupportLevel = 0
	SupportGeneric         SupportLevel = 1
	SupportMainline        SupportLevel = 2
	SupportServiceProvider SupportLevel = 3
)

func (l SupportLevel) String() string {
	switch l {
	case SupportNone:
		return "none"
	case SupportGeneric:
		return "generic"
	case SupportMainline:
		return "mainline"
	case SupportServiceProvider:
		return "service_provider"
	}
	return fmt.Sprintf("support(%d)", int(l))
}

// Kind is the kind of step list a step belongs to. The same step name may
// exist in both lists with different priorities (erase_devices_metadata is 99
// for cleaning and 0 for deploy in IPA).
type Kind string

// Step kinds.
const (
	KindClean  Kind = "clean"
	KindDeploy Kind = "deploy"
)

// Valid reports whether k is a known kind.
func (k Kind) Valid() bool { return k == KindClean || k == KindDeploy }

// Catalogue is the set of steps one manager (or the merged dispatcher)
// offers, by kind.
type Catalogue struct {
	Clean  []protocol.Step `json:"clean"`
	Deploy []protocol.Step `json:"deploy"`
}

// Of returns the list for kind k.
func (c Catalogue) Of(k Kind) []protocol.Step {
	switch k {
	case KindClean:
		return c.Clean
	case KindDeploy:
		return c.Deploy
	}
	return nil
}

// Progress is one progress report of a running step. Percent is 0–100;
// BytesDone/BytesTotal are zero when the step does not move bytes. It is
// the heartbeat's own type: a manager reports what the controller reads.
type Progress = protocol.Progress

// ProgressFunc receives progress reports; the agent stores the latest one and
// puts it in its next heartbeat. It must be cheap and safe for concurrent use
// (erase reports from several devices at once). A nil ProgressFunc is allowed
// wherever one is accepted.
type ProgressFunc func(Progress)

// Report calls f if it is not nil, so callers need no nil checks.
func (f ProgressFunc) Report(p Progress) {
	if f != nil {
		f(p)
	}
}

// Manager is one hardware manager. Implementations must be safe to call
// concurrently for Name/Version/Support/Steps; Run is called for one step at
// a time by the agent.
type Manager interface {
	// Name identifies the manager in catalogues and fingerprints
	// ("generic_hardware_manager").
	Name() string
	// Version changes whenever the manager's steps or their behaviour change,
	// so a controller's cached catalogue is invalidated.
	Version() string
	// Support evaluates how well the manager fits this machine.
	Support(ctx context.Context) SupportLevel
	// Steps lists the clean and deploy steps the manager offers.
	Steps(ctx context.Context) Catalogue
	// Run executes a step. It returns ErrNotSupported (possibly wrapped) to
	// let a more generic manager handle it. The result must be
	// JSON-serialisable.
	Run(ctx context.Context, kind Kind, step protocol.Step, args map[string]any, progress ProgressFunc) (any, error)
}
