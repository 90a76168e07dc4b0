package api

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// maxVersion is the highest microversion served, as headers spell it.
var maxVersion = fmt.Sprintf("1.%d", maxMinor)

func TestRootDocuments(t *testing.T) {
	e := newEnv(t)
	r := e.do("GET", "/", "", nil)
	require.Equal(t, http.StatusOK, r.status)
	root := r.json(t)
	dv := root["default_version"].(map[string]any)
	assert.Equal(t, maxVersion, dv["version"])
	assert.Equal(t, "1.1", dv["min_version"])
	assert.Empty(t, r.header.Get("X-OpenStack-Ironic-API-Maximum-Version"), "GET / carries no version headers")

	for _, p := range []string{"/v1", "/v1/"} {
		r = e.do("GET", p, "1.22", nil)
		require.Equal(t, http.StatusOK, r.status, p)
		v1 := r.json(t)
		ver := v1["version"].(map[string]any) // gophercloud reads this
		assert.Equal(t, maxVersion, ver["version"])
		assert.Contains(t, v1, "lookup")
		assert.NotContains(t, v1, "portgroups", "portgroups link needs 1.23")
		assert.Equal(t, "1.22", r.header.Get(versionHeader))
	}
}

func TestMicroversionNegotiation(t *testing.T) {
	e := newEnv(t)
	tests := map[string]struct {
		header     string
		status     int
		negotiated string
		headers    bool
	}{
		"absent is 1.1":      {"", 200, "1.1", true},
		"latest":             {"latest", 200, maxVersion, true},
		"explicit":           {"1.50", 200, "1.50", true},
		"1.83":               {"1.83", 200, "1.83", true},
		"1.84":               {"1.84", 200, "1.84", true},
		"1.85":               {"1.85", 200, "1.85", true},
		"above max":          {fmt.Sprintf("1.%d", maxMinor+1), 406, "", true},
		"below min":          {"1.0", 406, "", true},
		"wrong major":        {"2.1", 406, "", true},
		"unparseable":        {"one.two", 406, "", false},
		"garbage is refused": {"1", 406, "", false},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			r := e.do("GET", "/v1/nodes", tc.header, nil)
			require.Equal(t, tc.status, r.status, string(r.body))
			assert.Equal(t, tc.negotiated, r.header.Get(versionHeader))
			if tc.headers {
				assert.Equal(t, maxVersion, r.header.Get("X-OpenStack-Ironic-API-Maximum-Version"))
				assert.Equal(t, "1.1", r.header.Get("X-OpenStack-Ironic-API-Minimum-Version"))
			} else {
				assert.Empty(t, r.header.Get("X-OpenStack-Ironic-API-Maximum-Version"))
			}
			if tc.status == 406 {
				assert.NotEmpty(t, r.fault(t))
			}
		})
	}
}

func TestRequestIDAndUnprefixedRoutes(t *testing.T) {
	e := newEnv(t)
	r := e.do("GET", "/nodes", latest, nil)
	require.Equal(t, http.StatusOK, r.status, "routes without /v1 work like Ironic's")
	assert.Regexp(t, `^req-[0-9a-f-]{36}$`, r.header.Get("Openstack-Request-Id"))
	r = e.do("GET", "/v1/nodes/", latest, nil)
	assert.Equal(t, http.StatusOK, r.status, "trailing slash on collections")
	r = e.do("GET", "/v1/nonsense", latest, nil)
	assert.Equal(t, http.StatusNotFound, r.status)
	assert.NotEmpty(t, r.fault(t))
}

func TestMetricsEndpoint(t *testing.T) {
	e := newEnv(t)
	e.createNode("m1", nil)
	r := e.do("GET", "/metrics", "", nil)
	require.Equal(t, http.StatusOK, r.status)
	assert.Contains(t, string(r.body), `anvil_nodes{provision_state="enroll"} 1`)
	assert.Contains(t, string(r.body), `anvil_api_request_duration_seconds_count{code="201",method="POST",route="/v1/nodes"} 1`)
}
