package api

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// eventSink receives the events anvil-vbmc posts, on loopback.
func eventSink(t *testing.T) (string, <-chan http.Header) {
	t.Helper()
	ch := make(chan http.Header, 16)
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		ch <- r.Header.Clone()
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(ts.Close)
	return ts.URL + "/bmc-events", ch
}

func TestVendorPassthruSubscriptions(t *testing.T) {
	e := newVmediaEnv(t)
	id := e.redfishNode("rf-1", nil)
	dest, events := eventSink(t)
	vp := "/v1/nodes/rf-1/vendor_passthru"

	r := e.do("GET", vp+"/methods", "1.93", nil)
	require.Equal(t, http.StatusOK, r.status)
	methods := r.json(t)
	assert.Len(t, methods, 5)
	assert.Equal(t, map[string]any{"http_methods": []any{"POST"}, "async": false, "attach": false, "require_exclusive_lock": true,
		"description": "Creates a subscription on a node. Required argument: a dictionary of {'Destination': 'destination_url'}"},
		methods["create_subscription"])
	assert.Equal(t, []any{"DELETE"}, methods["delete_subscription"].(map[string]any)["http_methods"])

	// BMO's call: Destination, Context and HttpHeaders; Ironic adds
	// Protocol Redfish and EventTypes [Alert].
	r = e.do("POST", vp+"?method=create_subscription", "1.93", map[string]any{"Destination": dest, "Context": "bmo",
		"HttpHeaders": []any{map[string]any{"Authorization": "Bearer t0k"}}})
	require.Equal(t, http.StatusOK, r.status, string(r.body))
	assert.JSONEq(t, `{"Id":"1","Destination":"`+dest+`","Context":"bmo","Protocol":"Redfish","EventTypes":["Alert"]}`, string(r.body))

	require.Equal(t, http.StatusAccepted, e.do("PUT", "/v1/nodes/rf-1/states/power", "1.93", map[string]any{"target": "power on"}).status)
	select {
	case h := <-events:
		assert.Equal(t, "Bearer t0k", h.Get("Authorization"), "the BMC sends the subscription's headers")
	case <-time.After(10 * time.Second):
		t.Fatal("no event from the BMC after a power on")
	}
	// the power action holds the node until it is done: NodeLocked meanwhile
	require.Eventually(t, func() bool {
		n := e.do("GET", "/v1/nodes/rf-1", "1.93", nil).json(t)
		return n["reservation"] == nil && n["power_state"] == "power on"
	}, 10*time.Second, 10*time.Millisecond)

	r = e.do("GET", vp+"?method=get_all_subscriptions", "1.93", nil)
	require.Equal(t, http.StatusOK, r.status, string(r.body))
	all := r.json(t)
	assert.Equal(t, "/redfish/v1/EventService/Subscriptions", all["@odata.id"], "the BMC's collection as it sent it")
	assert.Equal(t, float64(1), all["Members@odata.count"])

	r = e.do("GET", vp+"?method=get_subscription", "1.93", map[string]any{"id": "1"})
	require.Equal(t, http.StatusOK, r.status, string(r.body))
	assert.JSONEq(t, `{"Id":"1","Destination":"`+dest+`","Context":"bmo","Protocol":"Redfish","EventTypes":["Alert"]}`, string(r.body))

	r = e.do("DELETE", vp+"?method=delete_subscription", "1.93", map[string]any{"id": "1"})
	require.Equal(t, http.StatusOK, r.status, string(r.body))
	assert.Equal(t, "null", string(r.body))
	r = e.do("DELETE", vp+"?method=delete_subscription", "1.93", map[string]any{"id": "1"})
	require.Equal(t, http.StatusNotFound, r.status, string(r.body))
	assert.Contains(t, r.fault(t), "Redfish exception occurred. Error: Redfish delete_subscription failed for subscription 1 on node "+id+". Error: ")

	// the older eject_vmedia: asynchronous in Ironic, so 202 and no body
	r = e.do("POST", "/v1/nodes/rf-1/vmedia", "1.89", map[string]any{"device_type": "cdrom", "image_url": e.files.URL + "/d.iso", "image_download_source": "http"})
	require.Equal(t, http.StatusNoContent, r.status, string(r.body))
	r = e.do("POST", vp+"?method=eject_vmedia", "1.93", map[string]any{"boot_device": "floppy"})
	require.Equal(t, http.StatusAccepted, r.status, string(r.body))
	assert.True(t, e.vbmc.Node("node-1").Media().Inserted, "the CD is not a floppy")
	r = e.do("POST", vp+"?method=eject_vmedia", "1.93", map[string]any{"boot_device": "tape"})
	require.Equal(t, http.StatusBadRequest, r.status, string(r.body))
	assert.Equal(t, "Boot device tape is not a valid value ", r.fault(t))
	r = e.do("POST", vp+"?method=eject_vmedia", "1.93", map[string]any{"boot_device": "cd"})
	require.Equal(t, http.StatusAccepted, r.status, string(r.body))
	assert.Empty(t, r.body)
	assert.False(t, e.vbmc.Node("node-1").Media().Inserted)

	hist := string(e.do("GET", "/v1/nodes/rf-1/history", "1.93", nil).body)
	assert.Contains(t, hist, "BMC event subscription 1 created for "+dest)
	assert.Nil(t, e.do("GET", "/v1/nodes/rf-1", "1.93", nil).json(t)["reservation"])
}

func TestVendorPassthruRefusals(t *testing.T) {
	e := newVmediaEnv(t)
	id := e.redfishNode("rf-1", nil)
	e.redfishNode("rf-nv", map[string]any{"vendor_interface": "no-vendor"})
	e.createNode("fk-1", nil)
	vp := "/v1/nodes/rf-1/vendor_passthru"
	tests := []struct {
		name, method, path string
		body               any
		status             int
		want               string
	}{
		{"no method", "POST", vp, nil, 400, "Method not specified"},
		{"unknown method", "POST", vp + "?method=send_raw", nil, 400, "No handler for method send_raw"},
		{"wrong verb", "GET", vp + "?method=create_subscription", nil, 400, "The method create_subscription does not support HTTP GET"},
		{"no destination", "POST", vp + "?method=create_subscription", map[string]any{}, 400, "Destination None is not a valid URI"},
		{"bad destination", "POST", vp + "?method=create_subscription", map[string]any{"Destination": "nowhere"}, 400, "Destination nowhere is not a valid URI"},
		{"event types the BMC does not take", "POST", vp + "?method=create_subscription", map[string]any{"Destination": "http://127.0.0.1/e", "EventTypes": []any{"Nope"}}, 400,
			"EventTypes ['Nope'] is not a valid value, allowed values {'Alert', 'ResourceAdded', 'ResourceRemoved', 'ResourceUpdated', 'StatusChange'}"},
		{"context not a string", "POST", vp + "?method=create_subscription", map[string]any{"Destination": "http://127.0.0.1/e", "Context": 5}, 400, "Context 5 is not a valid string"},
		{"headers not a list", "POST", vp + "?method=create_subscription", map[string]any{"Destination": "http://127.0.0.1/e", "HttpHeaders": map[string]any{"a": "b"}}, 400,
			"HttpHeaders {'a': 'b'} is not a list of headers"},
		{"the BMC refuses it", "POST", vp + "?method=create_subscription", map[string]any{"Destination": "http://127.0.0.1/e", "Protocol": "SNMPv2c"}, 500,
			"Redfish exception occurred. Error: Failed to create subscription on node " + id + ". Subscription payload: {'Destination': 'http://127.0.0.1/e', 'Protocol': 'SNMPv2c', 'Context': '', 'EventTypes': ['Alert']}. Error: "},
		{"delete without id", "DELETE", vp + "?method=delete_subscription", nil, 400, "id can't be None"},
		{"no-vendor", "POST", "/v1/nodes/rf-nv/vendor_passthru?method=create_subscription", map[string]any{"Destination": "http://127.0.0.1/e"}, 400,
			"No handler for method create_subscription"},
		{"fake-hardware", "POST", "/v1/nodes/fk-1/vendor_passthru?method=create_subscription", nil, 400, "No handler for method create_subscription"},
		{"no such node", "POST", "/v1/nodes/nope/vendor_passthru?method=create_subscription", nil, 404, "Node nope could not be found."},
		{"not JSON", "POST", vp + "?method=create_subscription", "{", 400, "Malformed JSON body"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := e.do(tt.method, tt.path, "1.93", tt.body)
			require.Equal(t, tt.status, r.status, string(r.body))
			assert.Contains(t, r.fault(t), tt.want)
		})
	}
	r := e.do("GET", "/v1/nodes/fk-1/vendor_passthru/methods", "1.93", nil)
	require.Equal(t, http.StatusOK, r.status)
	assert.JSONEq(t, `{}`, string(r.body))
	var drv map[string]any
	require.NoError(t, json.Unmarshal(e.do("GET", "/v1/drivers/redfish", "1.93", nil).body, &drv))
	assert.Equal(t, "redfish", drv["default_vendor_interface"])
	assert.Equal(t, []any{"no-vendor", "redfish"}, drv["enabled_vendor_interfaces"])
}
