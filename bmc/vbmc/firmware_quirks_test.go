package vbmc_test

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stmcginnis/gofish/redfish"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/bmc/vbmc"
)

const bmcTarget = `"Targets":["/redfish/v1/UpdateService/FirmwareInventory/n1-BMC"]`

func TestQuirkBMCOfflineAfterUpdate(t *testing.T) {
	images := imageServer(t, map[string][]byte{"/bmc.fw": vbmc.FirmwareImage(vbmc.FirmwareBMC, "7.0", []byte("b"))})
	e := newFwEnv(t, vbmc.FirmwareOptions{UpdateDuration: 50 * time.Millisecond, OfflineAfterBMCUpdate: true, BMCRestart: time.Second}, "n1", "n2")
	resp, _ := e.simpleUpdate(t, `{"ImageURI":"`+images.URL+`/bmc.fw",`+bmcTarget+`}`)
	require.Equal(t, http.StatusAccepted, resp.StatusCode)
	loc := resp.Header.Get("Location")

	// A poller may never see Completed before the BMC goes away: it
	// learns of the restart from the 503s.
	var offlineAt time.Time
	require.Eventually(t, func() bool {
		resp, _ := e.do(t, "GET", loc, "", basic("admin", "password"))
		if resp.StatusCode == http.StatusServiceUnavailable {
			offlineAt = time.Now()
			assert.NotEmpty(t, resp.Header.Get("Retry-After"))
			return true
		}
		return false
	}, 5*time.Second, 10*time.Millisecond)

	for _, path := range []string{"/redfish/v1/", "/redfish/v1/Systems/n2", "/redfish/v1/UpdateService/FirmwareInventory/n1-BMC"} {
		resp, body := e.do(t, "GET", path, "", basic("admin", "password"))
		assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, path)
		assert.Contains(t, body, "error", "a Redfish error body")
	}
	require.Eventually(t, func() bool {
		return e.get(t, "/redfish/v1/", nil) == http.StatusOK
	}, 3*time.Second, 20*time.Millisecond)
	// Loose bounds: the CI machine is busy.
	assert.Greater(t, time.Since(offlineAt), 500*time.Millisecond, "offline for about BMCRestart")

	var tk redfish.Task
	require.Equal(t, http.StatusOK, e.get(t, loc, &tk))
	assert.Equal(t, redfish.CompletedTaskState, tk.TaskState)
	_, bmc := e.biosAndBMC(t, "n1")
	assert.Equal(t, "7.0", bmc)
}

func TestBMCStaysOnlineWithoutTheQuirk(t *testing.T) {
	images := imageServer(t, map[string][]byte{"/bmc.fw": vbmc.FirmwareImage(vbmc.FirmwareBMC, "7.0", []byte("b"))})
	e := newFwEnv(t, vbmc.FirmwareOptions{UpdateDuration: time.Millisecond}, "n1")
	resp, _ := e.simpleUpdate(t, `{"ImageURI":"`+images.URL+`/bmc.fw"}`)
	require.Equal(t, http.StatusAccepted, resp.StatusCode)
	tk, _ := e.waitTask(t, resp.Header.Get("Location"))
	assert.Equal(t, redfish.CompletedTaskState, tk.TaskState)
	assert.Equal(t, http.StatusOK, e.get(t, "/redfish/v1/", nil))
}

func TestQuirkPurgeCompletedTasks(t *testing.T) {
	images := imageServer(t, map[string][]byte{"/bmc.fw": vbmc.FirmwareImage(vbmc.FirmwareBMC, "7.0", []byte("b"))})
	e := newFwEnv(t, vbmc.FirmwareOptions{UpdateDuration: 200 * time.Millisecond, PurgeCompletedTasks: true}, "n1", "n2")
	resp, _ := e.simpleUpdate(t, `{"ImageURI":"`+images.URL+`/bmc.fw",`+bmcTarget+`}`)
	require.Equal(t, http.StatusAccepted, resp.StatusCode)
	loc := resp.Header.Get("Location")
	var tk redfish.Task
	require.Equal(t, http.StatusOK, e.get(t, loc, &tk), "there while it runs")
	_, tasks := e.do(t, "GET", "/redfish/v1/TaskService/Tasks", "", basic("admin", "password"))
	assert.EqualValues(t, 1, tasks["Members@odata.count"])

	require.Eventually(t, func() bool { return e.get(t, loc, nil) == http.StatusNotFound }, 5*time.Second, 10*time.Millisecond)
	_, tasks = e.do(t, "GET", "/redfish/v1/TaskService/Tasks", "", basic("admin", "password"))
	assert.EqualValues(t, 0, tasks["Members@odata.count"])
	assert.Equal(t, "7.0", e.inventory(t, "n1-BMC").Version, "the inventory tells the outcome")
}

func TestQuirkPurgeKeepsFailedTasks(t *testing.T) {
	images := imageServer(t, nil)
	e := newFwEnv(t, vbmc.FirmwareOptions{UpdateDuration: time.Millisecond, PurgeCompletedTasks: true}, "n1")
	resp, _ := e.simpleUpdate(t, `{"ImageURI":"`+images.URL+`/missing.fw"}`)
	require.Equal(t, http.StatusAccepted, resp.StatusCode)
	tk, _ := e.waitTask(t, resp.Header.Get("Location"))
	assert.Equal(t, redfish.ExceptionTaskState, tk.TaskState)
}

func TestQuirkStallTasks(t *testing.T) {
	images := imageServer(t, map[string][]byte{"/bios.fw": vbmc.FirmwareImage(vbmc.FirmwareBIOS, "2.0", []byte("b"))})
	e := newFwEnv(t, vbmc.FirmwareOptions{UpdateDuration: 40 * time.Millisecond, StallTasks: true}, "n1")
	resp, _ := e.simpleUpdate(t, `{"ImageURI":"`+images.URL+`/bios.fw"}`)
	require.Equal(t, http.StatusAccepted, resp.StatusCode)
	loc := resp.Header.Get("Location")
	var tk redfish.Task
	require.Eventually(t, func() bool {
		require.Equal(t, http.StatusOK, e.get(t, loc, &tk))
		return tk.PercentComplete == 50
	}, 5*time.Second, 10*time.Millisecond)
	time.Sleep(300 * time.Millisecond) // many times UpdateDuration
	require.Equal(t, http.StatusOK, e.get(t, loc, &tk))
	assert.Equal(t, redfish.RunningTaskState, tk.TaskState)
	assert.Equal(t, 50, tk.PercentComplete)
	assert.Empty(t, tk.EndTime)

	// Close stops the stalled task's goroutine (it waits for it).
	done := make(chan struct{})
	go func() { e.srv.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(2 * time.Second):
		t.Fatal("Close did not stop the stalled task")
	}
	resp, _ = e.simpleUpdate(t, `{"ImageURI":"`+images.URL+`/bios.fw"}`)
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, "no new tasks after Close")
}

func TestCloseStopsADownloadInProgress(t *testing.T) {
	release := make(chan struct{})
	hang := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(hang.Close)
	defer close(release)
	e := newFwEnv(t, vbmc.FirmwareOptions{}, "n1")
	resp, _ := e.simpleUpdate(t, `{"ImageURI":"`+hang.URL+`/slow.fw"}`)
	require.Equal(t, http.StatusAccepted, resp.StatusCode)
	done := make(chan struct{})
	go func() { e.srv.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(2 * time.Second):
		t.Fatal("Close did not cancel the download")
	}
}
