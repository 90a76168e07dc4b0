package conductor

import (
	"context"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/bmc"
	"github.com/anvil-metal/anvil/controller/store"
)

func TestUpdateSettingsOrderAndShape(t *testing.T) {
	got, err := updateSettings(map[string]any{"settings": []any{
		map[string]any{"component": "nic:NIC.1", "url": "https://x.test/nic"},
		map[string]any{"component": "bios", "url": "http://x.test/bios", "wait": float64(30), "version": "2.0"},
		map[string]any{"component": "bmc", "url": "http://x.test/bmc"},
	}})
	require.NoError(t, err)
	var order []string
	for _, s := range got {
		order = append(order, s.Component)
	}
	assert.Equal(t, []string{"bmc", "bios", "nic:NIC.1"}, order, "BMC, then BIOS, then NICs")
	assert.Equal(t, 30, got[1].Wait)
	assert.Equal(t, "2.0", got[1].Version)

	bad := []struct {
		args    map[string]any
		wantErr string
	}{
		{map[string]any{}, "non-empty list"},
		{map[string]any{"settings": []any{}}, "non-empty list"},
		{map[string]any{"settings": "bmc"}, "non-empty list"},
		{map[string]any{"settings": []any{"bmc"}}, "must be an object"},
		{map[string]any{"settings": []any{map[string]any{"component": "bmc"}}}, "is not an http or https URL"},
		{map[string]any{"settings": []any{map[string]any{"component": "nic:", "url": "http://x.test/"}}}, "is not bios, bmc or nic:<id>"},
		{map[string]any{"settings": []any{map[string]any{"component": 1, "url": "http://x.test/"}}}, "component must be a string"},
		{map[string]any{"settings": []any{map[string]any{"component": "bmc", "url": "http://x.test/", "wait": -1.0}}}, "whole seconds"},
		{map[string]any{"settings": []any{map[string]any{"component": "bmc", "url": "http://x.test/", "wait": 1.5}}}, "whole seconds"},
		{map[string]any{"settings": []any{map[string]any{"component": "bmc", "url": "http:///nohost"}}}, "not an http or https URL"},
	}
	for _, b := range bad {
		_, err := updateSettings(b.args)
		require.Error(t, err, "%v", b.args)
		assert.Contains(t, err.Error(), b.wantErr)
	}
}

func TestParseChecksum(t *testing.T) {
	s256 := sha256.Sum256([]byte("x"))
	s512 := sha512.Sum512([]byte("x"))
	for _, ok := range []string{hex.EncodeToString(s256[:]), "sha256:" + hex.EncodeToString(s256[:]), hex.EncodeToString(s512[:]), "sha512:" + hex.EncodeToString(s512[:])} {
		_, _, err := parseChecksum(ok)
		assert.NoError(t, err, ok)
	}
	for _, bad := range []string{"", "xyz", "md5:" + hex.EncodeToString(s256[:16]), "sha512:" + hex.EncodeToString(s256[:]), "abcd"} {
		_, _, err := parseChecksum(bad)
		assert.Error(t, err, bad)
	}
}

func TestCheckImage(t *testing.T) {
	img := []byte("firmware image")
	sum := sha256.Sum256(img)
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/fw.bin" {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write(img)
	}))
	defer ts.Close()
	ctx := context.Background()
	require.NoError(t, checkImage(ctx, ts.Client(), firmwareSetting{URL: ts.URL + "/fw.bin", Checksum: hex.EncodeToString(sum[:])}))
	other := sha256.Sum256([]byte("other"))
	err := checkImage(ctx, ts.Client(), firmwareSetting{URL: ts.URL + "/fw.bin", Checksum: hex.EncodeToString(other[:])})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "nothing was flashed")
	err = checkImage(ctx, ts.Client(), firmwareSetting{URL: ts.URL + "/none.bin", Checksum: hex.EncodeToString(sum[:])})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "404")
}

func TestBaseline(t *testing.T) {
	comps := []bmc.FirmwareComponent{{Component: "bios", Version: "2.19.1"}, {Component: "bmc", Version: "1.00.00"}, {Component: "nic:NIC.1", Version: "20.5.13"}}
	tests := []struct {
		name    string
		node    map[string]any
		args    map[string]any
		wantErr string // from parsing or checking; "" passes
	}{
		{name: "argument met", args: map[string]any{"baseline": map[string]any{"bios": "2.19.1", "bmc": []any{"1.00.00", "1.10.00"}}}},
		{name: "property as JSON text, met", node: map[string]any{"firmware_baseline": `{"nic:NIC.1": "20.5.13"}`}},
		{name: "property as a map, not met", node: map[string]any{"firmware_baseline": map[string]any{"bmc": "2.00.00", "bios": "2.19.1"}},
			wantErr: "firmware differs from the baseline: bmc runs 1.00.00, the baseline allows 2.00.00"},
		{name: "argument wins over the property", node: map[string]any{"firmware_baseline": map[string]any{"bmc": "9"}}, args: map[string]any{"baseline": map[string]any{"bmc": "1.00.00"}}},
		{name: "a component the BMC lacks", args: map[string]any{"baseline": map[string]any{"nic:NIC.2": "1"}}, wantErr: "nic:NIC.2: the BMC reports no such component"},
		{name: "several differ, each named", args: map[string]any{"baseline": map[string]any{"bmc": "2", "bios": "3"}},
			wantErr: "bios runs 2.19.1, the baseline allows 3; bmc runs 1.00.00, the baseline allows 2"},
		{name: "none", wantErr: "no firmware baseline"},
		{name: "bad JSON text", node: map[string]any{"firmware_baseline": "{bmc"}, wantErr: "properties.firmware_baseline is not a JSON object"},
		{name: "empty list", args: map[string]any{"baseline": map[string]any{"bmc": []any{}}}, wantErr: "bmc allows no version"},
		{name: "unknown component", args: map[string]any{"baseline": map[string]any{"cpld": "1"}}, wantErr: `component "cpld"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := baselineArg(&store.Node{Properties: tt.node}, tt.args)
			if err == nil {
				err = b.check(comps)
			}
			if tt.wantErr == "" {
				assert.NoError(t, err)
				return
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.wantErr)
		})
	}
}

// A baseline may name disks the BMC reports, which anvil does not flash.
func TestBaselineNamesDisks(t *testing.T) {
	b, err := baselineArg(&store.Node{}, map[string]any{"baseline": map[string]any{"disk:Disk.Bay.0": "1.2"}})
	require.NoError(t, err)
	err = b.check([]bmc.FirmwareComponent{{Component: "disk:Disk.Bay.0", Version: "1.1"}})
	assert.ErrorContains(t, err, "disk:Disk.Bay.0 runs 1.1, the baseline allows 1.2")
	_, err = updateSettings(map[string]any{"settings": []any{map[string]any{"component": "disk:Disk.Bay.0", "url": "http://x.test/d"}}})
	assert.ErrorContains(t, err, "is not bios, bmc or nic:<id>", "disks are read and checked, not flashed")
}
