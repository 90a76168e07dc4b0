package conductor

import "fmt"

// Code classifies a refusal so the API can map it to an HTTP status once.
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

// Error is a refusal with a message meant for the operator.
type Error struct {
	Code Code
	Msg  string
}

func (e *Error) Error() string { return e.Msg }

func invalid(format string, a ...any) error {
	return &Error{Code: CodeInvalid, Msg: fmt.Sprintf(format, a...)}
}

func conflict(format string, a ...any) error {
	return &Error{Code: CodeConflict, Msg: fmt.Sprintf(format, a...)}
}

func locked(node, holder string) error {
	return &Error{Code: CodeLocked, Msg: fmt.Sprintf(
		"Node %s is locked by host %s, please retry after the current operation is completed.", node, holder)}
}
