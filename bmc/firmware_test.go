package bmc_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/bmc"
	"github.com/anvil-metal/anvil/bmc/vbmc"
)

// firmwareImages serves firmware images on loopback for anvil-vbmc to pull.
func firmwareImages(t *testing.T, files map[string][]byte) string {
	t.Helper()
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, ok := files[r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write(b)
	}))
	t.Cleanup(ts.Close)
	return ts.URL
}

func versions(comps []bmc.FirmwareComponent) map[string]string {
	out := map[string]string{}
	for _, c := range comps {
		out[c.Component] = c.Version
	}
	return out
}

// waitTask polls the task to its end as the conductor does.
func waitTask(t *testing.T, m *bmc.Manager, tg bmc.Target, uri string) bmc.FirmwareTask {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		tk, _, err := m.FirmwareTask(context.Background(), tg, uri)
		require.NoError(t, err)
		if tk.Finished() || tk.Gone || time.Now().After(deadline) {
			return tk
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestRedfishFirmwareInventoryIsTheSystemsOwn(t *testing.T) {
	env := startVBMC(t, "node-1", "node-2")
	m := bmc.New(fastConfig(nil))
	comps, out, err := m.Firmware(context.Background(), env.target(t, "node-2", testPass))
	require.NoError(t, err)
	assert.Equal(t, "gofish", out.Provider)
	require.Len(t, comps, 3, "bios, bmc and one NIC; node-1's members are not node-2's")
	byName := map[string]bmc.FirmwareComponent{}
	for _, c := range comps {
		byName[c.Component] = c
	}
	bios, _ := env.srv.FirmwareVersion("node-2", vbmc.FirmwareBIOS)
	bmcVersion, _ := env.srv.FirmwareVersion("node-2", vbmc.FirmwareBMC)
	assert.Equal(t, bios, byName["bios"].Version)
	assert.Equal(t, bmcVersion, byName["bmc"].Version)
	assert.Equal(t, "/redfish/v1/UpdateService/FirmwareInventory/node-2-BIOS", byName["bios"].InventoryURI)
	assert.Equal(t, "/redfish/v1/UpdateService/FirmwareInventory/node-2-BMC", byName["bmc"].InventoryURI)
	require.Contains(t, byName, "nic:NIC.1")
	assert.Equal(t, "/redfish/v1/UpdateService/FirmwareInventory/node-2-NIC.1", byName["nic:NIC.1"].InventoryURI)
}

func TestRedfishFirmwareWithTheSystemAtItsUUID(t *testing.T) {
	env := startVBMC(t, "only")
	env.srv.Node("only").SetQuirks(vbmc.Quirks{SystemIDIsUUID: true})
	m := bmc.New(fastConfig(nil))
	comps, _, err := m.Firmware(context.Background(), env.target(t, "", testPass))
	require.NoError(t, err)
	assert.Len(t, comps, 3, "found through the system's own links, whatever its id: %v", versions(comps))
}

func TestRedfishFirmwareUpdate(t *testing.T) {
	images := firmwareImages(t, map[string][]byte{
		"/bmc-2.bin":  vbmc.FirmwareImage(vbmc.FirmwareBMC, "2.00.00", []byte("bmc payload")),
		"/bios-3.bin": vbmc.FirmwareImage(vbmc.FirmwareBIOS, "3.0.0", []byte("bios payload")),
		"/bad.bin":    append(vbmc.FirmwareImage(vbmc.FirmwareBMC, "9.9.9", []byte("x")), 'z'),
	})
	tests := []struct {
		name      string
		component string
		image     string
		opts      vbmc.FirmwareOptions
		wantOK    bool
		wantGone  bool
		wantMsg   string
		active    string // the component's version read after the task, before any reboot
		afterBoot string
	}{
		{name: "bmc, active at once", component: "bmc", image: "/bmc-2.bin", wantOK: true, active: "2.00.00", afterBoot: "2.00.00"},
		{name: "bios, staged until the next boot", component: "bios", image: "/bios-3.bin", wantOK: true, active: "2.19.1", afterBoot: "3.0.0"},
		{name: "corrupt image fails the task", component: "bmc", image: "/bad.bin", wantMsg: "checksum", active: "1.00.00", afterBoot: "1.00.00"},
		{name: "missing image fails the task", component: "bmc", image: "/none.bin", wantMsg: "404", active: "1.00.00", afterBoot: "1.00.00"},
		{name: "task purged when done (iDRAC)", component: "bmc", image: "/bmc-2.bin", opts: vbmc.FirmwareOptions{PurgeCompletedTasks: true},
			wantGone: true, active: "2.00.00", afterBoot: "2.00.00"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := startVBMC(t, "node-1", "node-2")
			tt.opts.UpdateDuration = 50 * time.Millisecond
			env.srv.SetFirmwareOptions(tt.opts)
			m := bmc.New(fastConfig(nil))
			tg := env.target(t, "node-1", testPass)
			ctx := context.Background()
			comps, _, err := m.Firmware(ctx, tg)
			require.NoError(t, err)
			var target bmc.FirmwareComponent
			for _, c := range comps {
				if c.Component == tt.component {
					target = c
				}
			}
			require.NotEmpty(t, target.InventoryURI)
			uri, _, err := m.UpdateFirmware(ctx, tg, target, images+tt.image)
			require.NoError(t, err)
			assert.Contains(t, uri, "/redfish/v1/TaskService/Tasks/")
			tk := waitTask(t, m, tg, uri)
			assert.Equal(t, tt.wantOK, tk.Succeeded(), "task %+v", tk)
			assert.Equal(t, tt.wantGone, tk.Gone)
			if tt.wantMsg != "" {
				assert.True(t, tk.Failed())
				assert.Contains(t, tk.Message(), tt.wantMsg)
			}
			comps, _, err = m.Firmware(ctx, tg)
			require.NoError(t, err)
			assert.Equal(t, tt.active, versions(comps)[tt.component])
			_, err = m.SetPower(ctx, tg, bmc.ActionOn)
			require.NoError(t, err)
			comps, _, err = m.Firmware(ctx, tg)
			require.NoError(t, err)
			assert.Equal(t, tt.afterBoot, versions(comps)[tt.component])
			other, _, err := m.Firmware(ctx, env.target(t, "node-2", testPass))
			require.NoError(t, err)
			assert.NotEqual(t, "2.00.00", versions(other)["bmc"], "node-2 untouched")
			assert.NotEqual(t, "3.0.0", versions(other)["bios"], "node-2 untouched")
		})
	}
}

func TestRedfishFirmwareStalledTaskStaysRunning(t *testing.T) {
	images := firmwareImages(t, map[string][]byte{"/bmc.bin": vbmc.FirmwareImage(vbmc.FirmwareBMC, "2", nil)})
	env := startVBMC(t, "node-1")
	env.srv.SetFirmwareOptions(vbmc.FirmwareOptions{StallTasks: true, UpdateDuration: 10 * time.Millisecond})
	m := bmc.New(fastConfig(nil))
	tg := env.target(t, "node-1", testPass)
	uri, _, err := m.UpdateFirmware(context.Background(), tg, bmc.FirmwareComponent{Component: "bmc"}, images+"/bmc.bin")
	require.NoError(t, err, "no target: the only node's image component")
	time.Sleep(100 * time.Millisecond)
	tk, _, err := m.FirmwareTask(context.Background(), tg, uri)
	require.NoError(t, err)
	assert.False(t, tk.Finished())
	assert.Equal(t, "Running", tk.State)
	assert.Equal(t, 50, tk.Percent)
}

func TestIPMIHasNoFirmware(t *testing.T) {
	m := bmc.New(fastConfig(nil))
	tg, err := bmc.ParseDriverInfo("ipmi", map[string]any{"ipmi_address": "127.0.0.1", "ipmi_username": "u", "ipmi_password": "p"})
	require.NoError(t, err)
	_, _, err = m.Firmware(context.Background(), tg)
	require.ErrorIs(t, err, bmc.ErrUnsupported)
	assert.Contains(t, err.Error(), "not supported by the ipmi driver")
	_, _, err = m.UpdateFirmware(context.Background(), tg, bmc.FirmwareComponent{Component: "bmc"}, "http://127.0.0.1/x")
	require.ErrorIs(t, err, bmc.ErrUnsupported)
}
