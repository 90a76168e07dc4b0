package controller

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestRedactURL(t *testing.T) {
	assert.Equal(t, "postgres://anvil:xxxxx@127.0.0.1:5432/anvil?sslmode=disable", redactURL("postgres://anvil:s3cret@127.0.0.1:5432/anvil?sslmode=disable"))
	assert.Equal(t, "postgres://anvil@db/anvil", redactURL("postgres://anvil@db/anvil"))
	assert.Equal(t, "sqlite://./anvil.db", redactURL("sqlite://./anvil.db"))
	_, err := OpenStore(t.Context(), "mysql://root:pw@x/db")
	assert.ErrorContains(t, err, "unsupported database URL")
	assert.NotContains(t, err.Error(), "pw@")
}

func TestWithPoolSize(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"postgres://a@h/db", "postgres://a@h/db?pool_max_conns=7"},
		{"postgresql://a@h/db?sslmode=disable", "postgresql://a@h/db?sslmode=disable&pool_max_conns=7"},
		{"postgres://a@h/db?pool_max_conns=3", "postgres://a@h/db?pool_max_conns=3"}, // the operator's choice wins
		{"sqlite://./anvil.db", "sqlite://./anvil.db"},
	} {
		assert.Equal(t, tc.want, withPoolSize(tc.in, 7), tc.in)
	}
}
