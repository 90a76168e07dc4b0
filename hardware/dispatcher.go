package hardware

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"

	"github.com/anvil-metal/anvil/protocol"
)

// Dispatcher routes steps to managers the way IPA's dispatch_to_managers
// does: most specific manager first, falling through on ErrNotSupported. It
// is built from an explicit list (no plugin discovery, no package state) and
// evaluates support once, at construction, as IPA caches it.
type Dispatcher struct {
	managers []ranked // sorted: support desc, then name asc
}

type ranked struct {
	m       Manager
	name    string
	version string
	support SupportLevel
}

// NewDispatcher evaluates every manager's support level, drops those with
// SupportNone and orders the rest most specific first. Managers must have
// distinct, non-empty names: the name is what the controller's cache and the
// fingerprint are keyed on.
func NewDispatcher(ctx context.Context, managers ...Manager) (*Dispatcher, error) {
	d := &Dispatcher{}
	seen := map[string]bool{}
	for _, m := range managers {
		if m == nil {
			return nil, errors.New("hardware: nil manager")
		}
		name := m.Name()
		if name == "" {
			return nil, fmt.Errorf("hardware: manager %T has an empty name", m)
		}
		if seen[name] {
			return nil, fmt.Errorf("hardware: two managers named %q", name)
		}
		seen[name] = true
		level := m.Support(ctx)
		if level <= SupportNone {
			continue
		}
		d.managers = append(d.managers, ranked{m: m, name: name, version: m.Version(), support: level})
	}
	if len(d.managers) == 0 {
		return nil, errors.New("hardware: no manager supports this machine")
	}
	slices.SortStableFunc(d.managers, func(a, b ranked) int {
		if a.support != b.support {
			return cmp.Compare(b.support, a.support)
		}
		return cmp.Compare(a.name, b.name)
	})
	return d, nil
}

// ManagerInfo describes one active manager.
type ManagerInfo struct {
	Name    string       `json:"name"`
	Version string       `json:"version"`
	Support SupportLevel `json:"support"`
}

// Managers lists the active managers in dispatch order.
func (d *Dispatcher) Managers() []ManagerInfo {
	out := make([]ManagerInfo, 0, len(d.managers))
	for _, r := range d.managers {
		out = append(out, ManagerInfo{Name: r.name, Version: r.version, Support: r.support})
	}
	return out
}

// Versions is IPA's get_current_versions: manager name → version.
func (d *Dispatcher) Versions() map[string]string {
	out := make(map[string]string, len(d.managers))
	for _, r := range d.managers {
		out[r.name] = r.version
	}
	return out
}

// candidate is a step offered by one manager, with what dedup needs.
type candidate struct {
	step    protocol.Step
	manager ranked
}

// better reports whether a should win over b under IPA's deduplicate_steps
// rule: higher support, then higher priority, then the alphabetically first
// manager name.
func better(a, b candidate) bool {
	if a.manager.support != b.manager.support {
		return a.manager.support > b.manager.support
	}
	if a.step.Priority != b.step.Priority {
		return a.step.Priority > b.step.Priority
	}
	return a.manager.name < b.manager.name
}

// Steps returns the merged catalogue: for each kind, one step per name, in
// execution order (protocol.SortSteps).
func (d *Dispatcher) Steps(ctx context.Context) Catalogue {
	per := map[Kind][]candidate{}
	for _, r := range d.managers {
		cat := r.m.Steps(ctx)
		for _, k := range []Kind{KindClean, KindDeploy} {
			for _, s := range cat.Of(k) {
				per[k] = append(per[k], candidate{step: s, manager: r})
			}
		}
	}
	return Catalogue{Clean: dedup(per[KindClean]), Deploy: dedup(per[KindDeploy])}
}

// StepsByManager is Steps for one kind in IPA's get_clean_steps shape: the
// winning steps grouped by the name of the manager that offers them.
func (d *Dispatcher) StepsByManager(ctx context.Context, kind Kind) map[string][]protocol.Step {
	var cands []candidate
	for _, r := range d.managers {
		for _, s := range r.m.Steps(ctx).Of(kind) {
			cands = append(cands, candidate{step: s, manager: r})
		}
	}
	out := map[string][]protocol.Step{}
	for _, c := range winners(cands) {
		out[c.manager.name] = append(out[c.manager.name], c.step)
	}
	for _, steps := range out {
		protocol.SortSteps(steps)
	}
	return out
}

func dedup(cands []candidate) []protocol.Step {
	best := winners(cands)
	out := make([]protocol.Step, 0, len(best))
	for _, c := range best {
		out = append(out, c.step)
	}
	protocol.SortSteps(out)
	return out
}

// winners keeps one candidate per step name, the better one.
func winners(cands []candidate) map[string]candidate {
	best := map[string]candidate{}
	for _, c := range cands {
		if cur, ok := best[c.step.Step]; !ok || better(c, cur) {
			best[c.step.Step] = c
		}
	}
	return best
}

// Fingerprint identifies the set of managers, their versions and the merged
// catalogue. The controller stores it with its cached step list and the agent
// can compare before running a step (IPA's hardware_manager_version check,
// but also covering catalogue changes that forgot a version bump).
func (d *Dispatcher) Fingerprint(ctx context.Context) string {
	h := sha256.New()
	names := make([]string, 0, len(d.managers))
	for _, r := range d.managers {
		names = append(names, r.name+"\x00"+r.version)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(h, "%s\n", n)
	}
	cat := d.Steps(ctx)
	// encoding/json sorts map keys, and the step lists are already in a
	// total order, so the encoding is canonical.
	b, err := json.Marshal(cat)
	if err != nil {
		// Steps hold only JSON-safe types except Args, which catalogues do
		// not carry; fall back to the printed form rather than panic.
		fmt.Fprintf(h, "%v", cat)
	} else {
		h.Write(b)
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}

// Run dispatches a step by name to the most specific manager that lists it
// for this kind, falling through on ErrNotSupported. Arguments are checked
// against the merged step's argsinfo first. Errors that cross the wire are
// *protocol.Error; others are returned wrapped as the manager produced them.
func (d *Dispatcher) Run(ctx context.Context, kind Kind, name string, args map[string]any, progress ProgressFunc) (any, error) {
	if !kind.Valid() {
		return nil, &protocol.Error{Type: protocol.ErrTypeInvalidArgs, Code: 400, Message: fmt.Sprintf("unknown step kind %q", kind)}
	}
	var known *protocol.Step
	for _, s := range d.Steps(ctx).Of(kind) {
		if s.Step == name {
			known = &s
			break
		}
	}
	if known == nil {
		return nil, &protocol.Error{Type: protocol.ErrTypeUnknownStep, Code: 404,
			Message: fmt.Sprintf("no hardware manager offers %s step %q", kind, name)}
	}
	if err := known.CheckArgs(args); err != nil {
		return nil, &protocol.Error{Type: protocol.ErrTypeInvalidArgs, Code: 400, Message: err.Error()}
	}
	var tried []string
	for _, r := range d.managers {
		step, ok := findStep(r.m.Steps(ctx).Of(kind), name)
		if !ok {
			continue
		}
		step.Args = args
		tried = append(tried, r.name)
		res, err := r.m.Run(ctx, kind, step, args, progress)
		if errors.Is(err, ErrNotSupported) {
			continue
		}
		return res, err
	}
	return nil, &protocol.Error{Type: protocol.ErrTypeNotSupported, Code: 400,
		Message: fmt.Sprintf("no hardware manager could run %s step %q", kind, name),
		Details: fmt.Sprintf("tried: %v", tried)}
}

func findStep(steps []protocol.Step, name string) (protocol.Step, bool) {
	for _, s := range steps {
		if s.Step == name {
			return s, true
		}
	}
	return protocol.Step{}, false
}

// CheckFingerprint compares the fingerprint the controller computed its
// step plan from with the current one, as IPA compares clean_version before
// executing a step. An empty want skips the check. A mismatch is a
// protocol.Error of type VersionMismatch so the controller refreshes its
// cached catalogue instead of running a step that may have changed.
func (d *Dispatcher) CheckFingerprint(ctx context.Context, want string) error {
	if want == "" {
		return nil
	}
	if have := d.Fingerprint(ctx); have != want {
		return &protocol.Error{Type: protocol.ErrTypeVersionMismatch, Code: 409,
			Message: "hardware managers changed since the step list was cached",
			Details: fmt.Sprintf("cached %s, current %s", want, have)}
	}
	return nil
}
