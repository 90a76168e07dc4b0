package ipa

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// seen is one request a fake Ironic received.
type seen struct {
	method, path, query string
	header              http.Header
	body                map[string]any
	at                  time.Time
}

// fakeIronic answers GET / with a microversion and hands lookup and
// heartbeat to the test's functions.
type fakeIronic struct {
	t       *testing.T
	version string // default_version.version; "" answers GET / with 500
	lookup  func(n int, s seen) (int, any)
	beat    func(n int, s seen) (int, any)

	mu   sync.Mutex
	reqs []seen
	srv  *httptest.Server
}

func newFakeIronic(t *testing.T, version string) *fakeIronic {
	f := &fakeIronic{t: t, version: version}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeIronic) serve(w http.ResponseWriter, r *http.Request) {
	s := seen{method: r.Method, path: r.URL.Path, query: r.URL.RawQuery, header: r.Header.Clone(), at: time.Now()}
	if b, _ := io.ReadAll(r.Body); len(b) > 0 {
		if err := json.Unmarshal(b, &s.body); err != nil {
			f.t.Errorf("%s %s: body is not a JSON object: %s", r.Method, r.URL, b)
		}
	}
	f.mu.Lock()
	f.reqs = append(f.reqs, s)
	n := 0
	for _, o := range f.reqs {
		if o.path == s.path || strings.HasPrefix(o.path, "/v1/heartbeat/") && strings.HasPrefix(s.path, "/v1/heartbeat/") {
			n++
		}
	}
	f.mu.Unlock()
	code, out := 404, any(map[string]any{"error_message": map[string]any{"faultstring": "no route " + s.path}})
	switch {
	case s.path == "/" && f.version == "":
		code, out = 500, "down"
	case s.path == "/":
		code, out = 200, map[string]any{"name": "OpenStack Ironic API", "default_version": map[string]any{"id": "v1", "version": f.version, "min_version": "1.1"}}
	case s.path == "/v1/lookup" && f.lookup != nil:
		code, out = f.lookup(n, s)
	case strings.HasPrefix(s.path, "/v1/heartbeat/") && f.beat != nil:
		code, out = f.beat(n, s)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	if out != nil {
		_ = json.NewEncoder(w).Encode(out)
	}
}

func (f *fakeIronic) requests(path string) []seen {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []seen
	for _, s := range f.reqs {
		if strings.HasPrefix(s.path, path) {
			out = append(out, s)
		}
	}
	return out
}

// lookupAnswer is Ironic 21.4's lookup answer.
func lookupAnswer(timeout float64, token string) map[string]any {
	return map[string]any{
		"node": map[string]any{"uuid": "1be26c0b-03f2-4d2e-ae87-c02d7f33c123", "properties": map[string]any{}, "instance_info": map[string]any{}, "driver_internal_info": map[string]any{}},
		"config": map[string]any{"heartbeat_timeout": timeout, "agent_token": token, "agent_token_required": true,
			"metrics": map[string]any{"backend": "noop"}, "disable_deep_image_inspection": false},
	}
}

func TestNewClientRejectsBadURLs(t *testing.T) {
	for _, u := range []string{"", "10.0.0.1:6385", "ftp://ironic/", "http://", "http://[::1", "mdns"} {
		_, err := NewClient(Config{API: u}, "1")
		assert.Error(t, err, u)
	}
	c, err := NewClient(Config{API: "https://ironic.example:6385/", Insecure: true}, "1")
	require.NoError(t, err)
	assert.Equal(t, "https://ironic.example:6385", c.base, "a trailing slash is dropped, as IPA does")
}

func TestLookupRequestShape(t *testing.T) {
	for _, tc := range []struct {
		ironic, want string
	}{
		{"1.82", "1.62"}, // IPA asks for at most 1.62 (agent tokens)
		{"1.46", "1.46"},
		{"", "1.31"}, // cannot tell: IPA's minimum
		{"garbage", "1.31"},
	} {
		f := newFakeIronic(t, tc.ironic)
		f.lookup = func(int, seen) (int, any) { return 200, lookupAnswer(60, testToken) }
		c, err := NewClient(Config{API: f.srv.URL + "/", GlobalRequestID: "req-0123"}, "9.9")
		require.NoError(t, err)
		lr, err := c.Lookup(context.Background(), []string{"52:54:00:00:00:02", "52:54:00:00:00:01"}, "1be26c0b-03f2-4d2e-ae87-c02d7f33c123")
		require.NoError(t, err, tc.ironic)
		assert.Equal(t, "1be26c0b-03f2-4d2e-ae87-c02d7f33c123", lr.UUID())
		assert.Equal(t, LookupConfig{HeartbeatTimeout: 60, AgentToken: testToken, AgentTokenRequired: true}, lr.Config)
		reqs := f.requests("/v1/lookup")
		require.Len(t, reqs, 1)
		s := reqs[0]
		assert.Equal(t, "GET", s.method)
		assert.Equal(t, "addresses=52%3A54%3A00%3A00%3A00%3A02%2C52%3A54%3A00%3A00%3A00%3A01&node_uuid=1be26c0b-03f2-4d2e-ae87-c02d7f33c123", s.query)
		assert.Equal(t, tc.want, s.header.Get("X-OpenStack-Ironic-API-Version"), "Ironic %s", tc.ironic)
		assert.Equal(t, "application/json", s.header.Get("Accept"))
		assert.Equal(t, "application/json", s.header.Get("Content-Type"))
		assert.Equal(t, "req-0123", s.header.Get("X-OpenStack-Request-ID"))
		assert.Nil(t, s.body)
	}
}

func TestLookupWithoutNodeUUID(t *testing.T) {
	f := newFakeIronic(t, "1.82")
	f.lookup = func(int, seen) (int, any) { return 200, lookupAnswer(60, testToken) }
	c, err := NewClient(Config{API: f.srv.URL}, "9.9")
	require.NoError(t, err)
	_, err = c.Lookup(context.Background(), []string{"52:54:00:00:00:01"}, "")
	require.NoError(t, err)
	assert.Equal(t, "addresses=52%3A54%3A00%3A00%3A00%3A01", f.requests("/v1/lookup")[0].query)
	assert.Empty(t, f.requests("/v1/lookup")[0].header.Get("X-OpenStack-Request-ID"))
	_, err = c.Lookup(context.Background(), []string{"52:54:00:00:00:01"}, "")
	require.NoError(t, err)
	roots := 0
	for _, s := range f.requests("/") {
		if s.path == "/" {
			roots++
		}
	}
	assert.Equal(t, 1, roots, "the microversion is discovered once")
}

func TestLookupErrors(t *testing.T) {
	for _, tc := range []struct {
		name     string
		code     int
		answer   any
		is       error
		contains string
	}{
		{"not found", 404, map[string]any{"error_message": "{\"faultstring\": \"Node with address 52:54:00:00:00:01 could not be found.\", \"debuginfo\": null}"},
			ErrNotFound, "lookup: Error 404: Node with address 52:54:00:00:00:01 could not be found."},
		{"locked", 409, map[string]any{"error_message": map[string]any{"faultstring": "Node is locked by host c1"}}, ErrConflict, "Error 409: Node is locked by host c1"},
		{"forbidden", 403, map[string]any{"title": "Forbidden"}, nil, "Error 403: Forbidden"},
		{"no uuid", 200, map[string]any{"node": map[string]any{}, "config": map[string]any{"heartbeat_timeout": 60}}, nil, "no node uuid"},
		{"not JSON", 200, "<html>", nil, "decoding the answer"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeIronic(t, "1.82")
			f.lookup = func(int, seen) (int, any) { return tc.code, tc.answer }
			c, err := NewClient(Config{API: f.srv.URL}, "9.9")
			require.NoError(t, err)
			_, err = c.Lookup(context.Background(), []string{"52:54:00:00:00:01"}, "")
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.contains)
			if tc.is != nil {
				assert.ErrorIs(t, err, tc.is)
			}
		})
	}
}

func TestParseLookup(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		want       *LookupConfig
		err        string
	}{
		{"21.4", `{"node": {"uuid": "u"}, "config": {"heartbeat_timeout": 300, "agent_token": "` + testToken + `", "agent_token_required": true}}`,
			&LookupConfig{HeartbeatTimeout: 300, AgentToken: testToken, AgentTokenRequired: true}, ""},
		{"token already handed out", `{"node": {"uuid": "u"}, "config": {"heartbeat_timeout": 300, "agent_token": "******"}}`,
			&LookupConfig{HeartbeatTimeout: 300}, ""},
		{"short token", `{"node": {"uuid": "u"}, "config": {"heartbeat_timeout": 300, "agent_token": "abc"}}`,
			&LookupConfig{HeartbeatTimeout: 300}, ""},
		{"old Ironic: no config", `{"node": {"uuid": "u"}, "heartbeat_timeout": 30}`, &LookupConfig{HeartbeatTimeout: 30}, ""},
		{"fractional timeout", `{"node": {"uuid": "u"}, "config": {"heartbeat_timeout": 2.5}}`, &LookupConfig{HeartbeatTimeout: 2.5}, ""},
		{"no timeout", `{"node": {"uuid": "u"}, "config": {}}`, nil, "no usable heartbeat_timeout"},
		{"zero timeout", `{"node": {"uuid": "u"}, "config": {"heartbeat_timeout": 0}}`, nil, "no usable heartbeat_timeout"},
		{"negative timeout", `{"node": {"uuid": "u"}, "config": {"heartbeat_timeout": -5}}`, nil, "no usable heartbeat_timeout"},
		{"timeout a string", `{"node": {"uuid": "u"}, "config": {"heartbeat_timeout": "300"}}`, nil, "decoding"},
		{"no node", `{"config": {"heartbeat_timeout": 300}}`, nil, "no node uuid"},
		{"uuid a number", `{"node": {"uuid": 5}, "config": {"heartbeat_timeout": 300}}`, nil, "no node uuid"},
		{"node a list", `{"node": [], "config": {"heartbeat_timeout": 300}}`, nil, "decoding"},
		{"token a number", `{"node": {"uuid": "u"}, "config": {"heartbeat_timeout": 1, "agent_token": 5}}`, nil, "decoding"},
		{"null", `null`, nil, "no node uuid"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lr, err := ParseLookup([]byte(tc.body))
			if tc.err != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tc.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, *tc.want, lr.Config)
			assert.Equal(t, "u", lr.UUID())
		})
	}
}

func TestHeartbeatRequestShape(t *testing.T) {
	for _, tc := range []struct {
		ironic, header string
		body           map[string]any
	}{
		{"1.82", "1.68", map[string]any{"callback_url": "http://10.0.2.15:9999", "agent_token": testToken, "agent_version": "9.9"}},
		{"1.62", "1.62", map[string]any{"callback_url": "http://10.0.2.15:9999", "agent_token": testToken, "agent_version": "9.9"}},
		{"1.61", "1.61", map[string]any{"callback_url": "http://10.0.2.15:9999", "agent_version": "9.9"}},
		{"1.36", "1.36", map[string]any{"callback_url": "http://10.0.2.15:9999", "agent_version": "9.9"}},
		{"", "1.31", map[string]any{"callback_url": "http://10.0.2.15:9999"}},
	} {
		f := newFakeIronic(t, tc.ironic)
		f.beat = func(int, seen) (int, any) { return 202, nil }
		c, err := NewClient(Config{API: f.srv.URL}, "9.9")
		require.NoError(t, err)
		require.NoError(t, c.Heartbeat(context.Background(), "1be26c0b-03f2-4d2e-ae87-c02d7f33c123", "http://10.0.2.15:9999", testToken, "9.9"))
		reqs := f.requests("/v1/heartbeat/")
		require.Len(t, reqs, 1)
		assert.Equal(t, "POST", reqs[0].method)
		assert.Equal(t, "/v1/heartbeat/1be26c0b-03f2-4d2e-ae87-c02d7f33c123", reqs[0].path)
		assert.Equal(t, tc.header, reqs[0].header.Get("X-OpenStack-Ironic-API-Version"), "Ironic %s", tc.ironic)
		assert.Equal(t, tc.body, reqs[0].body, "Ironic %s", tc.ironic)
	}
}

func TestHeartbeatErrors(t *testing.T) {
	for _, tc := range []struct {
		name   string
		code   int
		answer any
		is     []error
		isNot  []error
	}{
		// Ironic 21.4's answer to a wiped or wrong token.
		{"token 400", 400, map[string]any{"error_message": "{\"faultstring\": \"Invalid or missing agent token received.\", \"debuginfo\": null}"},
			[]error{ErrTokenRejected}, []error{ErrConflict, ErrNotFound}},
		{"token 401", 401, map[string]any{"error_message": map[string]any{"faultstring": "Agent token is invalid."}}, []error{ErrTokenRejected}, nil},
		{"other 400", 400, map[string]any{"error_message": map[string]any{"faultstring": "Invalid callback URL"}}, nil, []error{ErrTokenRejected}},
		{"locked", 409, map[string]any{"error_message": map[string]any{"faultstring": "Node 1be2 is locked by host c1"}}, []error{ErrConflict}, []error{ErrTokenRejected}},
		{"gone", 404, map[string]any{"error_message": map[string]any{"faultstring": "Node 1be2 could not be found."}}, []error{ErrNotFound}, nil},
		{"200 is not 202", 200, map[string]any{}, nil, []error{ErrConflict, ErrNotFound, ErrTokenRejected}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeIronic(t, "1.82")
			f.beat = func(int, seen) (int, any) { return tc.code, tc.answer }
			c, err := NewClient(Config{API: f.srv.URL}, "9.9")
			require.NoError(t, err)
			err = c.Heartbeat(context.Background(), "1be2", "http://a:9999", testToken, "9.9")
			var he *HTTPError
			require.True(t, errors.As(err, &he), "%v", err)
			assert.Equal(t, tc.code, he.Status)
			for _, e := range tc.is {
				assert.ErrorIs(t, err, e)
			}
			for _, e := range tc.isNot {
				assert.NotErrorIs(t, err, e)
			}
		})
	}
}

func TestErrorText(t *testing.T) {
	for _, tc := range []struct{ body, want string }{
		{`{"error_message": "{\"faultstring\": \"old\", \"debuginfo\": null}"}`, "old"},
		{`{"error_message": {"faultstring": "new"}}`, "new"},
		{`{"error_message": "not json"}`, `{"error_message": "not json"}`},
		{`{"title": "Forbidden", "description": "x"}`, "Forbidden"},
		{`{"faultstring": "plain"}`, "plain"},
		{" <html>bad gateway</html>\n", "<html>bad gateway</html>"},
		{`[1, 2]`, "[1, 2]"},
	} {
		assert.Equal(t, tc.want, errorText([]byte(tc.body)), tc.body)
	}
}
