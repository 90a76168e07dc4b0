package bmc_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/bmc"
	"github.com/anvil-metal/anvil/bmc/vbmc"
)

// vbmcTasks counts the tasks anvil-vbmc has started.
func vbmcTasks(t *testing.T, url string) int {
	t.Helper()
	req, err := http.NewRequest("GET", url+"/redfish/v1/TaskService/Tasks", nil)
	require.NoError(t, err)
	req.SetBasicAuth(testUser, testPass)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	var coll struct {
		Count int `json:"Members@odata.count"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&coll))
	return coll.Count
}

func component(t *testing.T, m *bmc.Manager, tg bmc.Target, name string) bmc.FirmwareComponent {
	t.Helper()
	comps, _, err := m.Firmware(context.Background(), tg)
	require.NoError(t, err)
	for _, c := range comps {
		if c.Component == name {
			return c
		}
	}
	t.Fatalf("no component %s in %v", name, versions(comps))
	return bmc.FirmwareComponent{}
}

// TestRedfishFirmwarePush: a BMC whose UpdateService offers only
// MultipartHttpPushUri is pushed the image, which the controller
// downloads from the URL; the task is watched as SimpleUpdate's.
func TestRedfishFirmwarePush(t *testing.T) {
	images := firmwareImages(t, map[string][]byte{
		"/bmc-2.bin":  vbmc.FirmwareImage(vbmc.FirmwareBMC, "2.00.00", bytes.Repeat([]byte("bmc payload "), 100_000)), // 1.2 MB
		"/bios-3.bin": vbmc.FirmwareImage(vbmc.FirmwareBIOS, "3.0.0", []byte("bios payload")),
		"/bad.bin":    append(vbmc.FirmwareImage(vbmc.FirmwareBMC, "9.9.9", []byte("x")), 'z'),
	})
	tests := []struct {
		name             string
		component, image string
		pushOnly         bool
		method           string
		wantOK           bool
		wantErr, taskMsg string
		active, boot     string
	}{
		{name: "bmc pushed", component: "bmc", image: "/bmc-2.bin", pushOnly: true, method: "MultipartHttpPushUri", wantOK: true, active: "2.00.00", boot: "2.00.00"},
		{name: "bios pushed, staged until the next boot", component: "bios", image: "/bios-3.bin", pushOnly: true, method: "MultipartHttpPushUri",
			wantOK: true, active: "2.19.1", boot: "3.0.0"},
		{name: "corrupt image pushed fails the task", component: "bmc", image: "/bad.bin", pushOnly: true, method: "MultipartHttpPushUri",
			taskMsg: "checksum mismatch", active: "1.00.00", boot: "1.00.00"},
		{name: "missing image: the BMC is asked nothing", component: "bmc", image: "/none.bin", pushOnly: true,
			wantErr: "could not download the image", active: "1.00.00", boot: "1.00.00"},
		{name: "both offered: SimpleUpdate", component: "bmc", image: "/bmc-2.bin", method: "SimpleUpdate", wantOK: true, active: "2.00.00", boot: "2.00.00"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := startVBMC(t, "node-1", "node-2")
			env.srv.SetFirmwareOptions(vbmc.FirmwareOptions{PushOnly: tt.pushOnly, UpdateDuration: 50 * time.Millisecond})
			m := bmc.New(fastConfig(nil))
			tg := env.target(t, "node-1", testPass)
			ctx := context.Background()
			uri, out, err := m.UpdateFirmware(ctx, tg, component(t, m, tg, tt.component), images+tt.image)
			if tt.wantErr != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tt.wantErr)
				assert.Contains(t, err.Error(), "HTTP 404 Not Found")
				assert.Contains(t, err.Error(), "the BMC was asked nothing")
				assert.NotErrorIs(t, err, bmc.ErrUnreachable, "not the BMC's fault")
				assert.Equal(t, 1, out.Attempts, "not retried")
				assert.Zero(t, vbmcTasks(t, env.url))
			} else {
				require.NoError(t, err)
				assert.Equal(t, "gofish ("+tt.method+")", out.Provider)
				assert.Contains(t, uri, "/redfish/v1/TaskService/Tasks/")
				tk := waitTask(t, m, tg, uri)
				assert.Equal(t, tt.wantOK, tk.Succeeded(), "task %+v", tk)
				if tt.taskMsg != "" {
					assert.True(t, tk.Failed())
					assert.Contains(t, tk.Message(), tt.taskMsg)
				}
			}
			assert.Equal(t, tt.active, versions(readComponents(t, m, tg))[tt.component])
			_, err = m.SetPower(ctx, tg, bmc.ActionOn)
			require.NoError(t, err)
			assert.Equal(t, tt.boot, versions(readComponents(t, m, tg))[tt.component])
			other, _, err := m.Firmware(ctx, env.target(t, "node-2", testPass))
			require.NoError(t, err)
			assert.Equal(t, "1.00.00", versions(other)["bmc"], "node-2 untouched")
		})
	}
}

func readComponents(t *testing.T, m *bmc.Manager, tg bmc.Target) []bmc.FirmwareComponent {
	t.Helper()
	comps, _, err := m.Firmware(context.Background(), tg)
	require.NoError(t, err)
	return comps
}

// TestRedfishFirmwarePushDownloadBreaksOff: the image server stops half
// way; the upload is abandoned and the BMC starts no task.
func TestRedfishFirmwarePushDownloadBreaksOff(t *testing.T) {
	img := vbmc.FirmwareImage(vbmc.FirmwareBMC, "2", bytes.Repeat([]byte("x"), 200_000))
	short := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(len(img)))
		_, _ = w.Write(img[:len(img)/2])
	}))
	defer short.Close()
	env := startVBMC(t, "node-1")
	env.srv.SetFirmwareOptions(vbmc.FirmwareOptions{PushOnly: true})
	m := bmc.New(fastConfig(nil))
	tg := env.target(t, "node-1", testPass)
	_, out, err := m.UpdateFirmware(context.Background(), tg, component(t, m, tg, "bmc"), short.URL+"/bmc.bin")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "downloading the image "+short.URL+"/bmc.bin failed after")
	assert.Contains(t, err.Error(), "abandoned unfinished")
	assert.Equal(t, 1, out.Attempts, "not retried")
	assert.Zero(t, vbmcTasks(t, env.url))
}

// TestRedfishFirmwareSimpleUpdateMissingFallsBackToPush: a BMC that lists
// SimpleUpdate but answers 405 to it is pushed the image.
func TestRedfishFirmwareSimpleUpdateMissingFallsBackToPush(t *testing.T) {
	images := firmwareImages(t, map[string][]byte{"/bmc.bin": vbmc.FirmwareImage(vbmc.FirmwareBMC, "2", []byte("b"))})
	srv := vbmc.NewServer(nil, testUser, testPass, vbmc.NewNode("node-1", vbmc.NewMemory()))
	srv.SetFirmwareOptions(vbmc.FirmwareOptions{UpdateDuration: time.Millisecond})
	var simpleAsked atomic.Int32
	h := srv.Handler()
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "UpdateService.SimpleUpdate") {
			simpleAsked.Add(1)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusMethodNotAllowed)
			_, _ = w.Write([]byte(`{"error":{"code":"Base.1.8.GeneralError","message":"not here"}}`))
			return
		}
		h.ServeHTTP(w, r)
	}))
	defer ts.Close()
	env := &vbmcEnv{srv: srv, url: ts.URL}
	m := bmc.New(fastConfig(nil))
	tg := env.target(t, "node-1", testPass)
	uri, out, err := m.UpdateFirmware(context.Background(), tg, component(t, m, tg, "bmc"), images+"/bmc.bin")
	require.NoError(t, err)
	assert.EqualValues(t, 1, simpleAsked.Load())
	assert.Equal(t, "gofish (MultipartHttpPushUri)", out.Provider)
	assert.True(t, waitTask(t, m, tg, uri).Succeeded())
}

// TestRedfishFirmwareNoUsableUpdate: neither SimpleUpdate for http nor a
// push URI is ErrUnsupported naming what the BMC offers.
func TestRedfishFirmwareNoUsableUpdate(t *testing.T) {
	srv := vbmc.NewServer(nil, testUser, testPass, vbmc.NewNode("node-1", vbmc.NewMemory()))
	h := srv.Handler()
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet && r.URL.Path == "/redfish/v1/UpdateService" {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"@odata.id":"/redfish/v1/UpdateService","HttpPushUri":"/redfish/v1/UpdateService/push",
				"Actions":{"#UpdateService.SimpleUpdate":{"target":"/x","TransferProtocol@Redfish.AllowableValues":["TFTP"]}}}`))
			return
		}
		h.ServeHTTP(w, r)
	}))
	defer ts.Close()
	env := &vbmcEnv{srv: srv, url: ts.URL}
	m := bmc.New(fastConfig(nil))
	tg := env.target(t, "node-1", testPass)
	_, _, err := m.UpdateFirmware(context.Background(), tg, bmc.FirmwareComponent{Component: "bmc"}, "http://127.0.0.1:1/bmc.bin")
	require.ErrorIs(t, err, bmc.ErrUnsupported)
	assert.Contains(t, err.Error(), "offers SimpleUpdate (TransferProtocol TFTP), HttpPushUri /redfish/v1/UpdateService/push")
}

// TestRedfishFirmwarePushStreams pushes a 128 MiB image through the real
// client to a BMC that counts and discards it: the process allocates a
// small fraction of the image on the way (client and BMC together).
func TestRedfishFirmwarePushStreams(t *testing.T) {
	if testing.Short() {
		t.Skip("moves 128 MiB")
	}
	const size = 128 << 20
	chunk := bytes.Repeat([]byte{0x5a}, 64<<10)
	images := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(size))
		for i := 0; i < size/len(chunk); i++ {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	}))
	defer images.Close()
	srv := vbmc.NewServer(nil, testUser, testPass, vbmc.NewNode("node-1", vbmc.NewMemory()))
	srv.SetFirmwareOptions(vbmc.FirmwareOptions{PushOnly: true})
	// What the BMC received; the mutex orders the handler's writes
	// before the test's reads (the race detector does not see sockets).
	var mu sync.Mutex
	var got, contentLength int64
	var params []byte
	h := srv.Handler()
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/redfish/v1/UpdateService/MultipartUpload" {
			h.ServeHTTP(w, r)
			return
		}
		mu.Lock()
		defer mu.Unlock()
		contentLength = r.ContentLength
		_, p, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
		if !assert.NoError(t, err) {
			return
		}
		mr := multipart.NewReader(r.Body, p["boundary"])
		for {
			part, err := mr.NextPart()
			if err != nil {
				break
			}
			if part.FormName() == "UpdateParameters" {
				params, _ = io.ReadAll(part)
				continue
			}
			got, _ = io.Copy(io.Discard, part)
		}
		w.Header().Set("Location", "/redfish/v1/TaskService/Tasks/77")
		w.WriteHeader(http.StatusAccepted)
	}))
	defer ts.Close()
	env := &vbmcEnv{srv: srv, url: ts.URL}
	m := bmc.New(fastConfig(nil))
	tg := env.target(t, "node-1", testPass)
	target := component(t, m, tg, "bmc")

	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	start := time.Now()
	uri, _, err := m.UpdateFirmware(context.Background(), tg, target, images.URL+"/big.bin")
	took := time.Since(start)
	runtime.ReadMemStats(&after)
	require.NoError(t, err)
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, "/redfish/v1/TaskService/Tasks/77", uri)
	assert.EqualValues(t, size, got)
	assert.Greater(t, contentLength, int64(size), "sent with a Content-Length")
	assert.JSONEq(t, `{"Targets":["`+target.InventoryURI+`"],"@Redfish.OperationApplyTime":"Immediate"}`, string(params))
	alloc := after.TotalAlloc - before.TotalAlloc
	t.Logf("128 MiB pushed in %s; %d bytes allocated by client and BMC together", took.Round(time.Millisecond), alloc)
	assert.Less(t, alloc, uint64(16<<20), "streamed, not held")
}
