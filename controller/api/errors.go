package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/anvil-metal/anvil/controller/conductor"
	"github.com/anvil-metal/anvil/controller/store"
)

// apiError is a client-visible failure with its HTTP status.
type apiError struct {
	status int
	msg    string
}

func (e *apiError) Error() string { return e.msg }

func errf(status int, format string, a ...any) error {
	return &apiError{status: status, msg: fmt.Sprintf(format, a...)}
}

func badRequest(format string, a ...any) error { return errf(http.StatusBadRequest, format, a...) }

// notAcceptable is the refusal of a feature above the negotiated version.
func notAcceptable() error { return errf(http.StatusNotAcceptable, "Request not acceptable.") }

// writeError renders err in Ironic's format: {"error_message": "<JSON string
// with faultcode, faultstring, debuginfo>"}. Unknown errors become a 500
// whose details go to the log, not to the client.
func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	status, msg := http.StatusInternalServerError, "Internal server error; see the controller log for request "+requestID(r.Context())
	var ae *apiError
	var ce *conductor.Error
	switch {
	case errors.As(err, &ae):
		status, msg = ae.status, ae.msg
		if status == http.StatusRequestTimeout {
			s.log.Warn("slow client cut off: request body not received within the read timeout", "request_id", requestID(r.Context()),
				"remote", r.RemoteAddr, "method", r.Method, "path", r.URL.Path)
		}
	case errors.As(err, &ce):
		msg = ce.Msg
		switch ce.Code {
		case conductor.CodeInvalid:
			status = http.StatusBadRequest
		case conductor.CodeConflict, conductor.CodeLocked:
			status = http.StatusConflict
		case conductor.CodeNotFound:
			status = http.StatusNotFound
		case conductor.CodeNotAcceptable:
			status = http.StatusNotAcceptable
		case conductor.CodeForbidden:
			status = http.StatusForbidden
		case conductor.CodeUnauthorized:
			status = http.StatusUnauthorized
		case conductor.CodeUnavailable:
			status = http.StatusServiceUnavailable
		}
	case errors.Is(err, store.ErrNotFound):
		status, msg = http.StatusNotFound, notFoundMessage(err)
	default:
		s.log.Error("request failed", "request_id", requestID(r.Context()), "method", r.Method, "path", r.URL.Path, "err", err)
	}
	fault := "Client"
	if status >= 500 {
		fault = "Server"
	}
	inner, _ := json.Marshal(map[string]any{"faultcode": fault, "faultstring": msg, "debuginfo": nil})
	writeJSON(w, status, map[string]string{"error_message": string(inner)})
}

// notFoundKey lets handlers name what was not found in Ironic's words.
// msg, when set, is the whole message.
type notFoundKey struct{ what, ident, msg string }

func (e *notFoundKey) Error() string {
	if e.msg != "" {
		return e.msg
	}
	return fmt.Sprintf("%s %s could not be found.", e.what, e.ident)
}
func (e *notFoundKey) Unwrap() error { return store.ErrNotFound }

func notFound(what, ident string) error { return &notFoundKey{what: what, ident: ident} }

func notFoundMessage(err error) string {
	var nf *notFoundKey
	if errors.As(err, &nf) {
		return nf.Error()
	}
	return "Resource could not be found."
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	if v != nil {
		_ = json.NewEncoder(w).Encode(v)
	}
}
