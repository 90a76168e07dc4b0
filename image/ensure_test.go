package image

import (
	"bytes"
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestEnsureToolsPresentRunsNothing(t *testing.T) {
	var out bytes.Buffer
	require.NoError(t, EnsureTools(context.Background(), &out, "test", Tool{Command: "sh", Package: "dash"}, Tool{Command: "go", Package: "golang"}))
	assert.Empty(t, out.String(), "nothing to install, nothing said")
}
