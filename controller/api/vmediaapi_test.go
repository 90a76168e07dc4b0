package api

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/bmc"
	"github.com/anvil-metal/anvil/bmc/vbmc"
	"github.com/anvil-metal/anvil/controller/conductor"
	"github.com/anvil-metal/anvil/controller/store"
	"github.com/anvil-metal/anvil/controller/vmedia"
)

// vmediaEnv is the API over a conductor with the redfish hardware type
// driving an in-memory anvil-vbmc (node "node-1"), fake-hardware beside
// it, and the controller serving "local" data images.
type vmediaEnv struct {
	*testEnv
	vbmc  *vbmc.Server
	vurl  string
	files *httptest.Server // image_url's server
}

func newVmediaEnv(t *testing.T) *vmediaEnv {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	st, sqlSt, closeStore := openTestStore(ctx, t, onSQLite, ":memory:")
	vs := vbmc.NewServer(nil, "admin", "pw", vbmc.NewNode("node-1", vbmc.NewMemory()))
	vts := httptest.NewServer(vs.Handler())
	files := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasSuffix(r.URL.Path, ".iso") || strings.Contains(r.URL.Path, "missing") {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write([]byte("CD001 data image " + r.URL.Path))
	}))
	var apiURL string
	data, err := vmedia.NewDataImages(vmedia.DataConfig{Dir: t.TempDir(), PublicURL: func() string { return apiURL }})
	require.NoError(t, err)
	m := bmc.New(bmc.Config{MinInterval: -1, PollInterval: 10 * time.Millisecond, ConnectTimeout: 2 * time.Second,
		Retry: bmc.RetryPolicy{Attempts: 2, Initial: 10 * time.Millisecond, Max: 20 * time.Millisecond, MaxElapsed: time.Second}})
	cc := conductor.Config{CheckInterval: time.Hour, Host: "test-host", DataImages: data, VmediaCheckTimeout: 300 * time.Millisecond}
	cond := conductor.New(st, cc, conductor.FakeDriver{}, conductor.NewBMCDriver(bmc.HardwareRedfish, m, nil), conductor.NewBMCDriver(bmc.HardwareIPMI, m, nil))
	done := make(chan struct{})
	go func() { _ = cond.Run(ctx); close(done) }()
	srv := httptest.NewServer(New(Config{Store: st, Conductor: cond, DataImages: data}))
	apiURL = srv.URL
	var once sync.Once
	stop := func() {
		once.Do(func() {
			srv.Close()
			vts.Close()
			files.Close()
			cancel()
			<-done
			closeStore()
		})
	}
	t.Cleanup(stop)
	return &vmediaEnv{testEnv: &testEnv{t: t, srv: srv, cond: cond, st: sqlSt, stop: stop}, vbmc: vs, vurl: vts.URL, files: files}
}

// redfishNode enrols node-1 of the vbmc as a redfish node named name.
func (e *vmediaEnv) redfishNode(name string, extra map[string]any) string {
	e.t.Helper()
	body := map[string]any{"driver": "redfish", "name": name, "driver_info": map[string]any{"redfish_address": e.vurl,
		"redfish_username": "admin", "redfish_password": "pw", "redfish_system_id": "/redfish/v1/Systems/node-1"}}
	for k, v := range extra {
		body[k] = v
	}
	r := e.do("POST", "/v1/nodes", "1.93", body)
	require.Equal(e.t, http.StatusCreated, r.status, string(r.body))
	return r.json(e.t)["uuid"].(string)
}

func TestVmediaAttachGetDetachOverHTTP(t *testing.T) {
	e := newVmediaEnv(t)
	id := e.redfishNode("rf-1", nil)
	image := e.files.URL + "/data.iso"

	r := e.do("GET", "/v1/nodes/rf-1/vmedia", "1.93", nil)
	require.Equal(t, http.StatusOK, r.status, string(r.body))
	assert.JSONEq(t, `[{"media_types":["CD","DVD"],"inserted":false,"image":null}]`, string(r.body))

	r = e.do("POST", "/v1/nodes/rf-1/vmedia", "1.89", map[string]any{"device_type": "cdrom", "image_url": image, "image_download_source": "http"})
	require.Equal(t, http.StatusNoContent, r.status, string(r.body))
	assert.Empty(t, r.body)
	md := e.vbmc.Node("node-1").Media()
	assert.True(t, md.Inserted)
	assert.Equal(t, image, md.Image, "the BMC pulled image_url itself")

	r = e.do("GET", "/v1/nodes/"+id+"/vmedia", "1.93", nil)
	require.Equal(t, http.StatusOK, r.status)
	assert.JSONEq(t, `[{"media_types":["CD","DVD"],"inserted":true,"image":"`+image+`"}]`, string(r.body))
	n := e.do("GET", "/v1/nodes/rf-1", "1.93", nil).json(t)
	assert.Nil(t, n["reservation"], "the node's lock is given back")

	r = e.do("DELETE", "/v1/nodes/rf-1/vmedia?device_types=cdrom", "1.89", nil)
	require.Equal(t, http.StatusNoContent, r.status, string(r.body))
	assert.False(t, e.vbmc.Node("node-1").Media().Inserted)
	r = e.do("DELETE", "/v1/nodes/rf-1/vmedia", "1.89", nil)
	require.Equal(t, http.StatusNoContent, r.status, "detaching all, none inserted: %s", r.body)

	hist := string(e.do("GET", "/v1/nodes/rf-1/history", "1.93", nil).body)
	assert.Contains(t, hist, "Device cdrom attached to node "+id)
	assert.Contains(t, hist, "Device(s) [cdrom] detached from node "+id)
}

func TestVmediaAttachLocalIsServedByTheController(t *testing.T) {
	e := newVmediaEnv(t)
	id := e.redfishNode("rf-1", nil)
	src := e.files.URL + "/big.iso"
	// no image_download_source: Ironic's default is local
	r := e.do("POST", "/v1/nodes/rf-1/vmedia", "1.89", map[string]any{"device_type": "cdrom", "image_url": src})
	require.Equal(t, http.StatusNoContent, r.status, string(r.body))
	md := e.vbmc.Node("node-1").Media()
	require.True(t, md.Inserted)
	assert.True(t, strings.HasPrefix(md.Image, e.srv.URL+"/v1/boot/"+id+"/data/"), md.Image)
	assert.True(t, strings.HasSuffix(md.Image, "/cdrom.iso"), md.Image)
	assert.Equal(t, int64(len("CD001 data image /big.iso")), md.Bytes, "the BMC got the controller's copy")

	res, err := http.Get(strings.Replace(md.Image, "/data/", "/data/00", 1)[:len(md.Image)])
	require.NoError(t, err)
	res.Body.Close()
	assert.Equal(t, http.StatusNotFound, res.StatusCode, "another key gets nothing")

	require.Equal(t, http.StatusNoContent, e.do("DELETE", "/v1/nodes/rf-1/vmedia", "1.89", nil).status)
	res, err = http.Get(md.Image)
	require.NoError(t, err)
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	assert.Equal(t, http.StatusNotFound, res.StatusCode, "detached: the copy is gone: %s", body)

	r = e.do("POST", "/v1/nodes/rf-1/vmedia", "1.89", map[string]any{"device_type": "cdrom", "image_url": e.files.URL + "/missing.iso"})
	require.Equal(t, http.StatusBadRequest, r.status)
	assert.Contains(t, r.fault(t), "Could not attach device cdrom to node "+id+": cannot download image")
}

func TestVmediaRefusals(t *testing.T) {
	e := newVmediaEnv(t)
	id := e.redfishNode("rf-1", nil)
	e.createNode("fk-1", nil)
	ipmi := e.do("POST", "/v1/nodes", "1.93", map[string]any{"driver": "ipmi", "name": "ipmi-1",
		"driver_info": map[string]any{"ipmi_address": "127.0.0.1", "ipmi_username": "u", "ipmi_password": "p"}})
	require.Equal(t, http.StatusCreated, ipmi.status, string(ipmi.body))
	img := e.files.URL + "/data.iso"
	ok := map[string]any{"device_type": "cdrom", "image_url": img, "image_download_source": "http"}
	with := func(k string, v any) map[string]any {
		m := map[string]any{}
		for a, b := range ok {
			m[a] = b
		}
		if v == nil {
			delete(m, k)
		} else {
			m[k] = v
		}
		return m
	}
	tests := []struct {
		name, method, path, ver string
		body                    any
		status                  int
		want                    string
	}{
		{"POST below 1.89", "POST", "/v1/nodes/rf-1/vmedia", "1.88", ok, 404, "The resource could not be found."},
		{"DELETE below 1.89", "DELETE", "/v1/nodes/rf-1/vmedia", "1.88", nil, 404, "The resource could not be found."},
		{"GET below 1.93", "GET", "/v1/nodes/rf-1/vmedia", "1.92", nil, 404, "The resource could not be found."},
		{"no image_url", "POST", "/v1/nodes/rf-1/vmedia", "1.89", with("image_url", nil), 400, "Schema error for vmedia: 'image_url' is a required property"},
		{"no device_type", "POST", "/v1/nodes/rf-1/vmedia", "1.89", with("device_type", nil), 400, "Schema error for vmedia: 'device_type' is a required property"},
		{"unknown device_type", "POST", "/v1/nodes/rf-1/vmedia", "1.89", with("device_type", "CDROM"), 400,
			"Schema error for vmedia: 'CDROM' is not one of ['disk', 'cdrom', 'floppy']"},
		{"unknown source", "POST", "/v1/nodes/rf-1/vmedia", "1.89", with("image_download_source", "glance"), 400,
			"Schema error for vmedia: 'glance' is not one of ['http', 'local', 'swift']"},
		{"other property", "POST", "/v1/nodes/rf-1/vmedia", "1.89", with("username", "x"), 400,
			"Schema error for vmedia: Additional properties are not allowed ('username' was unexpected)"},
		{"ftp", "POST", "/v1/nodes/rf-1/vmedia", "1.89", with("image_url", "ftp://x/y.iso"), 400, "Unsupported or missing URL scheme: ftp"},
		{"no scheme", "POST", "/v1/nodes/rf-1/vmedia", "1.89", with("image_url", "/y.iso"), 400, "Unsupported or missing URL scheme: "},
		{"nfs from local", "POST", "/v1/nodes/rf-1/vmedia", "1.89", with("image_download_source", nil), 400, ""},
		{"unknown detach type", "DELETE", "/v1/nodes/rf-1/vmedia?device_types=cdrom,usb", "1.89", nil, 400,
			"Invalid device type(s) usb (valid are disk, cdrom, floppy)"},
		{"no such node", "POST", "/v1/nodes/nope/vmedia", "1.89", ok, 404, "Node nope could not be found."},
		{"fake-hardware", "POST", "/v1/nodes/fk-1/vmedia", "1.89", ok, 400,
			"Driver fake-hardware does not support attach_virtual_media (disabled or not implemented)."},
		{"ipmi detach", "DELETE", "/v1/nodes/ipmi-1/vmedia", "1.89", nil, 400,
			"Driver ipmi does not support detach_virtual_media (disabled or not implemented)."},
		{"ipmi get", "GET", "/v1/nodes/ipmi-1/vmedia", "1.93", nil, 400,
			"Driver ipmi does not support get_virtual_media (disabled or not implemented)."},
		{"no USB slot", "POST", "/v1/nodes/rf-1/vmedia", "1.89", with("device_type", "disk"), 400,
			"Could not attach device disk to node " + id + ": attach_virtual_media"},
		{"the BMC cannot fetch it", "POST", "/v1/nodes/rf-1/vmedia", "1.89", with("image_url", e.files.URL+"/missing.iso"), 500,
			"Could not attach device cdrom to node " + id},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body := tt.body
			if tt.name == "nfs from local" {
				body = with("image_url", "nfs://server/share/y.iso")
				delete(body.(map[string]any), "image_download_source")
				tt.want = "image_download_source is set to 'local' but the image URL nfs://server/share/y.iso uses the nfs protocol which cannot be downloaded by the conductor."
			}
			r := e.do(tt.method, tt.path, tt.ver, body)
			require.Equal(t, tt.status, r.status, string(r.body))
			assert.Contains(t, r.fault(t), tt.want)
			assert.False(t, e.vbmc.Node("node-1").Media().Inserted, "nothing is left in the slot")
		})
	}
	n := e.do("GET", "/v1/nodes/rf-1", "1.93", nil).json(t)
	assert.Nil(t, n["reservation"])
}

func TestVmediaInsertThatDoesNotHoldFailsAndIsEjected(t *testing.T) {
	e := newVmediaEnv(t)
	id := e.redfishNode("rf-1", nil)
	e.vbmc.SetFaults(vbmc.Faults{IgnoreMediaInsert: true})
	r := e.do("POST", "/v1/nodes/rf-1/vmedia", "1.89", map[string]any{"device_type": "cdrom", "image_url": e.files.URL + "/data.iso", "image_download_source": "http"})
	require.Equal(t, http.StatusInternalServerError, r.status, string(r.body))
	msg := r.fault(t)
	assert.Contains(t, msg, "Could not attach device cdrom to node "+id)
	assert.Contains(t, msg, "expected Inserted with Image")
	assert.False(t, e.vbmc.Node("node-1").Media().Inserted)
	hist := string(e.do("GET", "/v1/nodes/rf-1/history", "1.93", nil).body)
	assert.Contains(t, hist, "Could not attach device cdrom")
}

func TestVmediaRefusedWhileLockedOrBootingTheAgentFromIt(t *testing.T) {
	e := newVmediaEnv(t)
	id := e.redfishNode("rf-1", map[string]any{"boot_interface": conductor.BootVirtualMedia})
	body := map[string]any{"device_type": "cdrom", "image_url": e.files.URL + "/data.iso", "image_download_source": "http"}
	ctx := context.Background()

	_, err := store.MutateNode(ctx, e.st, id, func(n *store.Node) error { n.Reservation = strp("other-host"); return nil })
	require.NoError(t, err)
	r := e.do("POST", "/v1/nodes/rf-1/vmedia", "1.89", body)
	require.Equal(t, http.StatusConflict, r.status, string(r.body))
	assert.Equal(t, "Node "+id+" is locked by host other-host, please retry after the current operation is completed.", r.fault(t))

	_, err = store.MutateNode(ctx, e.st, id, func(n *store.Node) error {
		n.Reservation, n.ProvisionState = nil, "wait call-back"
		return nil
	})
	require.NoError(t, err)
	r = e.do("POST", "/v1/nodes/rf-1/vmedia", "1.89", body)
	require.Equal(t, http.StatusConflict, r.status, string(r.body))
	assert.Contains(t, r.fault(t), "boots the agent from its virtual CD")
	r = e.do("DELETE", "/v1/nodes/rf-1/vmedia", "1.89", nil)
	require.Equal(t, http.StatusConflict, r.status, "detaching everything would take the agent's CD: %s", r.body)
	// other device types too: a BMC's slot may take several (CD and USB),
	// and an eject of "disk" would take the agent's ISO out
	r = e.do("DELETE", "/v1/nodes/rf-1/vmedia?device_types=disk", "1.89", nil)
	require.Equal(t, http.StatusConflict, r.status, string(r.body))
	assert.Contains(t, r.fault(t), "its virtual media slots (which may take several device types) are in use")

	_, err = store.MutateNode(ctx, e.st, id, func(n *store.Node) error {
		n.Maintenance, n.Fault, n.ProvisionState = true, strp("power failure"), "active"
		return nil
	})
	require.NoError(t, err)
	r = e.do("POST", "/v1/nodes/rf-1/vmedia", "1.89", body)
	require.Equal(t, http.StatusServiceUnavailable, r.status, string(r.body))
	assert.Equal(t, "Unable to attach virtual media for node "+id+" due to power failure state", r.fault(t))
}

func strp(s string) *string { return &s }
