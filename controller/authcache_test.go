package controller

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/bcrypt"

	"github.com/anvil-metal/anvil/controller/api"
)

// counter counts the expensive checks it is asked for.
type counter struct {
	next  api.Authenticator
	calls int
}

func (c *counter) Authenticate(r *http.Request) bool {
	c.calls++
	return c.next.Authenticate(r)
}

func TestCachedAuth(t *testing.T) {
	hash, err := bcrypt.GenerateFromPassword([]byte("pw"), bcrypt.MinCost)
	require.NoError(t, err)
	ht, err := api.ParseHTPasswd(strings.NewReader("op:" + string(hash) + "\n"))
	require.NoError(t, err)
	inner := &counter{next: ht}
	c, err := newCachedAuth(inner, 50*time.Millisecond)
	require.NoError(t, err)
	req := func(user, pass string) bool {
		r := httptest.NewRequest("GET", "/v1/nodes", nil)
		if user != "" {
			r.SetBasicAuth(user, pass)
		}
		return c.Authenticate(r)
	}
	assert.True(t, req("op", "pw"))
	assert.True(t, req("op", "pw"))
	assert.Equal(t, 1, inner.calls, "the second request is answered from the cache")
	assert.False(t, req("op", "wrong"))
	assert.False(t, req("op", "wrong"))
	assert.Equal(t, 3, inner.calls, "failures are never cached")
	assert.False(t, req("", ""))
	assert.False(t, req("op2", "pw"))
	time.Sleep(60 * time.Millisecond)
	assert.True(t, req("op", "pw"))
	assert.Equal(t, 6, inner.calls, "an expired entry is checked again")
	for k := range c.ok {
		assert.NotContains(t, string(k[:]), "pw", "only a keyed hash is kept")
	}
}
