//go:build vm

package bmc_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/bmc"
	"github.com/anvil-metal/anvil/bmc/vbmc"
)

// cdMedium asks QEMU (query-block over QMP) what its CD drive holds.
func cdMedium(t *testing.T, q *vbmc.QEMU) string {
	t.Helper()
	raw, err := vbmc.QMP(context.Background(), q.QMPSocket(), "query-block", nil)
	require.NoError(t, err)
	var blocks []struct {
		Device   string `json:"device"`
		Inserted *struct {
			File string `json:"file"`
		} `json:"inserted"`
	}
	require.NoError(t, json.Unmarshal(raw, &blocks))
	for _, b := range blocks {
		if strings.HasPrefix(b.Device, "cd0") {
			if b.Inserted == nil {
				return ""
			}
			return b.Inserted.File
		}
	}
	t.Fatalf("no CD drive in %s", raw)
	return ""
}

// The vmedia API's BMC side against a real QEMU node: an attached data
// image is in QEMU's CD drive (not only in the vbmc's bookkeeping), the
// slot reads back from Redfish, detach empties the drive, and the vbmc's
// EventService tells a subscriber about the power on and the insert.
func TestVMDataImageInQEMUAndEvents(t *testing.T) {
	if _, err := exec.LookPath("qemu-system-x86_64"); err != nil {
		t.Skipf("qemu-system-x86_64 not installed: %v", err)
	}
	q, err := vbmc.NewQEMU(nil, vbmc.QEMUConfig{StateDir: t.TempDir(), MemoryMiB: 128, VirtualMedia: true,
		Disks: []vbmc.QEMUDisk{{Path: "d.raw", SizeMiB: 8}}, ShutdownTimeoutSeconds: 1})
	require.NoError(t, err)
	t.Cleanup(func() { _ = q.Close() })
	srv := vbmc.NewServer(nil, testUser, testPass, vbmc.NewNode("vm-1", q))
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(ts.Close)
	iso := filepath.Join(t.TempDir(), "data.iso")
	require.NoError(t, os.WriteFile(iso, make([]byte, 64<<10), 0o600))
	files := httptest.NewServer(http.FileServer(http.Dir(filepath.Dir(iso))))
	t.Cleanup(files.Close)
	dest, events := subscriber(t)

	ctx := context.Background()
	m := bmc.New(vmConfig())
	tg, err := bmc.ParseDriverInfo("redfish", map[string]any{"redfish_address": ts.URL, "redfish_system_id": "/redfish/v1/Systems/vm-1",
		"redfish_username": testUser, "redfish_password": testPass})
	require.NoError(t, err)
	_, _, err = m.CreateSubscription(ctx, tg, bmc.SubscriptionRequest{Destination: dest, Protocol: "Redfish", EventTypes: []string{"Alert"}})
	require.NoError(t, err)

	_, err = m.SetPower(ctx, tg, bmc.ActionOn)
	require.NoError(t, err)
	ev := next(t, events)
	assert.Equal(t, "ResourceEvent.1.3.ResourcePoweredOn", ev.doc["Events"].([]any)[0].(map[string]any)["MessageId"])

	start := time.Now()
	_, err = m.AttachMedia(ctx, tg, bmc.MediaCD, files.URL+"/data.iso", 10*time.Second)
	require.NoError(t, err)
	t.Logf("attach checked in %s", time.Since(start))
	assert.NotEmpty(t, cdMedium(t, q), "QEMU's CD drive holds the image")
	slots, _, err := m.VirtualMedia(ctx, tg)
	require.NoError(t, err)
	require.Len(t, slots, 1)
	assert.True(t, slots[0].Inserted)
	assert.Equal(t, files.URL+"/data.iso", slots[0].Image)
	ev = next(t, events)
	assert.Equal(t, "ResourceEvent.1.3.ResourceChanged", ev.doc["Events"].([]any)[0].(map[string]any)["MessageId"])

	_, err = m.DetachMedia(ctx, tg, nil)
	require.NoError(t, err)
	assert.Empty(t, cdMedium(t, q), "QEMU's CD drive is empty again")
	_, err = m.SetPower(ctx, tg, bmc.ActionOff)
	require.NoError(t, err)
}
