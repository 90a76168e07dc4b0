package api

import (
	"context"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
)

// Microversions served: 1.1 .. 1.110. To 1.82 as Ironic 21.4; then 1.83
// parent and child nodes (nodechildren.go), 1.84 continue_inspection,
// 1.85 hold and unhold, 1.86 the firmware interface and /firmware
// (bios.go), as Ironic 23.0; then as Ironic master (2026.1) gates them:
//
//	1.87  servicing: the service verb and service_step (nodestates.go, conductor service.go)
//	1.88  port name (portNameVersion), ports found by name
//	1.89  POST and DELETE /v1/nodes/{node}/vmedia (vmediaapi.go)
//	1.90  OVN VTEP keys in local_link_connection (ovnVTEPVersion)
//	1.91  a .json suffix is part of the name (jsonSuffixVersion)
//	1.92  runbooks (runbooks.go)
//	1.93  GET /v1/nodes/{node}/vmedia
//	1.94  port creation with node_ident, a node UUID or name (portNodeIdentVersion)
//	1.95  disable_power_off (conductor poweroff.go)
//	1.96  inspection rules (inspectionrules.go)
//	1.97  port description (portDescriptionVersion)
//	1.98  '~' and '/' in JSON patch keys, as ~0 and ~1 (patchEscapeVersion)
//	1.99  conductor_groups filter on port and port group lists (conductorGroupsFilterVersion)
//	1.100 port vendor
//	1.101 port category
//	1.102 port group physical_network
//	1.103 port group category
//	1.104 node instance_name (instanceNameVersion)
//	1.105 OVN VTEP keys refused again
//	1.106 shard filter on port group lists (portgroupShardVersion)
//	1.107 X-OpenStack-Request-Id on responses (sent at every version, as Ironic does)
//	1.108 disable_ramdisk for the service verb
//	1.109 node health, read with power sync (conductor powersync.go)
//	1.110 abort in wait call-back
const (
	minMinor = 1
	maxMinor = 110
)

// The microversions of this file's features, named where they are gated.
const (
	portNameVersion              = 88
	ovnVTEPVersion               = 90
	jsonSuffixVersion            = 91
	portNodeIdentVersion         = 94
	portDescriptionVersion       = 97
	patchEscapeVersion           = 98
	conductorGroupsFilterVersion = 99
	portVendorVersion            = 100
	portCategoryVersion          = 101
	portgroupPhysnetVersion      = 102
	portgroupCategoryVersion     = 103
	instanceNameVersion          = 104
	ovnVTEPRemovedVersion        = 105
	portgroupShardVersion        = 106
)

const versionHeader = "X-OpenStack-Ironic-API-Version"

type ctxKey int

const (
	ctxVersion ctxKey = iota
	ctxRequestID
	ctxBase
	ctxConn // the request's *guardedConn, if its listener counts connections
	// ctxJSONSuffix: the path ended in ".json", stripped for a client
	// below 1.91 (stripJSONSuffix)
	ctxJSONSuffix
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

// stripJSONSuffix is Ironic's JsonExtensionMiddleware: below 1.91 a path
// ending in ".json" means the same path without it (/v1/nodes/foo.json is
// node foo), and a lookup of the resource it names that finds nothing
// tries the name with ".json" again (withJSONSuffix). From 1.91, and
// without a version header (Ironic strips only for a version it was
// given), the suffix is part of the name.
func stripJSONSuffix(r *http.Request) *http.Request {
	path := strings.TrimRight(r.URL.Path, "/")
	if !strings.HasSuffix(path, ".json") {
		return r
	}
	h := strings.TrimSpace(r.Header.Get(versionHeader))
	major, minor, ok := strings.Cut(h, ".")
	maj, err1 := strconv.Atoi(major)
	min, err2 := strconv.Atoi(minor)
	if !ok || err1 != nil || err2 != nil || maj != 1 || min <= 0 || min >= jsonSuffixVersion {
		return r
	}
	r2, u := *r, *r.URL
	u.Path = strings.TrimSuffix(path, ".json")
	if u.RawPath != "" {
		u.RawPath = strings.TrimSuffix(strings.TrimRight(u.RawPath, "/"), ".json")
	}
	r2.URL = &u
	return r2.WithContext(context.WithValue(r.Context(), ctxJSONSuffix, true))
}

// withJSONSuffix looks ident up with get and, for a request whose ".json"
// suffix was stripped, looks up ident+".json" when ident is not found, as
// Ironic's _get_with_suffix does.
func withJSONSuffix[T any](ctx context.Context, ident string, get func(ident string) (T, error)) (T, error) {
	v, err := get(ident)
	if isNotFound(err) && ctx.Value(ctxJSONSuffix) == true {
		if v2, err2 := get(ident + ".json"); err2 == nil {
			return v2, nil
		}
	}
	return v, err
}

// setRequestID names the request in both of Ironic's response headers:
// OpenStack-Request-Id, its own, and X-OpenStack-Request-Id, which
// Ironic's oslo request_id middleware has added since 1.107. That
// middleware knows no microversions, so both come at every version (and
// on answers outside /v1) alike.
func setRequestID(h http.Header, id string) {
	h.Set("Openstack-Request-Id", id)
	h.Set("X-Openstack-Request-Id", id)
}

// globalRequestIDRE is the form of a caller's X-OpenStack-Request-Id that
// oslo's middleware takes as the global request id (one that spans
// services); anything else is ignored.
var globalRequestIDRE = regexp.MustCompile(`^req-[a-f0-9]{8}-[a-f0-9]{4}-[a-f0-9]{4}-[a-f0-9]{4}-[a-f0-9]{12}$`)

// globalRequestID is the caller's request id, logged beside ours so a
// request can be followed from the service that made it; "" if none.
func globalRequestID(r *http.Request) string {
	if id := r.Header.Get("X-Openstack-Request-Id"); globalRequestIDRE.MatchString(id) {
		return id
	}
	return ""
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
