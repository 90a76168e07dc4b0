package bmc

import (
	"errors"
	"fmt"
	"strings"
)

// errKind is how the Manager reacts to a failed BMC command.
type errKind int

const (
	kindPermanent   errKind = iota // give up, report as is
	kindAuth                       // credentials rejected: give up at once
	kindBusy                       // BMC answered "busy" (409, 503, insufficient resources): retry
	kindUnreachable                // no answer (refused, timeout): retry
	kindInvalid                    // driver_info does not fit this BMC (unknown system id)
)

// classifiedError carries a session's verdict about an error. Sessions
// classify because only they see the protocol details (HTTP status codes in
// the transport, ipmitool output and timing); bmclib flattens those into
// strings inside multierrors.
type classifiedError struct {
	kind errKind
	err  error
}

func (e *classifiedError) Error() string { return e.err.Error() }
func (e *classifiedError) Unwrap() error { return e.err }

func classified(kind errKind, err error) error {
	if err == nil {
		return nil
	}
	return &classifiedError{kind: kind, err: err}
}

func kindOf(err error) errKind {
	var ce *classifiedError
	if errors.As(err, &ce) {
		return ce.kind
	}
	return kindPermanent
}

func retryable(err error) bool {
	k := kindOf(err)
	return k == kindBusy || k == kindUnreachable
}

// sentinelFor wraps a final error with the public sentinel of its kind.
func sentinelFor(err error) error {
	switch kindOf(err) {
	case kindAuth:
		return fmt.Errorf("%w: %w", ErrAuth, err)
	case kindBusy:
		return fmt.Errorf("%w: %w", ErrBusy, err)
	case kindUnreachable:
		return fmt.Errorf("%w: %w", ErrUnreachable, err)
	case kindInvalid:
		return fmt.Errorf("%w: %w", ErrInvalidDriverInfo, err)
	}
	return err
}

// bmclibError is a bmclib error flattened to one line. bmclib aggregates
// per-provider failures in a multierror ("2 errors occurred:\n\t* provider:
// gofish: ...\n\t* no Opener implementations found"), which reads badly in
// a node's last_error; with a single provider only the provider's own
// message matters. The original stays reachable through Unwrap.
type bmclibError struct {
	msg   string
	cause error
}

func (e *bmclibError) Error() string { return e.msg }
func (e *bmclibError) Unwrap() error { return e.cause }

// bmclibResult is the error of a bmclib call that reports success in ok
// as well: ok false with no error is a failure all the same.
func bmclibResult(ok bool, err error) error {
	if err == nil && !ok {
		return errors.New("bmclib reported failure without an error")
	}
	return err
}

func flatten(err error) error {
	if err == nil {
		return nil
	}
	var parts []string
	for _, line := range strings.Split(err.Error(), "\n") {
		line = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(line), "*"))
		switch {
		case line == "",
			strings.HasSuffix(line, "errors occurred:"), strings.HasSuffix(line, "error occurred:"),
			strings.HasPrefix(line, "no Opener implementations found"):
			continue
		}
		parts = append(parts, line)
	}
	if len(parts) == 0 {
		return err
	}
	return &bmclibError{msg: strings.Join(parts, "; "), cause: err}
}

// postBusyMarkers are texts of BMC answers that mean "not now" although
// their HTTP status says the request was wrong: HPE iLO answers 400
// UnableToModifyDuringSystemPOST to changes while the server is in POST
// (Ironic's redfish management retries exactly that message), Dell iDRAC
// 409/400 ActionParameterValueConflict to "On" shortly after a power-off,
// and several BMCs word the POST refusal in prose.
var postBusyMarkers = []string{
	"unabletomodifyduringsystempost",
	"unable to modify during system post",
	"system is in post",
	"actionparametervalueconflict",
	"the service is temporarily unavailable",
	"maximum number of user sessions",
	"session limit",
}

// redfishKind is how anvil reacts to a failed Redfish request: the one
// place that decides what is retried. status is the HTTP status of the
// failed request (0: none came back), msg the text the BMC answered (the
// Redfish @Message.ExtendedInfo as gofish reports it), netErr the
// transport error (nil: the BMC answered).
//
// Busy (retried with backoff): 409, 429, 503, and any status whose
// message says the BMC is in POST or out of sessions. Unreachable
// (retried): no answer, a connection reset or refused. Auth (never
// retried): 401, 403. Everything else (400, 404, 405, 500...) is
// permanent and reported with the BMC's own message.
func redfishKind(status int, msg string, netErr error) errKind {
	lower := strings.ToLower(msg)
	for _, m := range postBusyMarkers {
		if strings.Contains(lower, m) && status != 401 && status != 403 {
			return kindBusy
		}
	}
	switch status {
	case 401, 403:
		return kindAuth
	case 409, 429, 503:
		return kindBusy
	case 0:
	default:
		return kindPermanent
	}
	if netErr != nil || isConnectionDrop(lower) {
		return kindUnreachable
	}
	return kindPermanent
}

// isConnectionDrop reports messages of a connection the BMC dropped
// (BMCs restart their web server, or cut connections when busy).
func isConnectionDrop(lower string) bool {
	for _, m := range []string{"connection reset", "connection refused", "broken pipe", "eof", "i/o timeout", "no route to host", "tls handshake timeout"} {
		if strings.Contains(lower, m) {
			return true
		}
	}
	return false
}
