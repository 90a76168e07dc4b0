package docscheck

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestQuotesHideCommentsAndSeparators: a "#" or a separator inside quotes
// belongs to the command; outside, it ends or splits it.
func TestQuotesHideCommentsAndSeparators(t *testing.T) {
	assert.Equal(t, "echo 'a # b' ", stripComment("echo 'a # b' # note"))
	assert.Equal(t, `curl "x#y"`, stripComment(`curl "x#y"`))
	assert.Equal(t, "a#b ", stripComment("a#b # é"))
	assert.Equal(t, []string{"a ", " echo 'x && y; z' ", " b", ""}, splitList("a && echo 'x && y; z' || b;"))
	assert.Equal(t, []string{`echo "it's"`, " c"}, splitList(`echo "it's"; c`))
}
