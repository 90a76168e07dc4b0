package bmc_test

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/bmc"
)

func TestParseDriverInfo(t *testing.T) {
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	require.NoError(t, os.WriteFile(caFile, []byte("not checked here"), 0o600))

	tests := []struct {
		name     string
		hw       string
		info     map[string]any
		want     bmc.Target
		wantErr  error
		problems []string // substrings the error must contain
	}{
		{
			name: "ipmi minimal gets default port",
			hw:   "ipmi",
			info: map[string]any{"ipmi_address": "10.0.0.5"},
			want: bmc.Target{HardwareType: "ipmi", Host: "10.0.0.5", Port: 623},
		},
		{
			name: "ipmi full with string port",
			hw:   "ipmi",
			info: map[string]any{"ipmi_address": "bmc1.example", "ipmi_port": "6230", "ipmi_username": "admin", "ipmi_password": "pw",
				"ipmi_priv_level": "operator", "ipmi_cipher_suite": "17", "deploy_kernel": "ignored"},
			want: bmc.Target{HardwareType: "ipmi", Host: "bmc1.example", Port: 6230, Username: "admin", Password: "pw", PrivLevel: "OPERATOR", CipherSuite: "17"},
		},
		{
			name: "ipmi numeric port and cipher suite (JSON numbers)",
			hw:   "ipmi",
			info: map[string]any{"ipmi_address": "127.0.0.1", "ipmi_port": float64(9623), "ipmi_cipher_suite": 3},
			want: bmc.Target{HardwareType: "ipmi", Host: "127.0.0.1", Port: 9623, CipherSuite: "3"},
		},
		{
			name: "ipmi json.Number port",
			hw:   "ipmi",
			info: map[string]any{"ipmi_address": "::1", "ipmi_port": json.Number("623")},
			want: bmc.Target{HardwareType: "ipmi", Host: "::1", Port: 623},
		},
		{
			name:     "ipmi missing address",
			hw:       "ipmi",
			info:     map[string]any{"ipmi_username": "admin"},
			wantErr:  bmc.ErrInvalidDriverInfo,
			problems: []string{"ipmi_address: required"},
		},
		{
			name:     "ipmi every problem listed at once",
			hw:       "ipmi",
			info:     map[string]any{"ipmi_port": "http", "ipmi_priv_level": "ROOT", "ipmi_cipher_suite": "99"},
			wantErr:  bmc.ErrInvalidDriverInfo,
			problems: []string{"ipmi_address: required", `ipmi_port: "http" is not a port number`, `ipmi_priv_level: "ROOT" is not one of`, `ipmi_cipher_suite: "99"`},
		},
		{
			name:     "ipmi port out of range",
			hw:       "ipmi",
			info:     map[string]any{"ipmi_address": "10.0.0.5", "ipmi_port": 70000},
			wantErr:  bmc.ErrInvalidDriverInfo,
			problems: []string{`ipmi_port: "70000"`},
		},
		{
			name:     "ipmi address with port or URL",
			hw:       "ipmi",
			info:     map[string]any{"ipmi_address": "http://10.0.0.5"},
			wantErr:  bmc.ErrInvalidDriverInfo,
			problems: []string{"not a URL"},
		},
		{
			name:     "ipmi address with port",
			hw:       "ipmi",
			info:     map[string]any{"ipmi_address": "10.0.0.5:623"},
			wantErr:  bmc.ErrInvalidDriverInfo,
			problems: []string{"use ipmi_port"},
		},
		{
			name: "redfish http with port and system",
			hw:   "redfish",
			info: map[string]any{"redfish_address": "http://127.0.0.1:8000", "redfish_system_id": "/redfish/v1/Systems/node-1/",
				"redfish_username": "u", "redfish_password": "p", "redfish_verify_ca": "false"},
			want: bmc.Target{HardwareType: "redfish", Scheme: "http", Host: "127.0.0.1", Port: 8000, SystemID: "/redfish/v1/Systems/node-1", Username: "u", Password: "p"},
		},
		{
			name: "redfish without scheme is https on 443 with verification",
			hw:   "redfish",
			info: map[string]any{"redfish_address": "bmc.example"},
			want: bmc.Target{HardwareType: "redfish", Scheme: "https", Host: "bmc.example", Port: 443, VerifyCA: true},
		},
		{
			name: "redfish IPv6 and CA bundle",
			hw:   "redfish",
			info: map[string]any{"redfish_address": "https://[fd00::5]:8443", "redfish_verify_ca": caFile},
			want: bmc.Target{HardwareType: "redfish", Scheme: "https", Host: "fd00::5", Port: 8443, VerifyCA: true, CAFile: caFile},
		},
		{
			name: "redfish verify_ca bool",
			hw:   "redfish",
			info: map[string]any{"redfish_address": "https://10.1.1.1", "redfish_verify_ca": false},
			want: bmc.Target{HardwareType: "redfish", Scheme: "https", Host: "10.1.1.1", Port: 443},
		},
		{
			name:     "redfish bad scheme",
			hw:       "redfish",
			info:     map[string]any{"redfish_address": "ftp://10.1.1.1"},
			wantErr:  bmc.ErrInvalidDriverInfo,
			problems: []string{`scheme "ftp"`},
		},
		{
			name:     "redfish missing address, bad system id, missing CA file",
			hw:       "redfish",
			info:     map[string]any{"redfish_system_id": "Systems/1", "redfish_verify_ca": "/nonexistent/ca.pem"},
			wantErr:  bmc.ErrInvalidDriverInfo,
			problems: []string{"redfish_address: required", "redfish_system_id", "redfish_verify_ca"},
		},
		{
			name:     "redfish bad port and path",
			hw:       "redfish",
			info:     map[string]any{"redfish_address": "http://10.1.1.1:99999"},
			wantErr:  bmc.ErrInvalidDriverInfo,
			problems: []string{"redfish_address"},
		},
		{
			name:     "redfish path rejected",
			hw:       "redfish",
			info:     map[string]any{"redfish_address": "https://10.1.1.1/some/where"},
			wantErr:  bmc.ErrInvalidDriverInfo,
			problems: []string{"must not have a path"},
		},
		{
			name:     "redfish credentials in URL rejected",
			hw:       "redfish",
			info:     map[string]any{"redfish_address": "https://root:calvin@10.1.1.1"},
			wantErr:  bmc.ErrInvalidDriverInfo,
			problems: []string{"not in the URL"},
		},
		{
			name:     "wrong value type",
			hw:       "ipmi",
			info:     map[string]any{"ipmi_address": []any{"a"}},
			wantErr:  bmc.ErrInvalidDriverInfo,
			problems: []string{"must be a string or number"},
		},
		{
			name: "fake hardware needs nothing",
			hw:   "fake-hardware",
			want: bmc.Target{HardwareType: "fake-hardware"},
		},
		{
			name:    "unknown hardware type",
			hw:      "idrac",
			wantErr: bmc.ErrUnsupported,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := bmc.ParseDriverInfo(tc.hw, tc.info)
			if tc.wantErr != nil {
				require.ErrorIs(t, err, tc.wantErr)
				for _, p := range tc.problems {
					assert.Contains(t, err.Error(), p)
				}
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

func TestParseDriverInfoNeverEchoesPasswords(t *testing.T) {
	_, err := bmc.ParseDriverInfo("ipmi", map[string]any{"ipmi_password": map[string]any{"x": "hunter2"}})
	require.Error(t, err)
	assert.NotContains(t, err.Error(), "hunter2")
}

func TestSecretsAndMasking(t *testing.T) {
	for key, want := range map[string]bool{
		"ipmi_password": true, "redfish_password": true, "REDFISH_PASSWORD": true,
		"snmp_auth_secret": true, "some_token": true, "ipmi_username": false, "redfish_address": false,
	} {
		assert.Equal(t, want, bmc.IsSecret(key), key)
	}
	assert.ElementsMatch(t, []string{"ipmi_password", "redfish_password"}, bmc.SecretKeys())

	in := map[string]any{"ipmi_address": "10.0.0.1", "ipmi_password": "hunter2", "x_token": 42, "empty_secret": nil}
	out := bmc.MaskDriverInfo(in)
	assert.Equal(t, map[string]any{"ipmi_address": "10.0.0.1", "ipmi_password": "******", "x_token": "******", "empty_secret": nil}, out)
	assert.Equal(t, "hunter2", in["ipmi_password"], "input untouched")
}

func TestTargetNeverPrintsPassword(t *testing.T) {
	tg, err := bmc.ParseDriverInfo("ipmi", map[string]any{"ipmi_address": "10.0.0.1", "ipmi_username": "admin", "ipmi_password": "hunter2"})
	require.NoError(t, err)
	var buf syncBuffer
	slog.New(slog.NewJSONHandler(&buf, nil)).Info("x", "bmc", tg)
	assert.Contains(t, buf.String(), "10.0.0.1:623")
	assert.NotContains(t, buf.String(), "hunter2")
	assert.NotContains(t, fmt.Sprintf("%v %s %+v", tg, tg, tg.String()), "hunter2")
}

func TestHardwareTypes(t *testing.T) {
	assert.ElementsMatch(t, []string{"ipmi", "redfish", "fake-hardware"}, bmc.HardwareTypes())
}
