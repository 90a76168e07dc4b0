// Package state is the node provision state machine of Ironic 21.4: the 24
// states, the 63 transitions between them and the API verbs that drive them;
// the hold states Ironic added at API 1.85 (see holdTransitions), the
// servicing states of API 1.87 (serviceTransitions) and the abort in wait
// call-back of API 1.110 (laterTransitions); plus anvil's documented
// extensions (see extensions).
// It is pure (no I/O) so it can be tested exhaustively and shared by the API
// layer (is this verb allowed now?) and the conductor (where does this go?).
package state

import "fmt"

// State is a provision state as it appears on the wire.
type State string

// The provision states (ironic/common/states.py, 21.4).
const (
	Enroll         State = "enroll"
	Verifying      State = "verifying"
	Manageable     State = "manageable"
	Inspecting     State = "inspecting"
	InspectWait    State = "inspect wait"
	InspectFailed  State = "inspect failed"
	Available      State = "available"
	Deploying      State = "deploying"
	DeployWait     State = "wait call-back"
	DeployFailed   State = "deploy failed"
	Active         State = "active"
	Deleting       State = "deleting"
	Cleaning       State = "cleaning"
	CleanWait      State = "clean wait"
	CleanFailed    State = "clean failed"
	Error          State = "error"
	Adopting       State = "adopting"
	AdoptFailed    State = "adopt failed"
	Rescuing       State = "rescuing"
	RescueWait     State = "rescue wait"
	RescueFailed   State = "rescue failed"
	Rescue         State = "rescue"
	Unrescuing     State = "unrescuing"
	UnrescueFailed State = "unrescue failed"
	// The hold states (Ironic 22.1, API 1.85): a hold step paused the
	// flow until an operator sends unhold (or abort).
	CleanHold  State = "clean hold"
	DeployHold State = "deploy hold"
	// The servicing states (Ironic 23.0, API 1.87): steps run on an
	// active node, which returns to active (servicing.rst).
	Servicing     State = "servicing"
	ServiceWait   State = "service wait"
	ServiceFailed State = "service failed"
	ServiceHold   State = "service hold"
	NoState       State = "" // shown as null in target fields
)

// Event drives a transition. Verbs sent by clients map to events (see Verbs);
// done, fail, wait and resume are internal to the conductor.
type Event string

// Events of the machine.
const (
	EvManage   Event = "manage"
	EvProvide  Event = "provide"
	EvClean    Event = "clean"
	EvInspect  Event = "inspect"
	EvAdopt    Event = "adopt"
	EvDeploy   Event = "deploy"
	EvRebuild  Event = "rebuild"
	EvDelete   Event = "delete"
	EvAbort    Event = "abort"
	EvRescue   Event = "rescue"
	EvUnrescue Event = "unrescue"
	EvDone     Event = "done"
	EvFail     Event = "fail"
	EvWait     Event = "wait"
	EvResume   Event = "resume"
	EvHold     Event = "hold"    // internal: a hold step was reached (1.85)
	EvUnhold   Event = "unhold"  // the unhold verb (1.85)
	EvService  Event = "service" // the service verb (1.87)
)

type edge struct {
	from State
	ev   Event
}

// transitions is the full 21.4 table (63 entries); testdata/statemachine
// holds the same table and the tests check both agree.
var transitions = map[edge]State{
	{Enroll, EvManage}:           Verifying,
	{Verifying, EvDone}:          Manageable,
	{Verifying, EvFail}:          Enroll,
	{Manageable, EvProvide}:      Cleaning,
	{Manageable, EvClean}:        Cleaning,
	{Manageable, EvInspect}:      Inspecting,
	{Manageable, EvAdopt}:        Adopting,
	{Available, EvDeploy}:        Deploying,
	{Available, EvManage}:        Manageable,
	{Deploying, EvWait}:          DeployWait,
	{Deploying, EvDone}:          Active,
	{Deploying, EvFail}:          DeployFailed,
	{DeployWait, EvResume}:       Deploying,
	{DeployWait, EvFail}:         DeployFailed,
	{DeployWait, EvDelete}:       Deleting,
	{DeployFailed, EvRebuild}:    Deploying,
	{DeployFailed, EvDeploy}:     Deploying,
	{DeployFailed, EvDelete}:     Deleting,
	{Active, EvRebuild}:          Deploying,
	{Active, EvDelete}:           Deleting,
	{Active, EvRescue}:           Rescuing,
	{Deleting, EvClean}:          Cleaning,
	{Deleting, EvFail}:           Error,
	{Cleaning, EvDone}:           Available,
	{Cleaning, EvManage}:         Manageable,
	{Cleaning, EvWait}:           CleanWait,
	{Cleaning, EvFail}:           CleanFailed,
	{CleanWait, EvResume}:        Cleaning,
	{CleanWait, EvFail}:          CleanFailed,
	{CleanWait, EvAbort}:         CleanFailed,
	{CleanFailed, EvManage}:      Manageable,
	{Error, EvRebuild}:           Deploying,
	{Error, EvDelete}:            Deleting,
	{Inspecting, EvDone}:         Manageable,
	{Inspecting, EvWait}:         InspectWait,
	{Inspecting, EvFail}:         InspectFailed,
	{InspectWait, EvDone}:        Manageable,
	{InspectWait, EvFail}:        InspectFailed,
	{InspectWait, EvAbort}:       InspectFailed,
	{InspectFailed, EvManage}:    Manageable,
	{InspectFailed, EvInspect}:   Inspecting,
	{Adopting, EvDone}:           Active,
	{Adopting, EvFail}:           AdoptFailed,
	{AdoptFailed, EvAdopt}:       Adopting,
	{AdoptFailed, EvManage}:      Manageable,
	{Rescuing, EvDone}:           Rescue,
	{Rescuing, EvWait}:           RescueWait,
	{Rescuing, EvFail}:           RescueFailed,
	{RescueWait, EvResume}:       Rescuing,
	{RescueWait, EvFail}:         RescueFailed,
	{RescueWait, EvAbort}:        RescueFailed,
	{RescueWait, EvDelete}:       Deleting,
	{Rescue, EvRescue}:           Rescuing,
	{Rescue, EvUnrescue}:         Unrescuing,
	{Rescue, EvDelete}:           Deleting,
	{RescueFailed, EvRescue}:     Rescuing,
	{RescueFailed, EvUnrescue}:   Unrescuing,
	{RescueFailed, EvDelete}:     Deleting,
	{Unrescuing, EvDone}:         Active,
	{Unrescuing, EvFail}:         UnrescueFailed,
	{UnrescueFailed, EvRescue}:   Rescuing,
	{UnrescueFailed, EvUnrescue}: Unrescuing,
	{UnrescueFailed, EvDelete}:   Deleting,
}

// holdTransitions are Ironic's transitions of the hold states (22.1, API
// 1.85; ironic/common/state_machine.py), kept apart from the 21.4 table;
// testdata/statemachine/hold.tsv holds the same table. unhold returns the
// node to its wait state, from which the flow goes on with the step after
// the hold step; abort fails the operation.
var holdTransitions = map[edge]State{
	{Deploying, EvHold}:    DeployHold,
	{DeployWait, EvHold}:   DeployHold,
	{DeployHold, EvUnhold}: DeployWait,
	{DeployHold, EvAbort}:  DeployFailed,
	{Cleaning, EvHold}:     CleanHold,
	{CleanWait, EvHold}:    CleanHold,
	{CleanHold, EvAbort}:   CleanFailed,
	{CleanHold, EvUnhold}:  CleanWait,
}

// serviceTransitions are Ironic's transitions of the servicing states
// (23.0, API 1.87; ironic/common/state_machine.py);
// testdata/statemachine/service.tsv holds the same table. An abort in
// service wait or service hold fails the operation and then aborts it
// out of service failed to active (Ironic's _do_abort makes both events).
var serviceTransitions = map[edge]State{
	{Servicing, EvDone}:        Active,
	{Active, EvService}:        Servicing,
	{Servicing, EvFail}:        ServiceFailed,
	{Servicing, EvWait}:        ServiceWait,
	{Servicing, EvHold}:        ServiceHold,
	{ServiceWait, EvHold}:      ServiceHold,
	{ServiceHold, EvService}:   Servicing,
	{ServiceHold, EvUnhold}:    ServiceWait,
	{ServiceWait, EvResume}:    Servicing,
	{ServiceWait, EvFail}:      ServiceFailed,
	{ServiceHold, EvFail}:      ServiceFailed,
	{ServiceWait, EvAbort}:     ServiceFailed,
	{ServiceHold, EvAbort}:     ServiceFailed,
	{ServiceFailed, EvService}: Servicing,
	{ServiceFailed, EvRescue}:  Rescuing,
	{ServiceFailed, EvWait}:    ServiceWait,
	{ServiceFailed, EvHold}:    ServiceHold,
	{ServiceFailed, EvDelete}:  Deleting,
	{ServiceFailed, EvAbort}:   Active,
	{ServiceWait, EvDelete}:    Deleting,
}

// laterTransitions are Ironic's transitions added after servicing:
// abort in wait call-back (API 1.110, deploy failed without automated
// cleaning); testdata/statemachine/later.tsv holds the same table. anvil
// had it before as an extension, which the API keeps below 1.110 (see
// docs/reference/agent-steps.md).
var laterTransitions = map[edge]State{
	{DeployWait, EvAbort}: DeployFailed,
}

// Extensions are anvil's transitions beyond Ironic's table, each
// documented in docs/reference/api.md. They are kept apart from transitions so the
// reference table stays exactly Ironic's (TestEveryReferenceTransition).
// There are none since Ironic 1.110 made abort in wait call-back its own.
var extensions = map[edge]State{}

// Extension reports whether from --ev--> is an anvil extension rather
// than one of Ironic's transitions.
func Extension(from State, ev Event) bool {
	_, ok := extensions[edge{from, ev}]
	return ok
}

// defaultTarget is what target_provision_state shows while a node is in a
// non-stable state (the FSM's "target" of each state).
var defaultTarget = map[State]State{
	Verifying: Manageable, Inspecting: Manageable, InspectWait: Manageable, InspectFailed: Manageable,
	Deploying: Active, DeployWait: Active, DeployFailed: Active,
	Deleting: Available, Cleaning: Available, CleanWait: Available, CleanFailed: Available,
	Adopting: Active, AdoptFailed: Active,
	Rescuing: Rescue, RescueWait: Rescue, RescueFailed: Rescue,
	Unrescuing: Active, UnrescueFailed: Active,
	CleanHold: Available, DeployHold: Active,
	Servicing: Active, ServiceWait: Active, ServiceFailed: Active, ServiceHold: Active,
}

// All lists every state, in the order of the reference table, then the
// hold states, then the servicing states.
func All() []State {
	return []State{Enroll, Verifying, Manageable, Inspecting, InspectWait, InspectFailed, Available,
		Deploying, DeployWait, DeployFailed, Active, Deleting, Cleaning, CleanWait, CleanFailed, Error,
		Adopting, AdoptFailed, Rescuing, RescueWait, RescueFailed, Rescue, Unrescuing, UnrescueFailed,
		CleanHold, DeployHold, Servicing, ServiceWait, ServiceFailed, ServiceHold}
}

// Valid reports whether s is one of the 30 states.
func Valid(s State) bool {
	for _, x := range All() {
		if x == s {
			return true
		}
	}
	return false
}

// ErrNotAllowed is returned (wrapped) when an event is not actionable.
type ErrNotAllowed struct {
	From  State
	Event Event
}

func (e *ErrNotAllowed) Error() string {
	return fmt.Sprintf("event %q is not allowed in state %q", e.Event, e.From)
}

// Next returns the state that event ev leads to from state from.
func Next(from State, ev Event) (State, error) {
	if to, ok := transitions[edge{from, ev}]; ok {
		return to, nil
	}
	for _, t := range []map[edge]State{holdTransitions, serviceTransitions, laterTransitions} {
		if to, ok := t[edge{from, ev}]; ok {
			return to, nil
		}
	}
	if to, ok := extensions[edge{from, ev}]; ok {
		return to, nil
	}
	return "", &ErrNotAllowed{From: from, Event: ev}
}

// Allowed reports whether ev is actionable in from.
func Allowed(from State, ev Event) bool {
	_, err := Next(from, ev)
	return err == nil
}

// DefaultTarget is the target_provision_state shown while in s (NoState for
// stable states).
func DefaultTarget(s State) State { return defaultTarget[s] }

// Stable states are resting points: no work runs for the node there.
func Stable(s State) bool {
	switch s {
	case Enroll, Manageable, Available, Active, Error, Rescue:
		return true
	}
	return false
}

// Waiting states wait for the agent (or an out-of-band poll); the node lock
// is released there.
func Waiting(s State) bool {
	return s == CleanWait || s == DeployWait || s == InspectWait || s == RescueWait || s == ServiceWait
}

// Failed states end in " failed".
func Failed(s State) bool {
	switch s {
	case DeployFailed, CleanFailed, InspectFailed, RescueFailed, UnrescueFailed, AdoptFailed, ServiceFailed:
		return true
	}
	return false
}

// Held states wait for an operator (unhold or abort): no work runs, no
// lock is held, and no timeout applies (Ironic's hold states have none).
// The agent stays up and heartbeats; the heartbeats are recorded only.
func Held(s State) bool {
	return s == CleanHold || s == DeployHold || s == ServiceHold
}

// Working states are transient states in which the conductor is doing work
// (and holds the node lock).
func Working(s State) bool {
	return !Stable(s) && !Waiting(s) && !Failed(s) && !Held(s)
}

// UpdateAllowed lists states where PATCH is allowed although a target is set.
func UpdateAllowed(s State) bool {
	switch s {
	case DeployFailed, Inspecting, InspectFailed, InspectWait, CleanFailed, Error, Verifying,
		AdoptFailed, RescueFailed, UnrescueFailed, ServiceHold, ServiceFailed:
		return true
	}
	return false
}

// DeleteAllowed lists states in which a node may be deleted (outside maintenance).
func DeleteAllowed(s State) bool {
	return s == Manageable || s == Enroll || s == AdoptFailed || s == Available
}

// LookupAllowed lists states in which an agent is expected to look itself up.
func LookupAllowed(s State) bool {
	switch s {
	case Deploying, DeployWait, Cleaning, CleanWait, Inspecting, InspectWait, Rescuing, RescueWait,
		Servicing, ServiceWait: // Ironic's lists: service wait, and servicing with fast track
		return true
	}
	return false
}
