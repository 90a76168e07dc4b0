package bmc

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/anvil-metal/anvil/internal/redact"
)

func TestSameImage(t *testing.T) {
	for _, tc := range []struct {
		reported, asked string
		same            bool
	}{
		{"http://10.0.0.1/data.iso", "http://10.0.0.1/data.iso", true},
		{"HTTP://Images.Example/data.iso", "http://images.example/data.iso", true},
		{"http://10.0.0.1:80/data.iso", "http://10.0.0.1/data.iso", true},
		{"https://10.0.0.1/data.iso", "https://user:secret@10.0.0.1/data.iso?sig=abc", true},
		{"http://10.0.0.1/other.iso", "http://10.0.0.1/data.iso", false},
		{"http://10.0.0.2/data.iso", "http://10.0.0.1/data.iso", false},
		{"https://10.0.0.1/data.iso", "http://10.0.0.1/data.iso", false},
		{"http://10.0.0.1:8080/data.iso", "http://10.0.0.1/data.iso", false},
		{"", "http://10.0.0.1/data.iso", false},
	} {
		assert.Equal(t, tc.same, sameImage(tc.reported, tc.asked), "%q vs %q", tc.reported, tc.asked)
	}
	assert.Equal(t, "https://10.0.0.1/data.iso", redact.URL("https://user:secret@10.0.0.1/data.iso?sig=abc"))
}
