package bmc

import (
	"errors"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
)

// One table decides what is retried: transient answers (POST, busy, out
// of sessions, dropped connections) are, permanent ones are not, and bad
// credentials never.
func TestRedfishKind(t *testing.T) {
	reset := &netOpError{syscall.ECONNRESET}
	for _, tc := range []struct {
		name   string
		status int
		msg    string
		netErr error
		want   errKind
	}{
		{"409 during POST", 409, "The request could not be completed because the resource is busy.", nil, kindBusy},
		{"iDRAC conflict after power-off", 400, `{"error":{"@Message.ExtendedInfo":[{"MessageId":"Base.1.12.ActionParameterValueConflict"}]}}`, nil, kindBusy},
		{"iLO in POST", 400, `{"error":{"@Message.ExtendedInfo":[{"MessageId":"iLO.2.15.UnableToModifyDuringSystemPOST"}]}}`, nil, kindBusy},
		{"prose POST", 500, "Unable to modify during system POST", nil, kindBusy},
		{"503", 503, "Service Unavailable", nil, kindBusy},
		{"429", 429, "Too many requests", nil, kindBusy},
		{"out of sessions", 400, "RAC0218: The maximum number of user sessions is reached.", nil, kindBusy},
		{"connection reset", 0, "read tcp: connection reset by peer", reset, kindUnreachable},
		{"reset in text only", 0, "Post \"https://bmc/redfish\": EOF", nil, kindUnreachable},
		{"refused", 0, "dial tcp 10.0.0.1:443: connect: connection refused", errors.New("refused"), kindUnreachable},
		{"401", 401, "Invalid username or password.", nil, kindAuth},
		{"403 even if busy wording", 403, "maximum number of user sessions", nil, kindAuth},
		{"400", 400, "PropertyValueNotInList: Hdd2", nil, kindPermanent},
		{"404", 404, "ResourceMissingAtURI", nil, kindPermanent},
		{"405", 405, "Method not allowed", nil, kindPermanent},
		{"500", 500, "InternalError", nil, kindPermanent},
		{"no status no error", 0, "bmclib reported failure without an error", nil, kindPermanent},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, redfishKind(tc.status, tc.msg, tc.netErr))
		})
	}
}

type netOpError struct{ errno syscall.Errno }

func (e *netOpError) Error() string { return "read: " + e.errno.Error() }
func (e *netOpError) Unwrap() error { return e.errno }
