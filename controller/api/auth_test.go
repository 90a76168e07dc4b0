package api

import (
	"net/http"
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
