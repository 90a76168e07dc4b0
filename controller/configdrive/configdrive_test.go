package configdrive

import (
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/diskfs/go-diskfs/backend/file"
	"github.com/diskfs/go-diskfs/filesystem/iso9660"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// readISO opens an ISO image with go-diskfs's reader.
func readISO(t *testing.T, iso []byte) *iso9660.FileSystem {
	t.Helper()
	p := filepath.Join(t.TempDir(), "cd.iso")
	require.NoError(t, os.WriteFile(p, iso, 0o600))
	f, err := os.Open(p)
	require.NoError(t, err)
	t.Cleanup(func() { f.Close() })
	fsys, err := iso9660.Read(file.New(f, true), int64(len(iso)), 0, 2048)
	require.NoError(t, err)
	return fsys
}

// ISOLabel reads the primary volume descriptor's volume identifier.
func isoLabel(iso []byte) string {
	pvd := iso[16*2048:]
	return strings.TrimRight(string(pvd[40:72]), " ")
}

func TestBuildWritesOpenStackLayout(t *testing.T) {
	cd := map[string]any{
		"meta_data":    map[string]any{"hostname": "worker-0", "public_keys": map[string]any{"0": "ssh-ed25519 AAAA"}},
		"user_data":    "#cloud-config\nhostname: worker-0\n",
		"network_data": map[string]any{"links": []any{map[string]any{"id": "eth0", "type": "phy"}}},
		"vendor_data":  map[string]any{"k": "v"},
	}
	iso, err := Build("1be26c0b-03f2-4d2e-ae87-c02d7f33c123", "node-0", cd)
	require.NoError(t, err)
	assert.Equal(t, Label, isoLabel(iso))
	fsys := readISO(t, iso)
	for _, v := range []string{"2012-08-10", "latest"} {
		meta, err := fsys.ReadFile("openstack/" + v + "/meta_data.json")
		require.NoError(t, err, v)
		var m map[string]any
		require.NoError(t, json.Unmarshal(meta, &m))
		assert.Equal(t, "1be26c0b-03f2-4d2e-ae87-c02d7f33c123", m["uuid"], "the node's uuid is added")
		assert.Equal(t, "node-0", m["name"])
		assert.Equal(t, "worker-0", m["hostname"])
		ud, err := fsys.ReadFile("openstack/" + v + "/user_data")
		require.NoError(t, err)
		assert.Equal(t, "#cloud-config\nhostname: worker-0\n", string(ud))
		nd, err := fsys.ReadFile("openstack/" + v + "/network_data.json")
		require.NoError(t, err)
		assert.JSONEq(t, `{"links":[{"id":"eth0","type":"phy"}]}`, string(nd))
		vd, err := fsys.ReadFile("openstack/" + v + "/vendor_data2.json")
		require.NoError(t, err)
		assert.JSONEq(t, `{"k":"v"}`, string(vd))
	}
	// the caller's object is not changed (instance_info keeps what was sent)
	assert.NotContains(t, cd["meta_data"], "uuid")
}

func TestBuildUserDataForms(t *testing.T) {
	for name, tc := range map[string]struct {
		userData any
		want     string // "" = no user_data file
	}{
		"object as JSON": {map[string]any{"ignition": map[string]any{"version": "3.2.0"}}, `{"ignition":{"version":"3.2.0"}}`},
		"array as JSON":  {[]any{"a", 1.0}, `["a",1]`},
		"null":           {nil, ""},
		"empty string":   {"", ""},
	} {
		t.Run(name, func(t *testing.T) {
			iso, err := Build("u", "", map[string]any{"meta_data": map[string]any{"uuid": "given", "name": "mine"}, "user_data": tc.userData})
			require.NoError(t, err)
			fsys := readISO(t, iso)
			ud, err := fsys.ReadFile("openstack/latest/user_data")
			if tc.want == "" {
				assert.Error(t, err)
			} else {
				require.NoError(t, err)
				assert.Equal(t, tc.want, string(ud))
			}
			meta, err := fsys.ReadFile("openstack/latest/meta_data.json")
			require.NoError(t, err)
			assert.JSONEq(t, `{"uuid":"given","name":"mine"}`, string(meta), "given uuid and name are kept")
		})
	}
}

func gzipB64(t *testing.T, b []byte) string {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	_, err := zw.Write(b)
	require.NoError(t, err)
	require.NoError(t, zw.Close())
	return base64.StdEncoding.EncodeToString(buf.Bytes())
}

func TestValidate(t *testing.T) {
	for name, tc := range map[string]struct {
		v       any
		wantErr string
	}{
		"nil":             {nil, ""},
		"object":          {map[string]any{"meta_data": map[string]any{}, "user_data": "x"}, ""},
		"url":             {"https://example.com/cd.gz", ""},
		"base64":          {"H4sIAAAA\nAAAA", ""},
		"unknown key":     {map[string]any{"userdata": "x"}, "Additional properties are not allowed ('userdata' was unexpected)"},
		"meta_data list":  {map[string]any{"meta_data": []any{}}, "meta_data must be an object"},
		"user_data bool":  {map[string]any{"user_data": true}, "user_data must be an object, an array, a string or null"},
		"not base64":      {"{not json", "it is neither a JSON, nor a URL, nor a base64 string"},
		"ftp url":         {"ftp://example.com/cd", "must be http:// or https://"},
		"number":          {3.0, "a number is not valid"},
		"vendor_data str": {map[string]any{"vendor_data": "x"}, "vendor_data must be an object"},
	} {
		t.Run(name, func(t *testing.T) {
			err := Validate(tc.v)
			if tc.wantErr == "" {
				assert.NoError(t, err)
				return
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), "Invalid configdrive format")
			assert.Contains(t, err.Error(), tc.wantErr)
		})
	}
}

func TestForAgent(t *testing.T) {
	iso, err := Build("u", "", map[string]any{})
	require.NoError(t, err)
	good := gzipB64(t, iso)
	notGzip := base64.StdEncoding.EncodeToString([]byte("an ISO that is not gzipped"))
	bomb := gzipB64(t, make([]byte, MaxISOBytes+1))
	for name, tc := range map[string]struct {
		v       any
		want    string // exact result, or "" with wantISO
		wantISO bool
		wantErr string
	}{
		"none":           {v: nil},
		"empty string":   {v: ""},
		"url passed on":  {v: "http://192.0.2.1/cd.gz", want: "http://192.0.2.1/cd.gz"},
		"base64 as is":   {v: good, want: good},
		"object built":   {v: map[string]any{"user_data": "hi"}, wantISO: true},
		"bad base64":     {v: "H4sI*", wantErr: "not base64 encoded"},
		"not gzip":       {v: notGzip, wantErr: "not gzipped"},
		"too big":        {v: bomb, wantErr: "larger than 67108864 bytes once decompressed"},
		"ftp url":        {v: "ftp://x/y", wantErr: "http:// or https://"},
		"bad object":     {v: map[string]any{"x": 1.0}, wantErr: "Additional properties"},
		"too big inline": {v: gzipB64(t, randomBytes(MaxInlineBytes)), wantErr: "give its URL"},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := ForAgent("1be26c0b-03f2-4d2e-ae87-c02d7f33c123", "n", tc.v)
			if tc.wantErr != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tc.wantErr)
				return
			}
			require.NoError(t, err)
			if !tc.wantISO {
				assert.Equal(t, tc.want, got)
				return
			}
			iso, err := Decode(got)
			require.NoError(t, err)
			ud, err := readISO(t, iso).ReadFile("openstack/latest/user_data")
			require.NoError(t, err)
			assert.Equal(t, "hi", string(ud))
		})
	}
}

// randomBytes are incompressible, deterministic bytes.
func randomBytes(n int) []byte {
	b := make([]byte, n)
	x := uint32(2463534242)
	for i := range b {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		b[i] = byte(x)
	}
	return b
}
