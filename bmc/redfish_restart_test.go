package bmc_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/bmc"
	"github.com/anvil-metal/anvil/bmc/vbmc"
)

// A soft reboot over Redfish is ComputerSystem.Reset GracefulRestart when
// the system offers it (Ironic's redfish power interface): the power never
// goes off, which nodes with disable_power_off rely on. A BMC without it
// gets soft off + on, as before.
func TestRedfishSoftRebootIsGracefulRestart(t *testing.T) {
	for _, tc := range []struct {
		name       string
		offered    bool
		wantResets []string
	}{
		{"offered: GracefulRestart", true, []string{"GracefulRestart"}},
		{"not offered: soft off, then on", false, []string{"GracefulShutdown", "On"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mem := vbmc.NewMemory()
			ctx := context.Background()
			require.NoError(t, mem.PowerOn(ctx, vbmc.BootDisk))
			srv := vbmc.NewServer(nil, testUser, testPass, vbmc.NewNode("node-1", mem))
			var mu sync.Mutex
			var resets []string
			h := srv.Handler()
			ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/Actions/ComputerSystem.Reset") {
					raw, _ := io.ReadAll(r.Body)
					var body struct{ ResetType string }
					_ = json.Unmarshal(raw, &body)
					mu.Lock()
					resets = append(resets, body.ResetType)
					mu.Unlock()
					r.Body = io.NopCloser(bytes.NewReader(raw))
				}
				if tc.offered || r.Method != http.MethodGet || r.URL.Path != "/redfish/v1/Systems/node-1" {
					h.ServeHTTP(w, r)
					return
				}
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, r)
				var doc map[string]any
				require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &doc))
				reset := doc["Actions"].(map[string]any)["#ComputerSystem.Reset"].(map[string]any)
				types := reset["ResetType@Redfish.AllowableValues"].([]any)
				reset["ResetType@Redfish.AllowableValues"] = slices.DeleteFunc(types, func(v any) bool { return v == "GracefulRestart" })
				w.Header().Set("Content-Type", "application/json")
				_ = json.NewEncoder(w).Encode(doc)
			}))
			t.Cleanup(ts.Close)
			tg, err := bmc.ParseDriverInfo("redfish", map[string]any{"redfish_address": ts.URL, "redfish_username": testUser,
				"redfish_password": testPass, "redfish_system_id": "/redfish/v1/Systems/node-1"})
			require.NoError(t, err)

			_, err = bmc.New(fastConfig(nil)).SetPower(ctx, tg.WithID("node-1"), bmc.ActionSoftReboot)
			require.NoError(t, err)
			mu.Lock()
			defer mu.Unlock()
			assert.Equal(t, tc.wantResets, resets)
			on, _ := mem.On(ctx)
			assert.True(t, on)
			boots, _ := mem.Boots()
			assert.Equal(t, 2, boots, "the soft reboot booted the node once more")
		})
	}
}
