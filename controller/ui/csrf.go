package ui

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"fmt"
	"net/http"
)

// CSRF: a browser that holds the operator's HTTP basic credentials sends
// them with any request to the controller, also one made by another site's
// form or script. Plain API clients (the baremetal CLI, gophercloud,
// agents) never send the headers a browser adds — Origin, Sec-Fetch-Site,
// cookies — so state-changing requests that carry any of them must also
// carry the page's token: the value of the CSRF cookie in the CSRF header
// (double submit). Another site can neither read our cookie nor set a
// custom header on a cross-origin request without a CORS preflight, which
// the controller never grants. Cross-origin requests are refused before
// that, from the browser's own Sec-Fetch-Site and Origin headers.
const (
	// CSRFCookie holds the page's token; SameSite=Strict keeps it off
	// every cross-site request.
	CSRFCookie = "anvil_csrf"
	// CSRFHeader carries the token on the page's state-changing requests.
	CSRFHeader = "X-CSRF-Token"
)

// ensureCSRFCookie gives the browser a token unless it has one.
func ensureCSRFCookie(w http.ResponseWriter, r *http.Request) error {
	if c, err := r.Cookie(CSRFCookie); err == nil && validToken(c.Value) {
		return nil
	}
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return fmt.Errorf("read random: %w", err)
	}
	// Not HttpOnly: the page's script reads it to echo it in the header.
	http.SetCookie(w, &http.Cookie{Name: CSRFCookie, Value: base64.RawURLEncoding.EncodeToString(b[:]), Path: "/",
		SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
	return nil
}

func validToken(v string) bool {
	b, err := base64.RawURLEncoding.DecodeString(v)
	return err == nil && len(b) == 32
}

func safeMethod(m string) bool {
	return m == http.MethodGet || m == http.MethodHead || m == http.MethodOptions
}

// fromBrowser tells browser requests from API clients by the headers only
// browsers add on their own.
func fromBrowser(r *http.Request) bool {
	if r.Header.Get("Origin") != "" || r.Header.Get("Sec-Fetch-Site") != "" {
		return true
	}
	_, err := r.Cookie(CSRFCookie)
	return err == nil
}

// Protect wraps the API: a state-changing request from a browser must be
// same-origin and carry the CSRF token; API clients pass unchanged.
func Protect(next http.Handler) http.Handler {
	cop := http.NewCrossOriginProtection()
	cop.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusForbidden, "Cross-origin request refused: state-changing requests from a browser must come from the controller's own dashboard")
	}))
	checked := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !safeMethod(r.Method) && fromBrowser(r) && !tokenMatches(r) {
			writeError(w, http.StatusForbidden, "CSRF token missing or invalid: reload the dashboard page")
			return
		}
		next.ServeHTTP(w, r)
	})
	return cop.Handler(checked)
}

func tokenMatches(r *http.Request) bool {
	c, err := r.Cookie(CSRFCookie)
	if err != nil || !validToken(c.Value) {
		return false
	}
	h := r.Header.Get(CSRFHeader)
	return subtle.ConstantTimeCompare([]byte(h), []byte(c.Value)) == 1
}
