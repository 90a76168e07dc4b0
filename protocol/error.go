package protocol

import (
	"errors"
	"fmt"
)

// Error is an error that crosses the wire: a machine-readable type and code, a
// human message, and optional details (IPA's RESTError shape).
type Error struct {
	Type    string `json:"type"`
	Code    int    `json:"code"`
	Message string `json:"message"`
	Details string `json:"details,omitempty"`
}

func (e *Error) Error() string {
	if e.Details != "" {
		return fmt.Sprintf("%s: %s (%s)", e.Type, e.Message, e.Details)
	}
	return fmt.Sprintf("%s: %s", e.Type, e.Message)
}

// Error types shared by both sides.
const (
	ErrTypeInvalidArgs      = "InvalidCommandParamsError"
	ErrTypeUnknownStep      = "UnknownStepError"
	ErrTypeNotSupported     = "IncompatibleHardwareMethodError"
	ErrTypeVersionMismatch  = "VersionMismatch"
	ErrTypeBusy             = "AgentIsBusy"
	ErrTypeBlockDeviceErase = "BlockDeviceEraseError"
	ErrTypeProtectedDevice  = "ProtectedDeviceError"
	ErrTypeImageWrite       = "ImageWriteError"
	ErrTypeRAID             = "SoftwareRAIDError"
	ErrTypeAborted          = "CommandAborted"
	ErrTypeInternal         = "CommandExecutionError"
)

// AsError converts any error into a wire Error, keeping a typed one intact.
func AsError(err error) *Error {
	if err == nil {
		return nil
	}
	var pe *Error
	if errors.As(err, &pe) {
		return pe
	}
	return &Error{Type: ErrTypeInternal, Code: 500, Message: err.Error()}
}
