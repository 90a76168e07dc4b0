package bmc

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"
)

// Fake is the in-memory BMC behind the fake-hardware type: power and boot
// changes apply at once and can be read back. Nodes are keyed by Target.ID
// and start powered off. Knobs make it misbehave like real BMCs so that
// controller tests exercise the Manager's retry and verify paths.
//
// A Fake is safe for concurrent use.
type Fake struct {
	mu     sync.Mutex
	nodes  map[string]*fakeNode
	images map[string]FakeFirmwareImage // firmware image URL -> what it flashes
	events fakeEvents                   // event subscriptions (events.go)
}

// FakeKnobs make a fake node misbehave.
type FakeKnobs struct {
	// FailAuth makes every command fail as if the password were wrong.
	FailAuth bool
	// TransientErrors makes the next N commands fail with a "busy" error.
	TransientErrors int
	// IgnoreBootOverride accepts boot device changes without applying them.
	IgnoreBootOverride bool
	// IgnorePower accepts power changes without applying them.
	IgnorePower bool
	// IgnoreBIOS accepts BIOS settings and shows them pending but never
	// applies them at boot (iDRAC without an apply time).
	IgnoreBIOS bool
	// IgnoreMedia accepts a virtual media insert into a slot without
	// doing it (a BMC that answers 204 and mounts nothing).
	IgnoreMedia bool
	// OnCall, if set, runs at the start of every command (outside the
	// Fake's lock), e.g. to block or to observe concurrency.
	OnCall func(node, command string)
}

// FakeNodeState is what a fake node looks like now.
type FakeNodeState struct {
	Power PowerState
	Boot  BootDevice
	Opts  BootOptions
	// Media is the URL of the inserted virtual CD ("": none).
	Media string
	// Health is what the BMC reports of the hardware ("": nothing).
	Health Health
	// SEL is the node's System Event Log; NMIs counts the NMIs injected
	// (each also adds a SEL entry).
	SEL  []SELEntry
	NMIs int
}

// FakeCall records one command the Manager sent to a fake node.
type FakeCall struct {
	Command    string
	Start, End time.Time
}

type fakeNode struct {
	state     FakeNodeState
	knobs     FakeKnobs
	calls     []FakeCall
	bios      fakeBIOS
	fw        fakeFirmware
	fwKnobs   FakeFirmwareKnobs
	inventory *Inventory // what an inspection reports (inspect.go)
}

// NewFake returns an empty Fake.
func NewFake() *Fake {
	return &Fake{nodes: map[string]*fakeNode{}}
}

func (f *Fake) node(id string) *fakeNode {
	n, ok := f.nodes[id]
	if !ok {
		n = &fakeNode{state: FakeNodeState{Power: PowerOff, Boot: BootDisk}, bios: newFakeBIOS(), fw: newFakeFirmware()}
		f.nodes[id] = n
	}
	return n
}

// State returns the node's current state.
func (f *Fake) State(id string) FakeNodeState {
	f.mu.Lock()
	defer f.mu.Unlock()
	st := f.node(id).state
	st.SEL = slices.Clone(st.SEL)
	return st
}

// SetState overrides the node's state (e.g. a human pressed the button).
func (f *Fake) SetState(id string, s FakeNodeState) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.node(id).state = s
}

// SetKnobs replaces the node's knobs.
func (f *Fake) SetKnobs(id string, k FakeKnobs) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.node(id).knobs = k
}

// Calls returns the commands sent to the node so far, in order.
func (f *Fake) Calls(id string) []FakeCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]FakeCall(nil), f.node(id).calls...)
}

var errFakeBusy = errors.New("fake BMC busy")

// do runs one command against node id with the knobs applied.
func (f *Fake) do(id, command string, fn func(*FakeNodeState, FakeKnobs) error) error {
	return f.doNode(id, command, func(n *fakeNode) error { return fn(&n.state, n.knobs) })
}

// doNode is do with the whole node.
func (f *Fake) doNode(id, command string, fn func(*fakeNode) error) error {
	f.mu.Lock()
	hook := f.node(id).knobs.OnCall
	f.mu.Unlock()
	start := time.Now()
	if hook != nil {
		hook(id, command)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	n := f.node(id)
	defer func() { n.calls = append(n.calls, FakeCall{Command: command, Start: start, End: time.Now()}) }()
	switch {
	case n.knobs.FailAuth:
		return classified(kindAuth, errors.New("fake BMC: invalid credentials"))
	case n.knobs.TransientErrors > 0:
		n.knobs.TransientErrors--
		return classified(kindBusy, errFakeBusy)
	case time.Now().Before(n.fw.offlineUntil):
		return classified(kindUnreachable, errors.New("fake BMC: restarting after its firmware update"))
	}
	return fn(n)
}

// open implements opener: a fake "session" is just the node id.
func (f *Fake) open(_ context.Context, t Target) (session, error) {
	if t.ID == "" {
		return nil, fmt.Errorf("%w: fake-hardware target without an ID", ErrInvalidDriverInfo)
	}
	s := fakeSession{f: f, id: t.ID}
	return s, f.do(t.ID, "open", func(*FakeNodeState, FakeKnobs) error { return nil })
}

type fakeSession struct {
	f  *Fake
	id string
}

func (s fakeSession) provider() string      { return "fake" }
func (s fakeSession) close(context.Context) {}

func (s fakeSession) powerState(context.Context) (PowerState, error) {
	var p PowerState
	err := s.f.do(s.id, "power_state", func(st *FakeNodeState, _ FakeKnobs) error {
		p = st.Power
		return nil
	})
	return p, err
}

func (s fakeSession) setPower(_ context.Context, p primitive) error {
	return s.f.doNode(s.id, "set_power "+string(p), func(n *fakeNode) error {
		st := &n.state
		if n.knobs.IgnorePower {
			return nil
		}
		switch p {
		case primOn, primReset, primCycle:
			if p != primOn || st.Power != PowerOn {
				n.bios.boot(n.knobs) // the BIOS applies its settings at POST
				n.fw.boot()          // and staged firmware activates
			}
			st.Power = PowerOn
		case primOff, primSoft:
			st.Power = PowerOff
		default:
			return fmt.Errorf("%w: power command %q", ErrUnsupported, p)
		}
		return nil
	})
}

func (s fakeSession) setBoot(_ context.Context, dev BootDevice, opts BootOptions) error {
	return s.f.do(s.id, "set_boot "+string(dev), func(st *FakeNodeState, k FakeKnobs) error {
		if !k.IgnoreBootOverride {
			st.Boot, st.Opts = dev, opts
		}
		return nil
	})
}

func (s fakeSession) bootOverride(context.Context) (bootOverride, error) {
	var o bootOverride
	err := s.f.do(s.id, "get_boot", func(st *FakeNodeState, _ FakeKnobs) error {
		o = bootOverride{Device: st.Boot, Opts: st.Opts, OptsKnown: true}
		return nil
	})
	return o, err
}
