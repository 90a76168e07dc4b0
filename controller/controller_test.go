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
