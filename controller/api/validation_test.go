package api

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The tables below hold inputs and what Ironic 21.4 answers them, read from
// its source: ironic/api/controllers/v1/utils.py (TRAITS_SCHEMA),
// ironic/common/args.py (patch schema, uuid), node.py (history), WebOb
// 1.8's parse_qsl_text (query strings) and pecan's 405 handling.

// TestTraitNamesAsIronic: traits are standard os-traits names or
// CUSTOM_[A-Z0-9_]+, 1 to 255 characters, on PUT of one trait, PUT of the
// whole set and allocation create.
func TestTraitNamesAsIronic(t *testing.T) { forEachStoreEnv(t, testTraitNamesAsIronic) }

func testTraitNamesAsIronic(t *testing.T, e *testEnv) {
	e.createNode("tn", nil)
	long := "CUSTOM_" + strings.Repeat("A", 249)
	tests := map[string]struct {
		trait  string
		status int
		fault  string
	}{
		"custom":                   {"CUSTOM_GOLD_1", 204, ""},
		"standard":                 {"HW_CPU_X86_AVX2", 204, ""},
		"standard, newest kind":    {"COMPUTE_STATUS_DISABLED", 204, ""},
		"255 characters":           {long[:255], 204, ""},
		"lowercase":                {"lowercase", 400, "'lowercase' is not valid under any of the given schemas"},
		"lowercase custom":         {"CUSTOM_gold", 400, "does not match '^CUSTOM_[A-Z0-9_]+$'"},
		"bare prefix":              {"CUSTOM_", 400, "is not valid under any"},
		"space":                    {"bad trait", 400, "'bad trait' is not valid"},
		"unknown standard-looking": {"HW_CPU_X86_NOPE", 400, "is not valid"},
		"256 characters":           {long + "B", 400, "is too long"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			for _, req := range []struct {
				method, path, what string
				body               any
			}{
				{"PUT", "/v1/nodes/tn/traits/" + tc.trait, "trait", nil},
				{"PUT", "/v1/nodes/tn/traits", "body", map[string]any{"traits": []string{tc.trait}}},
			} {
				r := e.do(req.method, req.path, latest, req.body)
				require.Equal(t, tc.status, r.status, "%s %s: %s", req.method, req.path, r.body)
				if tc.status == 400 {
					assert.Contains(t, r.fault(t), "Schema error for "+req.what+": ")
					assert.Contains(t, r.fault(t), tc.fault)
				}
			}
			r := e.do("POST", "/v1/allocations", latest, map[string]any{"resource_class": "none-such", "traits": []string{tc.trait}})
			if tc.status == 400 {
				require.Equal(t, 400, r.status, string(r.body))
				assert.Contains(t, r.fault(t), "Schema error for allocation: ")
				assert.Contains(t, r.fault(t), tc.fault)
			} else {
				assert.Equal(t, 201, r.status, string(r.body))
			}
		})
	}
	t.Run("empty", func(t *testing.T) {
		r := e.do("PUT", "/v1/nodes/tn/traits", latest, map[string]any{"traits": []string{""}})
		require.Equal(t, 400, r.status)
		assert.Equal(t, "Schema error for body: '' is too short", r.fault(t))
	})
	assert.Len(t, newTraitNames(), 348, "os-traits 2.10.0 has 348 standard traits")
}

// TestPatchPathsAsIronic: Ironic 21.4's patch schema takes paths matching
// ^(/[\w-]+)+$ with Python's \w (Unicode letters and digits, '_') and '$'
// (a final newline may follow). Keys with '.', ':' or '~' escapes are
// refused with 400, as in Ironic, however useful they would be (at 1.97:
// 1.98 takes the escapes, see TestPatchEscapesFrom198).
func TestPatchPathsAsIronic(t *testing.T) { forEachStoreEnv(t, testPatchPathsAsIronic) }

func testPatchPathsAsIronic(t *testing.T, e *testEnv) {
	e.createNode("pp", nil)
	tests := map[string]struct {
		path   string
		status int
		key    string // the extra key set when accepted
	}{
		"plain":           {"/extra/foo", 200, "foo"},
		"dash underscore": {"/extra/foo-bar_1", 200, "foo-bar_1"},
		"unicode letters": {"/extra/café", 200, "café"},
		"unicode digits":  {"/extra/x٣", 200, "x٣"},
		"final newline":   {"/extra/nl\n", 200, "nl\n"},
		"dot":             {"/extra/foo.bar", 400, ""},
		"colon":           {"/extra/foo:bar", 400, ""},
		"escaped slash":   {"/extra/foo~1bar", 400, ""},
		"escaped tilde":   {"/extra/foo~0bar", 400, ""},
		"space":           {"/extra/foo bar", 400, ""},
		"trailing slash":  {"/extra/", 400, ""},
		"inner newline":   {"/extra/a\nb", 400, ""},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			r := e.do("PATCH", "/v1/nodes/pp", "1.97", []map[string]any{{"op": "add", "path": tc.path, "value": "v"}})
			require.Equal(t, tc.status, r.status, string(r.body))
			if tc.status == 400 {
				assert.Equal(t, "Schema error for patch: "+pyRepr(tc.path)+` does not match '^(/[\\w-]+)+$'`, r.fault(t))
				return
			}
			assert.Equal(t, "v", r.json(t)["extra"].(map[string]any)[tc.key])
		})
	}
}

// TestQueryStringsAsIronic: WebOb splits the query on '&' and ';', keeps
// invalid escapes literally and turns '+' into a space; no parameter is
// silently lost.
func TestQueryStringsAsIronic(t *testing.T) { forEachStoreEnv(t, testQueryStringsAsIronic) }

func testQueryStringsAsIronic(t *testing.T, e *testEnv) {
	for _, n := range []string{"q1", "q2", "q3"} {
		e.createNode(n, nil)
	}
	tests := map[string]struct {
		query  string
		status int
		fault  string
		nodes  int
	}{
		"negative limit before ';'": {"limit=-5;", 400, "Limit must be positive", 0},
		"';' separates":             {"limit=1;sort_key=name", 200, "", 1},
		"both separators":           {"sort_dir=desc&limit=2;fields=name", 200, "", 2},
		"unknown after ';'":         {"limit=1;bogus=1", 400, "Unknown argument(s): bogus", 0},
		"empty pairs":               {";;&limit=2&;", 200, "", 2},
		"invalid escape kept":       {"limit=%zz", 400, `Invalid limit "%zz"`, 0},
		"plus is a space":           {"limit=+2", 400, `Invalid limit " 2"`, 0},
		"escaped plus":              {"driver=fake%2Bhardware", 200, "", 0},
		"not UTF-8":                 {"driver=%ff", 400, "not UTF-8", 0},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			r := e.do("GET", "/v1/nodes?"+tc.query, latest, nil)
			require.Equal(t, tc.status, r.status, string(r.body))
			if tc.status != 200 {
				assert.Contains(t, r.fault(t), tc.fault)
				return
			}
			assert.Len(t, r.json(t)["nodes"], tc.nodes)
		})
	}
	t.Run("next link keeps what ';' separated", func(t *testing.T) {
		r := e.do("GET", "/v1/nodes?limit=1;fields=name", latest, nil)
		require.Equal(t, 200, r.status)
		next := r.json(t)["next"].(string)
		assert.Contains(t, next, "fields=name")
		assert.Contains(t, next, "limit=1")
	})
}

// TestHistoryMarkerAsIronic: the marker must be a UUID (400 otherwise,
// from args.uuid) of one of the node's events (404 otherwise); the page
// starts after it.
func TestHistoryMarkerAsIronic(t *testing.T) { forEachStoreEnv(t, testHistoryMarkerAsIronic) }

func testHistoryMarkerAsIronic(t *testing.T, e *testEnv) {
	e.createNode("hm", nil)
	require.Equal(t, 202, e.provision("hm", "manage", nil).status)
	e.waitState("hm", "manageable")
	all := e.do("GET", "/v1/nodes/hm/history", latest, nil).json(t)["history"].([]any)
	require.GreaterOrEqual(t, len(all), 2)
	first := all[0].(map[string]any)["uuid"].(string)
	second := all[1].(map[string]any)["uuid"].(string)
	tests := map[string]struct {
		query  string
		status int
		fault  string
		first  string // first event of the page
		count  int
	}{
		"junk":          {"marker=junk", 400, "Expected UUID for marker: junk", "", 0},
		"unknown uuid":  {"marker=6b6c7a36-0000-4000-8000-000000000000", 404, "Node history record 6b6c7a36-0000-4000-8000-000000000000 could not be found.", "", 0},
		"after first":   {"marker=" + first, 200, "", second, len(all) - 1},
		"with limit":    {"marker=" + first + "&limit=1", 200, "", second, 1},
		"upper case":    {"marker=" + strings.ToUpper(first), 200, "", second, len(all) - 1},
		"no marker":     {"", 200, "", first, len(all)},
		"limit is kept": {"limit=0", 400, "Limit must be positive", "", 0},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			r := e.do("GET", "/v1/nodes/hm/history?"+tc.query, latest, nil)
			require.Equal(t, tc.status, r.status, string(r.body))
			if tc.status != 200 {
				assert.Equal(t, tc.fault, r.fault(t))
				return
			}
			page := r.json(t)["history"].([]any)
			require.Len(t, page, tc.count)
			assert.Equal(t, tc.first, page[0].(map[string]any)["uuid"])
		})
	}
}

// TestMethodNotAllowedAsIronic: a method a route does not take is a 405
// with an Allow header and pecan's error body; an unknown path stays 404.
func TestMethodNotAllowedAsIronic(t *testing.T) { forEachStoreEnv(t, testMethodNotAllowedAsIronic) }

func testMethodNotAllowedAsIronic(t *testing.T, e *testEnv) {
	e.createNode("m1", nil)
	tests := map[string]struct {
		method, path string
		status       int
		allow        string
	}{
		"PUT on a node":              {"PUT", "/v1/nodes/m1", 405, "GET, PATCH, DELETE"},
		"POST on a node":             {"POST", "/v1/nodes/m1", 405, "GET, PATCH, DELETE"},
		"without /v1":                {"PUT", "/nodes/m1", 405, "GET, PATCH, DELETE"},
		"DELETE on the collection":   {"DELETE", "/v1/nodes", 405, "GET, POST"},
		"GET on a provision state":   {"GET", "/v1/nodes/m1/states/provision", 405, "PUT"},
		"POST on lookup":             {"POST", "/v1/lookup", 405, "GET"},
		"POST on the root":           {"POST", "/", 405, "GET"},
		"PUT on an allocation":       {"PUT", "/v1/allocations/x", 405, "GET, PATCH, DELETE"},
		"PUT on a port":              {"PUT", "/v1/ports/x", 405, "GET, PATCH, DELETE"},
		"DELETE on port groups":      {"DELETE", "/v1/portgroups", 405, "GET, POST"},
		"PUT on a chassis":           {"PUT", "/v1/chassis/x", 405, "GET, PATCH, DELETE"},
		"POST on a chassis' nodes":   {"POST", "/v1/chassis/x/nodes", 405, "GET"},
		"DELETE on the volume root":  {"DELETE", "/v1/volume", 405, "GET"},
		"PUT on a node's connectors": {"PUT", "/v1/nodes/m1/volume/connectors", 405, "GET, POST"},
		"unknown path":               {"GET", "/v1/bogus", 404, ""},
		"unknown path, other method": {"PUT", "/v1/nodes/m1/bogus", 404, ""},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			r := e.do(tc.method, tc.path, latest, nil)
			require.Equal(t, tc.status, r.status, string(r.body))
			assert.Equal(t, tc.allow, r.header.Get("Allow"))
			if tc.status == 405 {
				assert.Equal(t, "The method "+tc.method+" is not allowed for this resource.", r.fault(t))
				var inner map[string]any
				require.NoError(t, json.Unmarshal([]byte(r.json(t)["error_message"].(string)), &inner))
				assert.Equal(t, map[string]any{"code": 405.0, "title": "Method Not Allowed",
					"description": "The method " + tc.method + " is not allowed for this resource."}, inner)
			}
		})
	}
}
