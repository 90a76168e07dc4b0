package textlist

import (
	"testing"

	"github.com/stretchr/testify/assert"
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
