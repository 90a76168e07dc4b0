package ui

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestProtect(t *testing.T) {
	const token = "3q2-7wAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA" // 32 bytes, base64url
	const other = "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
	reached := 0
	h := Protect(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reached++
		w.WriteHeader(http.StatusAccepted)
	}))
	for _, tc := range []struct {
		name, method string
		hdr          map[string]string
		want         int
		says         string
	}{
		{"API client", "PUT", nil, 202, ""},
		{"API client, no browser headers at all", "POST", map[string]string{"Content-Type": "text/plain"}, 202, ""},
		{"agent heartbeat", "POST", map[string]string{"User-Agent": "anvil-agent"}, 202, ""},
		{"browser read", "GET", map[string]string{"Sec-Fetch-Site": "same-origin", "Origin": "http://ctl"}, 202, ""},
		{"page with token", "PUT", map[string]string{"Sec-Fetch-Site": "same-origin", "Origin": "http://ctl",
			"Cookie": CSRFCookie + "=" + token, CSRFHeader: token}, 202, ""},
		{"page without token", "PUT", map[string]string{"Sec-Fetch-Site": "same-origin", "Origin": "http://ctl",
			"Cookie": CSRFCookie + "=" + token}, 403, "CSRF token"},
		{"page with another token", "DELETE", map[string]string{"Sec-Fetch-Site": "same-origin",
			"Cookie": CSRFCookie + "=" + token, CSRFHeader: other}, 403, "CSRF token"},
		{"token without cookie", "PATCH", map[string]string{"Origin": "http://ctl", CSRFHeader: token}, 403, "CSRF token"},
		{"malformed cookie echoed", "PUT", map[string]string{"Origin": "http://ctl", "Cookie": CSRFCookie + "=x", CSRFHeader: "x"}, 403, "CSRF token"},
		{"cookie only (old browser)", "POST", map[string]string{"Cookie": CSRFCookie + "=" + token}, 403, "CSRF token"},
		{"cross-site form", "POST", map[string]string{"Sec-Fetch-Site": "cross-site", "Origin": "http://evil.example"}, 403, "Cross-origin"},
		{"cross-site even with a token", "PUT", map[string]string{"Sec-Fetch-Site": "cross-site", "Origin": "http://evil.example",
			"Cookie": CSRFCookie + "=" + token, CSRFHeader: token}, 403, "Cross-origin"},
		{"other origin without fetch metadata", "POST", map[string]string{"Origin": "http://evil.example"}, 403, "Cross-origin"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := reached
			r := httptest.NewRequest(tc.method, "http://ctl/v1/nodes/n/states/provision", strings.NewReader(`{"target":"provide"}`))
			for k, v := range tc.hdr {
				r.Header.Set(k, v)
			}
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			assert.Equal(t, tc.want, w.Code, w.Body.String())
			if tc.want == 403 {
				assert.Equal(t, before, reached, "refused before the API")
				assert.Contains(t, w.Body.String(), tc.says)
				assert.Contains(t, w.Body.String(), "error_message", "in Ironic's error format")
			}
		})
	}
}

func TestCSRFCookieIsKeptWhileValid(t *testing.T) {
	w := httptest.NewRecorder()
	r := httptest.NewRequest("GET", "http://ctl/ui/", nil)
	assert.NoError(t, ensureCSRFCookie(w, r))
	first := w.Result().Cookies()
	assert.Len(t, first, 1)
	assert.True(t, validToken(first[0].Value))

	w = httptest.NewRecorder()
	r.AddCookie(first[0])
	assert.NoError(t, ensureCSRFCookie(w, r))
	assert.Empty(t, w.Result().Cookies(), "a page reload keeps the token other tabs use")

	w = httptest.NewRecorder()
	r = httptest.NewRequest("GET", "http://ctl/ui/", nil)
	r.AddCookie(&http.Cookie{Name: CSRFCookie, Value: "short"})
	assert.NoError(t, ensureCSRFCookie(w, r))
	assert.Len(t, w.Result().Cookies(), 1, "a malformed token is replaced")
}
