package controller

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/bcrypt"

	"github.com/anvil-metal/anvil/controller/api"
	"github.com/anvil-metal/anvil/controller/store/sqlite"
)

func TestLoadAuthzRefusals(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(content), 0o600))
		return p
	}
	_, err := loadAuthz(Config{Auth: "noauth", UsersFile: write("u1", "alice admin system\n")})
	assert.ErrorContains(t, err, "use it with --auth http_basic")
	_, err = loadAuthz(Config{Auth: "http_basic", UsersFile: write("u2", "alice admin system\nbob boss system\n")})
	assert.ErrorContains(t, err, "users file line 2: role \"boss\"")
	_, err = loadAuthz(Config{Auth: "http_basic", PolicyFile: write("p1", "baremetal:node:get: role:admin\nbaremetal:nodes:get: role:admin\n")})
	assert.ErrorContains(t, err, "policy file line 2: unknown rule \"baremetal:nodes:get\"")
	az, err := loadAuthz(Config{Auth: "http_basic"})
	require.NoError(t, err)
	assert.Nil(t, az.Users, "no users file: every account is a system admin")
}

// TestUsersFileReloadedOnSIGHUP: a users (or htpasswd) file edited and
// signalled takes effect for the next request; a broken edit keeps the
// last good one.
func TestUsersFileReloadedOnSIGHUP(t *testing.T) {
	dir := t.TempDir()
	users := filepath.Join(dir, "users")
	require.NoError(t, os.WriteFile(users, []byte("carol reader project:acme\n"), 0o600))
	hash, err := bcrypt.GenerateFromPassword([]byte("pw"), bcrypt.MinCost)
	require.NoError(t, err)
	htpasswd := filepath.Join(dir, "htpasswd")
	require.NoError(t, os.WriteFile(htpasswd, []byte("carol:"+string(hash)+"\n"), 0o600))
	cfg := Config{Auth: "http_basic", HTPasswd: htpasswd, UsersFile: users, Listen: "127.0.0.1:0"}
	h, err := authenticator(cfg)
	require.NoError(t, err)
	passwords := newSwapAuth(h)
	auth, err := newCachedAuth(passwords, time.Minute)
	require.NoError(t, err)
	az, err := loadAuthz(cfg)
	require.NoError(t, err)
	st, err := sqlite.Open(context.Background(), ":memory:")
	require.NoError(t, err)
	defer st.Close()
	srv := api.New(api.Config{Store: st, Auth: auth, Authz: az})
	ts := httptest.NewServer(srv)
	defer ts.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stop := reloadAuthzOnHUP(ctx, cfg, srv, passwords, auth, slog.New(slog.DiscardHandler))
	defer stop()

	chassis := func() int {
		req, _ := http.NewRequest("GET", ts.URL+"/v1/chassis", nil)
		req.SetBasicAuth("carol", "pw")
		res, err := ts.Client().Do(req)
		require.NoError(t, err)
		res.Body.Close()
		return res.StatusCode
	}
	require.Equal(t, http.StatusForbidden, chassis(), "a project reader may not list chassis")
	hup := func(content string, want int) {
		require.NoError(t, os.WriteFile(users, []byte(content), 0o600))
		require.NoError(t, syscall.Kill(os.Getpid(), syscall.SIGHUP))
		deadline := time.Now().Add(2 * time.Second)
		for chassis() != want {
			if time.Now().After(deadline) {
				t.Fatalf("after SIGHUP with %q: still not %d", content, want)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	hup("carol reader system\n", http.StatusOK)
	require.NoError(t, os.WriteFile(users, []byte("carol ruler system\n"), 0o600))
	require.NoError(t, syscall.Kill(os.Getpid(), syscall.SIGHUP))
	time.Sleep(100 * time.Millisecond)
	assert.Equal(t, http.StatusOK, chassis(), "a refused file leaves the last good one in force")
	hup("dave admin system\n", http.StatusForbidden)

	// the htpasswd file too: carol's new password, and the cached old one
	// no longer works
	hash2, err := bcrypt.GenerateFromPassword([]byte("new"), bcrypt.MinCost)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(htpasswd, []byte("carol:"+string(hash2)+"\n"), 0o600))
	hup("carol reader system\n", http.StatusUnauthorized)
}
