package bmc

import (
	"bytes"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type bodyRoundTripper []byte

func (b bodyRoundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: 200, Header: http.Header{}, Body: io.NopCloser(bytes.NewReader(b)), Request: req}, nil
}

// TestNoteHealthPassesEveryDocumentOn: the transport reads the health of a
// ComputerSystem on its way to bmclib and hands the document on byte for
// byte, a huge one too (its health then unknown); other paths are not
// read.
func TestNoteHealthPassesEveryDocumentOn(t *testing.T) {
	small := []byte(`{"PowerState":"On","Status":{"Health":"Warning"}}`)
	huge := []byte(`{"Status":{"Health":"Critical"},"Pad":"` + strings.Repeat("x", maxSystemDoc) + `"}`)
	for _, c := range []struct {
		name, path string
		body       []byte
		want       Health
	}{
		{"system", "/redfish/v1/Systems/1", small, HealthWarning},
		{"huge system", "/redfish/v1/Systems/1", huge, HealthUnknown},
		{"not a system", "/redfish/v1/Systems/1/Bios", small, HealthUnknown},
	} {
		t.Run(c.name, func(t *testing.T) {
			tr := &redfishTransport{base: bodyRoundTripper(c.body), missing: map[string]bool{}}
			req, err := http.NewRequest(http.MethodGet, "http://bmc"+c.path, nil)
			require.NoError(t, err)
			resp, err := tr.RoundTrip(req)
			require.NoError(t, err)
			got, err := io.ReadAll(resp.Body)
			require.NoError(t, err)
			require.NoError(t, resp.Body.Close())
			assert.Equal(t, len(c.body), len(got))
			assert.True(t, bytes.Equal(c.body, got))
			assert.Equal(t, c.want, tr.systemHealth())
		})
	}
}
