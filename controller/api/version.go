package api

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
)

// Microversions served: 1.1 .. 1.86. To 1.82 as Ironic 21.4; then 1.83
// parent and child nodes (nodechildren.go), 1.84 continue_inspection,
// 1.85 hold and unhold, 1.86 the firmware interface and /firmware
// (bios.go), as Ironic 23.0; 1.92 runbooks (runbooks.go).
const (
	minMinor = 1
	maxMinor = 92
)

const versionHeader = "X-OpenStack-Ironic-API-Version"

type ctxKey int

const (
	ctxVersion ctxKey = iota
	ctxRequestID
	ctxBase
	ctxConn // the request's *guardedConn, if its listener counts connections
)

// version returns the negotiated minor version of the request.
func version(ctx context.Context) int {
	if v, ok := ctx.Value(ctxVersion).(int); ok {
		return v
	}
	return minMinor
}

func requestID(ctx context.Context) string {
	id, _ := ctx.Value(ctxRequestID).(string)
	return id
}

// since refuses a resource newer than the negotiated version as Ironic
// does: its routing (the node controller's _lookup) does not reach it, so
// the answer is 404 Not Found, not atLeast's 406.
func since(ctx context.Context, minor int) error {
	if version(ctx) < minor {
		return errf(http.StatusNotFound, "The resource could not be found.")
	}
	return nil
}

// atLeast refuses (406) a feature newer than the negotiated version.
func atLeast(ctx context.Context, minor int) error {
	if version(ctx) < minor {
		return notAcceptable()
	}
	return nil
}

// negotiate parses X-OpenStack-Ironic-API-Version: absent means the minimum
// (1.1), "latest" the maximum, anything else must be 1.N within range.
func negotiate(h string) (int, error) {
	h = strings.TrimSpace(h)
	switch strings.ToLower(h) {
	case "":
		return minMinor, nil
	case "latest":
		return maxMinor, nil
	}
	major, minor, ok := strings.Cut(h, ".")
	maj, err1 := strconv.Atoi(major)
	min, err2 := strconv.Atoi(minor)
	if !ok || err1 != nil || err2 != nil {
		return 0, errParse
	}
	if maj != 1 || min < minMinor || min > maxMinor {
		return 0, errf(http.StatusNotAcceptable, "Version %s was requested but the minor version is not supported by this service. The supported version range is: [1.%d, 1.%d].", h, minMinor, maxMinor)
	}
	return min, nil
}

var errParse = errf(http.StatusNotAcceptable, "Invalid value for %s header", versionHeader)

// versionMiddleware negotiates the microversion of /v1 requests and sets
// the min/max/negotiated headers as Ironic does.
func (s *Server) versionMiddleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		v, err := negotiate(r.Header.Get(versionHeader))
		if err == errParse {
			s.writeError(w, r, err)
			return
		}
		h := w.Header()
		h.Set("X-OpenStack-Ironic-API-Minimum-Version", fmt.Sprintf("1.%d", minMinor))
		h.Set("X-OpenStack-Ironic-API-Maximum-Version", fmt.Sprintf("1.%d", maxMinor))
		if err != nil {
			// webob's 406 body shape, which ironicclient reads for renegotiation.
			writeJSON(w, http.StatusNotAcceptable, map[string]any{"error_message": mustJSON(map[string]any{
				"code": 406, "title": "Not Acceptable", "description": err.Error()})})
			return
		}
		h.Set(versionHeader, fmt.Sprintf("1.%d", v))
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), ctxVersion, v)))
	})
}
