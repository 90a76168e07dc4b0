package protocol

import (
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func gzipB64(t testing.TB, b []byte) string {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	_, err := zw.Write(b)
	require.NoError(t, err)
	require.NoError(t, zw.Close())
	return base64.StdEncoding.EncodeToString(buf.Bytes())
}

func TestDecodeConfigDrive(t *testing.T) {
	for name, tc := range map[string]struct {
		in      string
		want    string
		wantErr string
	}{
		"gzip base64":          {in: gzipB64(t, []byte("iso")), want: "iso"},
		"wrapped base64":       {in: "H4sIAAAAAAACA8sszgcA\nQX9YYQMAAAA=", want: "iso"},
		"not base64":           {in: "H4sI*AAA", wantErr: "not base64 encoded"},
		"base64 but not gzip":  {in: base64.StdEncoding.EncodeToString([]byte("plain")), wantErr: "not gzipped"},
		"truncated gzip":       {in: "H4sIAAAA", wantErr: "configdrive"},
		"empty once unzipped":  {in: gzipB64(t, nil), wantErr: "empty once decompressed"},
		"larger than 64 MiB":   {in: gzipB64(t, make([]byte, MaxConfigDriveBytes+1)), wantErr: "larger than 67108864 bytes"},
		"exactly 64 MiB is ok": {in: gzipB64(t, make([]byte, MaxConfigDriveBytes)), want: string(make([]byte, MaxConfigDriveBytes))},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := DecodeConfigDrive(tc.in)
			if tc.wantErr != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tc.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, string(got))
		})
	}
}

// FuzzDecodeConfigDrive: any string decodes or fails with an error, never
// panics, and never yields more than the bound.
func FuzzDecodeConfigDrive(f *testing.F) {
	f.Add(gzipB64(f, []byte("iso")))
	f.Add("H4sIAAAA")
	f.Add("")
	f.Add("====")
	f.Add("H4sIAAAAAAACA8sszgcAQX9YYQMAAAA=")
	f.Fuzz(func(t *testing.T, s string) {
		iso, err := DecodeConfigDrive(s)
		if err != nil {
			assert.Nil(t, iso)
			return
		}
		assert.NotEmpty(t, iso)
		assert.LessOrEqual(t, len(iso), MaxConfigDriveBytes)
	})
}
