package main

import (
	"bytes"
	"context"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/bcrypt"

	"github.com/anvil-metal/anvil/controller/api"
	"github.com/anvil-metal/anvil/controller/policy"
	"github.com/anvil-metal/anvil/controller/store/sqlite"
)

// TestWhoami: the CLI says which account, roles and scope the controller
// gives its credentials, with and without a users file.
func TestWhoami(t *testing.T) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, ":memory:")
	require.NoError(t, err)
	defer st.Close()
	hash, err := bcrypt.GenerateFromPassword([]byte("pw"), bcrypt.MinCost)
	require.NoError(t, err)
	auth, err := api.ParseHTPasswd(strings.NewReader("bob:" + string(hash) + "\n"))
	require.NoError(t, err)
	users, err := policy.ParseUsers(strings.NewReader("bob member project:acme\n"))
	require.NoError(t, err)
	for _, c := range []struct {
		name  string
		users *policy.Users
		want  string
	}{
		{"users file", users, "user   bob\nauth   http_basic\nroles  member, reader\nscope  project acme\n"},
		{"none", nil, "user   bob\nauth   http_basic (no users file: every account is a system admin)\nroles  admin, manager, member, reader\nscope  system\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv := httptest.NewServer(api.New(api.Config{Store: st, Auth: auth, Authz: api.Authz{Users: c.users}}))
			defer srv.Close()
			env := map[string]string{"ANVIL_URL": srv.URL, "ANVIL_USERNAME": "bob", "ANVIL_PASSWORD": "pw"}
			var out bytes.Buffer
			require.NoError(t, run(ctx, []string{"whoami"}, strings.NewReader(""), &out, func(k string) string { return env[k] }))
			assert.Equal(t, c.want, out.String())
		})
	}
	srv := httptest.NewServer(api.New(api.Config{Store: st, Auth: auth}))
	defer srv.Close()
	env := map[string]string{"ANVIL_URL": srv.URL, "ANVIL_USERNAME": "bob", "ANVIL_PASSWORD": "wrong"}
	var out bytes.Buffer
	err = run(ctx, []string{"whoami"}, strings.NewReader(""), &out, func(k string) string { return env[k] })
	assert.ErrorContains(t, err, "Authentication required")
}
