package bmc_test

import (
	"context"
	"encoding/pem"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/bmc"
	"github.com/anvil-metal/anvil/bmc/vbmc"
)

func TestRedfishTLSVerification(t *testing.T) {
	srv := vbmc.NewServer(nil, testUser, testPass, vbmc.NewNode("node-1", vbmc.NewMemory()))
	ts := httptest.NewUnstartedServer(srv.Handler())
	ts.Config.ErrorLog = log.New(io.Discard, "", 0) // the failing case logs a handshake error
	ts.StartTLS()
	t.Cleanup(ts.Close)
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	require.NoError(t, os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ts.Certificate().Raw}), 0o600))

	tests := []struct {
		name     string
		verifyCA any // nil: key absent (default true)
		wantErr  bool
	}{
		{"verification off", false, false},
		{"verification off as string", "False", false},
		{"CA bundle", caFile, false},
		{"default verifies against system roots", nil, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			info := map[string]any{"redfish_address": ts.URL, "redfish_username": testUser, "redfish_password": testPass}
			if tc.verifyCA != nil {
				info["redfish_verify_ca"] = tc.verifyCA
			}
			tg, err := bmc.ParseDriverInfo("redfish", info)
			require.NoError(t, err)
			out, err := bmc.New(fastConfig(nil)).Verify(context.Background(), tg)
			if !tc.wantErr {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			assert.NotErrorIs(t, err, bmc.ErrUnreachable)
			assert.Contains(t, err.Error(), "redfish_verify_ca")
			assert.Equal(t, 1, out.Attempts, "certificate errors are not retried")
		})
	}
}
