package conductor

// Refusals: the errors the conductor answers a request with, classified
// for the API.

import (
	"fmt"

	"github.com/anvil-metal/anvil/controller/state"
	"github.com/anvil-metal/anvil/controller/store"
)

// Code classifies a refusal so the API maps it to an HTTP status in one
// place (api.writeError), never in a handler.
type Code int

// Codes of refusals.
const (
	CodeInvalid       Code = iota + 1 // 400: the request cannot be done as asked
	CodeConflict                      // 409: the node's state forbids it now
	CodeLocked                        // 409 NodeLocked: work is running on the node
	CodeNotFound                      // 404
	CodeNotAcceptable                 // 406: needs a newer API version
	CodeForbidden                     // 403
	CodeUnauthorized                  // 401: agent token missing or stale
	CodeUnavailable                   // 503
)

// Error is a refusal with a message meant for the operator, and the error
// that caused it, if any (errors.Is/As see through it).
type Error struct {
	Code Code
	Msg  string
	Err  error
}

func (e *Error) Error() string { return e.Msg }

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

func newError(code Code, format string, a ...any) *Error {
	return &Error{Code: code, Msg: fmt.Sprintf(format, a...)}
}

// Wrap is a refusal with code and message whose cause is err.
func Wrap(code Code, err error, format string, a ...any) error {
	e := newError(code, format, a...)
	e.Err = err
	return e
}

// Invalid is a 400 refusal: the request cannot be done as asked.
func Invalid(format string, a ...any) error { return newError(CodeInvalid, format, a...) }

// Conflict is a 409 refusal: the current state forbids the request.
func Conflict(format string, a ...any) error { return newError(CodeConflict, format, a...) }

// NotFound is a 404 refusal with a reason.
func NotFound(format string, a ...any) error { return newError(CodeNotFound, format, a...) }

// Forbidden is a 403 refusal.
func Forbidden(format string, a ...any) error { return newError(CodeForbidden, format, a...) }

// Unauthorized is a 401 refusal (agent token missing or stale).
func Unauthorized(format string, a ...any) error { return newError(CodeUnauthorized, format, a...) }

// Locked is Ironic's NodeLocked: holder is working on the node.
func Locked(node, holder string) error {
	return newError(CodeLocked, "Node %s is locked by host %s, please retry after the current operation is completed.", node, holder)
}

// CheckUnlocked refuses a change to a node that work is running on.
func CheckUnlocked(n *store.Node) error {
	if n.Reservation != nil {
		return Locked(n.UUID, *n.Reservation)
	}
	return nil
}

// CheckUpdatable refuses an update of a node's fields while a state
// transition is in progress or work runs on it, as Ironic does.
func CheckUpdatable(n *store.Node) error {
	if n.TargetProvisionState != nil && !state.UpdateAllowed(state.State(n.ProvisionState)) {
		return Conflict("Node %s can not be updated while a state transition is in progress.", n.UUID)
	}
	return CheckUnlocked(n)
}

// checkProtected refuses undeploying, rebuilding or deleting a protected node.
func checkProtected(n *store.Node) error {
	if n.Protected {
		return Forbidden("Node %s is protected and cannot be undeployed, rebuilt or deleted", n.UUID)
	}
	return nil
}

// CheckDeletable refuses deleting a node that is locked, protected, in
// use or in a state that forbids it (maintenance lifts the last two).
func CheckDeletable(n *store.Node) error {
	if err := CheckUnlocked(n); err != nil {
		return err
	}
	if err := checkProtected(n); err != nil {
		return err
	}
	if n.Maintenance {
		return nil
	}
	if !state.DeleteAllowed(state.State(n.ProvisionState)) {
		return Conflict("Can not delete node %q while it is in provision state %q. Valid provision states to perform deletion are: ('manageable', 'enroll', 'adopt failed', 'available'), or set the node into maintenance mode", n.UUID, n.ProvisionState)
	}
	if n.InstanceUUID != nil {
		return Conflict("Node %s is associated with instance %s.", n.UUID, *n.InstanceUUID)
	}
	return nil
}
