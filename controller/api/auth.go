package api

import (
	"fmt"
	"io"
	"net/http"
	"strings"

	"golang.org/x/crypto/bcrypt"

	"github.com/anvil-metal/anvil/internal/textlist"
)

// Authenticator decides whether a request may use the operator API. The
// agent endpoints (lookup, heartbeat) and version discovery stay public, as
// in Ironic.
type Authenticator interface {
	Authenticate(r *http.Request) bool
}

// HTPasswd is http_basic auth against an htpasswd file with bcrypt hashes
// (htpasswd -B), like Ironic standalone.
type HTPasswd struct {
	users map[string][]byte
}

// ParseHTPasswd reads "user:$2y$..." lines; other hash formats are refused
// because they are weak.
func ParseHTPasswd(r io.Reader) (*HTPasswd, error) {
	h := &HTPasswd{users: map[string][]byte{}}
	err := textlist.Lines(r, "htpasswd", func(line int, t string) error {
		user, hash, ok := strings.Cut(t, ":")
		if !ok || user == "" {
			return fmt.Errorf("htpasswd line %d: expected user:hash", line)
		}
		if !strings.HasPrefix(hash, "$2y$") && !strings.HasPrefix(hash, "$2a$") && !strings.HasPrefix(hash, "$2b$") {
			return fmt.Errorf("htpasswd line %d: user %q does not use a bcrypt hash (create it with htpasswd -B)", line, user)
		}
		h.users[user] = []byte(hash)
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(h.users) == 0 {
		return nil, fmt.Errorf("htpasswd file has no users")
	}
	return h, nil
}

// Authenticate checks HTTP basic credentials.
func (h *HTPasswd) Authenticate(r *http.Request) bool {
	user, pass, ok := r.BasicAuth()
	if !ok {
		return false
	}
	hash, known := h.users[user]
	if !known {
		// Spend the same time as for a known user, so timing does not
		// reveal which user names exist.
		_ = bcrypt.CompareHashAndPassword(dummyHash, []byte(pass))
		return false
	}
	return bcrypt.CompareHashAndPassword(hash, []byte(pass)) == nil
}

var dummyHash = []byte("$2a$10$7EqJtq98hPqEX7fNZaFWoOhi5BWX4Z5P0PTMYpwMPlUK5QWbSRKDa")

// requester names who sent r, for the records of what it started
// (sanitization records' requested_by). With http_basic it is the
// authenticated user. Without authentication (noauth) nobody is known:
// a user named in Keystone's identity headers (X-User-Name, X-User-Id,
// set by an authenticating proxy in front) is kept, marked unverified,
// since any client can send them.
func (s *Server) requester(r *http.Request) string {
	if s.auth != nil {
		if user, _, ok := r.BasicAuth(); ok {
			return fmt.Sprintf("user %q (http_basic)", user)
		}
		return "an authenticated user"
	}
	var claimed []string
	for _, h := range []string{"X-User-Name", "X-User-Id"} {
		if v := strings.TrimSpace(r.Header.Get(h)); v != "" {
			claimed = append(claimed, fmt.Sprintf("%s %q", h, truncateRunes(v, 64)))
		}
	}
	if len(claimed) == 0 {
		return "noauth (no user known)"
	}
	return "noauth (unverified " + strings.Join(claimed, ", ") + ")"
}

// truncateRunes cuts s to at most n runes.
func truncateRunes(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n]) + "…"
	}
	return s
}

func (s *Server) requireAuth(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.auth != nil && !s.auth.Authenticate(r) {
			w.Header().Set("WWW-Authenticate", `Basic realm="anvil"`)
			s.writeError(w, r, errf(http.StatusUnauthorized, "Authentication required"))
			return
		}
		markAuthenticated(r.Context())
		az := s.currentAuthz()
		c := s.identify(r, az)
		if c == nil {
			user, _, _ := r.BasicAuth()
			s.writeError(w, r, errf(http.StatusForbidden, "User %q has no role: an administrator must add it to the users file", user))
			return
		}
		r2, err := s.authorize(r, c, az)
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		next.ServeHTTP(w, r2)
	})
}
