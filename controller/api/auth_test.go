package api

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/bcrypt"
)

func TestHTPasswd(t *testing.T) {
	hash, err := bcrypt.GenerateFromPassword([]byte("s3cret"), bcrypt.MinCost)
	require.NoError(t, err)
	h, err := ParseHTPasswd(strings.NewReader("# operators\nadmin:" + string(hash) + "\n"))
	require.NoError(t, err)
	e := newEnv(t, func(c *Config) { c.Auth = h })

	tests := map[string]struct {
		user, pass string
		path       string
		status     int
	}{
		"no credentials":   {"", "", "/v1/nodes", 401},
		"wrong password":   {"admin", "nope", "/v1/nodes", 401},
		"unknown user":     {"eve", "s3cret", "/v1/nodes", 401},
		"good credentials": {"admin", "s3cret", "/v1/nodes", 200},
		"root is public":   {"", "", "/", 200},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			req, err := http.NewRequest("GET", e.srv.URL+tc.path, nil)
			require.NoError(t, err)
			if tc.user != "" {
				req.SetBasicAuth(tc.user, tc.pass)
			}
			res, err := e.srv.Client().Do(req)
			require.NoError(t, err)
			res.Body.Close()
			assert.Equal(t, tc.status, res.StatusCode)
			if tc.status == 401 {
				assert.Equal(t, `Basic realm="anvil"`, res.Header.Get("WWW-Authenticate"))
			}
		})
	}

	bad := map[string]string{
		"md5 hash":  "admin:$apr1$abc$def\n",
		"no colon":  "admin\n",
		"empty":     "# nothing\n",
		"sha1 hash": "admin:{SHA}abc=\n",
	}
	for name, content := range bad {
		_, err := ParseHTPasswd(strings.NewReader(content))
		assert.Error(t, err, name)
	}
}

// TestMetricsNeedAuth: under http_basic, /metrics (node counts by state,
// per-route statistics) needs the API's credentials unless it is declared
// public; when it is served on a listener of its own, the API has none.
func TestMetricsNeedAuth(t *testing.T) {
	hash, err := bcrypt.GenerateFromPassword([]byte("s3cret"), bcrypt.MinCost)
	require.NoError(t, err)
	h, err := ParseHTPasswd(strings.NewReader("admin:" + string(hash) + "\n"))
	require.NoError(t, err)
	tests := map[string]struct {
		route           MetricsRoute
		without, withPw int
	}{
		"default: behind auth": {MetricsAuthed, 401, 200},
		"--metrics-public":     {MetricsPublic, 200, 200},
		"--metrics-listen":     {MetricsElsewhere, 404, 404},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, func(c *Config) { c.Auth, c.MetricsRoute = h, tc.route })
			for _, creds := range []bool{false, true} {
				req, err := http.NewRequest("GET", e.srv.URL+"/metrics", nil)
				require.NoError(t, err)
				want := tc.without
				if creds {
					req.SetBasicAuth("admin", "s3cret")
					want = tc.withPw
				}
				res, err := e.srv.Client().Do(req)
				require.NoError(t, err)
				body, _ := io.ReadAll(res.Body)
				res.Body.Close()
				assert.Equal(t, want, res.StatusCode, "credentials %v: %s", creds, body)
				if res.StatusCode == 200 {
					assert.Contains(t, string(body), "go_goroutines")
				} else {
					assert.NotContains(t, string(body), "go_goroutines")
				}
			}
		})
	}
}

// TestRequester: who a request names for the records of what it starts.
func TestRequester(t *testing.T) {
	hash, err := bcrypt.GenerateFromPassword([]byte("s3cret"), bcrypt.MinCost)
	require.NoError(t, err)
	h, err := ParseHTPasswd(strings.NewReader("alice:" + string(hash) + "\n"))
	require.NoError(t, err)
	tests := map[string]struct {
		auth    Authenticator
		basic   string
		headers map[string]string
		want    string
	}{
		"http_basic: the authenticated user":           {auth: h, basic: "alice", want: `user "alice" (http_basic)`},
		"http_basic: identity headers are not trusted": {auth: h, basic: "alice", headers: map[string]string{"X-User-Name": "mallory"}, want: `user "alice" (http_basic)`},
		"noauth: nobody known":                         {want: "noauth (no user known)"},
		"noauth: Keystone headers, unverified": {headers: map[string]string{"X-User-Name": "bob", "X-User-Id": "7f3c"},
			want: `noauth (unverified X-User-Name "bob", X-User-Id "7f3c")`},
		"noauth: a long claimed name is cut": {headers: map[string]string{"X-User-Name": strings.Repeat("x", 100)},
			want: `noauth (unverified X-User-Name "` + strings.Repeat("x", 64) + `…")`},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			s := &Server{auth: tc.auth}
			r := httptest.NewRequest("PUT", "/v1/nodes/n/states/provision", nil)
			if tc.basic != "" {
				r.SetBasicAuth(tc.basic, "s3cret")
			}
			for k, v := range tc.headers {
				r.Header.Set(k, v)
			}
			assert.Equal(t, tc.want, s.requester(r))
		})
	}
}
