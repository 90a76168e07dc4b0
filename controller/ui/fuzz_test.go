package ui

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// FuzzDashboardQueries sends arbitrary query strings to the dashboard's
// read endpoints (and the event stream, cut short): every answer is a
// client error in Ironic's format or a success, never a panic or a 5xx.
func FuzzDashboardQueries(f *testing.F) {
	for _, seed := range []struct{ path, query string }{
		{"/ui/api/fleet", "limit=50&sort_key=name&sort_dir=desc&marker="},
		{"/ui/api/fleet", "provision_state=clean+wait&maintenance=yes&retired=0&description_contains=rack"},
		{"/ui/api/fleet", "limit=-1&marker=%00&fields=x"},
		{"/ui/api/fleet", "sort_key=driver_info&sort_dir=sideways"},
		{"/ui/api/counts", "x=1"},
		{"/ui/api/watch", "path=/ui/api/counts&interval_ms=0"},
		{"/ui/api/watch", "path=/v1/nodes/n1%3Ffields%3Dname&interval_ms=99999999999999999999"},
		{"/ui/api/watch", "path=/v1/nodes/..%2F..%2Fports"},
		{"/ui/api/watch", "path=%2F%2Fhost%2Fv1%2Fnodes"},
		{"/ui/api/nodes/n1", ""},
		{"/ui/api/nodes/%2e%2e", ""},
	} {
		f.Add(seed.path, seed.query)
	}
	e := newEnv(f, ":memory:", nil)
	e.addNode(f, "n1", "available", nil)
	f.Fuzz(func(t *testing.T, path, query string) {
		if !strings.HasPrefix(path, "/ui/") {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		r, err := http.NewRequestWithContext(ctx, "GET", "http://ctl"+path+"?"+query, nil)
		if err != nil {
			return // not a request a client could send
		}
		w := httptest.NewRecorder()
		e.srv.Config.Handler.ServeHTTP(w, r)
		if w.Code >= 500 {
			t.Fatalf("%s?%s: %d %s", path, query, w.Code, w.Body.String())
		}
		if w.Code >= 400 {
			var body map[string]string
			if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil || body["error_message"] == "" {
				t.Fatalf("%s?%s: %d answer is not in Ironic's error format: %q", path, query, w.Code, w.Body.String())
			}
		}
	})
}
