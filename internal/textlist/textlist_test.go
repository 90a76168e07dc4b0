package textlist

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestSplit(t *testing.T) {
	for _, tc := range []struct {
		s, sep string
		want   []string
	}{
		{"", ",", nil},
		{" , ,", ",", nil},
		{"eth0", ",", []string{"eth0"}},
		{" eth0, eth1 ,,eth2,", ",", []string{"eth0", "eth1", "eth2"}},
		{"sda <or> sdb<or>", "<or>", []string{"sda", "sdb"}},
	} {
		assert.Equal(t, tc.want, Split(tc.s, tc.sep), "%q", tc.s)
	}
}

func TestLinesSkipsBlanksAndComments(t *testing.T) {
	var got []string
	err := Lines(strings.NewReader("a b\n\n  # note\n  c  \n"), "list", func(n int, line string) error {
		got = append(got, fmt.Sprintf("%d:%s", n, line))
		return nil
	})
	require.NoError(t, err)
	assert.Equal(t, []string{"1:a b", "4:c"}, got)
	stop := errors.New("stop")
	assert.ErrorIs(t, Lines(strings.NewReader("x\ny\n"), "list", func(int, string) error { return stop }), stop)
}
