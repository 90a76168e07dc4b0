package redact

import (
	"errors"
	"net/url"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestURL(t *testing.T) {
	for in, want := range map[string]string{
		"https://user:secret@images.example/a.iso?X-Amz-Signature=abc#frag": "https://images.example/a.iso",
		"http://10.0.0.1/data.iso":       "http://10.0.0.1/data.iso",
		"http://10.0.0.1/data.iso?":      "http://10.0.0.1/data.iso",
		"http://[::1]:namedport/x":       unparseable,
		unparseable:                      unparseable,
		"swift://container/obj?temp=sig": "swift://container/obj",
	} {
		assert.Equal(t, want, URL(in), in)
		assert.Equal(t, want, URL(URL(in)), "twice: %s", in)
	}
}

func TestErrors(t *testing.T) {
	inner := &url.Error{Op: "Get", URL: "https://u:p@host/x?sig=1", Err: errors.New("refused")}
	other := &url.Error{Op: "Get", URL: "https://host/y?token=2", Err: errors.New("timeout")}
	// redacted where the client returns them, before anything formats
	// their text into another message
	err := errors.Join(inner, other)
	Errors(err)
	assert.NotContains(t, err.Error(), "sig=1")
	assert.NotContains(t, err.Error(), "u:p")
	assert.NotContains(t, err.Error(), "token=2")
	assert.Contains(t, err.Error(), "https://host/x")
	Errors(nil)
}
