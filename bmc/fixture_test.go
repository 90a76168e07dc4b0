package bmc_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/bmc"
)

type recorded struct {
	Method, Path string
	Body         map[string]any
}

// fixtureBMC serves testdata/redfish/idrac read-only and records every
// request that would change something, so tests see exactly what bmclib
// sends. Nothing changes: a read-back after a set shows the old state, the
// way a BMC that ignores requests does.
type fixtureBMC struct {
	mu       sync.Mutex
	requests []recorded
}

func (f *fixtureBMC) changes() []recorded {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]recorded(nil), f.requests...)
}

func startFixtureBMC(t *testing.T) (*fixtureBMC, string) {
	t.Helper()
	dir := filepath.Join("..", "testdata", "redfish", "idrac")
	f := &fixtureBMC{}
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		path := strings.TrimSuffix(r.URL.Path, "/")
		if r.Method != http.MethodGet {
			var body map[string]any
			raw, _ := io.ReadAll(r.Body)
			_ = json.Unmarshal(raw, &body)
			f.mu.Lock()
			f.requests = append(f.requests, recorded{r.Method, path, body})
			f.mu.Unlock()
		}
		switch {
		case r.Method == http.MethodPost && path == "/redfish/v1/SessionService/Sessions":
			w.Header().Set("X-Auth-Token", "fixture-token")
			w.Header().Set("Location", "/redfish/v1/SessionService/Sessions/1")
			w.WriteHeader(http.StatusCreated)
			_, _ = io.WriteString(w, `{"@odata.id":"/redfish/v1/SessionService/Sessions/1","Id":"1"}`)
			return
		case r.Method != http.MethodGet:
			w.WriteHeader(http.StatusNoContent)
			return
		case path != "/redfish/v1" && r.Header.Get("X-Auth-Token") != "fixture-token":
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		name := "root"
		if path != "/redfish/v1" {
			name = strings.ReplaceAll(strings.TrimPrefix(path, "/redfish/v1/"), "/", "_")
		}
		b, err := os.ReadFile(filepath.Join(dir, name+".json"))
		if err != nil {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(b)
	}))
	t.Cleanup(ts.Close)
	return f, ts.URL
}

func fixtureTarget(t *testing.T, url string) bmc.Target {
	t.Helper()
	tg, err := bmc.ParseDriverInfo("redfish", map[string]any{
		"redfish_address": url, "redfish_system_id": "/redfish/v1/Systems/System.Embedded.1",
		"redfish_username": "root", "redfish_password": "calvin",
	})
	require.NoError(t, err)
	return tg
}

func TestRedfishFixturePowerState(t *testing.T) {
	f, url := startFixtureBMC(t)
	m := bmc.New(fastConfig(nil))
	for range 3 {
		st, out, err := m.PowerState(context.Background(), fixtureTarget(t, url))
		require.NoError(t, err)
		assert.Equal(t, bmc.PowerOn, st)
		assert.Equal(t, "gofish", out.Provider)
	}
	login := recorded{"POST", "/redfish/v1/SessionService/Sessions", map[string]any{"UserName": "root", "Password": "calvin"}}
	assert.Equal(t, []recorded{login}, f.changes(), "one session for the three operations, kept")
	m.Close(context.Background())
	assert.Equal(t, []recorded{login, {"DELETE", "/redfish/v1/SessionService/Sessions/1", nil}}, f.changes(), "logged out on Close")
}

func TestRedfishFixtureWireFormat(t *testing.T) {
	const reset = "/redfish/v1/Systems/System.Embedded.1/Actions/ComputerSystem.Reset"
	const system = "/redfish/v1/Systems/System.Embedded.1"
	tests := []struct {
		name string
		run  func(*bmc.Manager, bmc.Target) error
		want recorded
	}{
		{
			name: "power off is ForceOff",
			run: func(m *bmc.Manager, tg bmc.Target) error {
				_, err := m.SetPower(context.Background(), tg, bmc.ActionOff)
				return err
			},
			want: recorded{"POST", reset, map[string]any{"ResetType": "ForceOff"}},
		},
		{
			name: "soft off is GracefulShutdown",
			run: func(m *bmc.Manager, tg bmc.Target) error {
				_, err := m.SetPower(context.Background(), tg, bmc.ActionSoftOff)
				return err
			},
			want: recorded{"POST", reset, map[string]any{"ResetType": "GracefulShutdown"}},
		},
		{
			name: "reboot is ForceRestart",
			run: func(m *bmc.Manager, tg bmc.Target) error {
				_, err := m.SetPower(context.Background(), tg, bmc.ActionReboot)
				return err
			},
			want: recorded{"POST", reset, map[string]any{"ResetType": "ForceRestart"}},
		},
		{
			name: "cycle is PowerCycle",
			run: func(m *bmc.Manager, tg bmc.Target) error {
				_, err := m.SetPower(context.Background(), tg, bmc.ActionCycle)
				return err
			},
			want: recorded{"POST", reset, map[string]any{"ResetType": "PowerCycle"}},
		},
		{
			name: "boot pxe once UEFI",
			run: func(m *bmc.Manager, tg bmc.Target) error {
				_, err := m.SetBootDevice(context.Background(), tg, bmc.BootPXE, bmc.BootOptions{EFI: true})
				return err
			},
			want: recorded{"PATCH", system, map[string]any{"Boot": map[string]any{
				"BootSourceOverrideTarget": "Pxe", "BootSourceOverrideEnabled": "Once", "BootSourceOverrideMode": "UEFI",
				// bmclib starts from the system's Boot object and echoes it back.
				"BootOrder": []any{"NIC.Integrated.1-1-1", "RAID.Integrated.1-1"},
			}}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f, url := startFixtureBMC(t)
			cfg := fastConfig(nil)
			cfg.VerifyTimeout = 50 * time.Millisecond
			cfg.SoftPowerOffTimeout = 50 * time.Millisecond
			m := bmc.New(cfg)
			err := tc.run(m, fixtureTarget(t, url))
			// The fixture never changes, so every set fails verification
			// (for reboot/cycle, the node was on and stays on: success).
			if tc.want.Method == "POST" && (tc.want.Body["ResetType"] == "ForceRestart" || tc.want.Body["ResetType"] == "PowerCycle") {
				require.NoError(t, err)
			} else {
				require.ErrorIs(t, err, bmc.ErrVerify)
			}
			var sets []recorded
			for _, r := range f.changes() {
				if !strings.Contains(r.Path, "SessionService") {
					sets = append(sets, r)
				}
			}
			if tc.want.Method == "PATCH" {
				// A boot override that does not read back is set again
				// (idempotent), the same request each time.
				require.NotEmpty(t, sets)
				for _, r := range sets[1:] {
					assert.Equal(t, sets[0], r)
				}
			} else {
				require.Len(t, sets, 1, "exactly one action, no retry of an accepted request")
			}
			got := sets[0]
			assert.Equal(t, tc.want.Method, got.Method)
			assert.Equal(t, tc.want.Path, got.Path)
			if tc.want.Method == "PATCH" {
				gotBoot := got.Body["Boot"].(map[string]any)
				for k, v := range tc.want.Body["Boot"].(map[string]any) {
					assert.Equal(t, v, gotBoot[k], k)
				}
			} else {
				assert.Equal(t, tc.want.Body, got.Body)
			}
		})
	}
}
