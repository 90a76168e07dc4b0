package vbmc_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stmcginnis/gofish/redfish"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/bmc/vbmc"
)

// newFwEnv is a vbmc with in-memory nodes named names (the first one's
// backend in env.mem) and firmware options o.
func newFwEnv(t *testing.T, o vbmc.FirmwareOptions, names ...string) *env {
	t.Helper()
	mem := vbmc.NewMemory()
	nodes := []*vbmc.Node{vbmc.NewNode(names[0], mem)}
	for _, n := range names[1:] {
		nodes = append(nodes, vbmc.NewNode(n, vbmc.NewMemory()))
	}
	srv := vbmc.NewServer(nil, "admin", "password", nodes...)
	srv.SetFirmwareOptions(o)
	ts := httptest.NewServer(srv.Handler())
	// Cleanups run last first: the listener, then the background tasks.
	t.Cleanup(srv.Close)
	t.Cleanup(ts.Close)
	return &env{srv: srv, ts: ts, mem: mem, node: nodes[0]}
}

// imageServer serves files by path, as the controller's image cache does.
func imageServer(t *testing.T, files map[string][]byte) *httptest.Server {
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
	return ts
}

// get decodes path's JSON document into v and returns the status code.
func (e *env) get(t *testing.T, path string, v any) int {
	t.Helper()
	req, err := http.NewRequest("GET", e.ts.URL+path, nil)
	require.NoError(t, err)
	req.SetBasicAuth("admin", "password")
	resp, err := e.ts.Client().Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	if resp.StatusCode == http.StatusOK && v != nil {
		require.NoError(t, json.Unmarshal(raw, v), string(raw))
	}
	return resp.StatusCode
}

func (e *env) simpleUpdate(t *testing.T, body string) (*http.Response, map[string]any) {
	t.Helper()
	return e.do(t, "POST", "/redfish/v1/UpdateService/Actions/UpdateService.SimpleUpdate", body, basic("admin", "password"))
}

// waitTask polls a task until it leaves New and Running and returns it
// with the percentages seen on the way.
func (e *env) waitTask(t *testing.T, loc string) (redfish.Task, []int) {
	t.Helper()
	var tk redfish.Task
	var seen []int
	require.Eventually(t, func() bool {
		tk = redfish.Task{}
		require.Equal(t, http.StatusOK, e.get(t, loc, &tk))
		seen = append(seen, tk.PercentComplete)
		return tk.TaskState != redfish.NewTaskState && tk.TaskState != redfish.RunningTaskState
	}, 5*time.Second, 10*time.Millisecond)
	return tk, seen
}

func (e *env) inventory(t *testing.T, id string) redfish.SoftwareInventory {
	t.Helper()
	var inv redfish.SoftwareInventory
	require.Equal(t, http.StatusOK, e.get(t, "/redfish/v1/UpdateService/FirmwareInventory/"+id, &inv))
	return inv
}

func (e *env) biosAndBMC(t *testing.T, node string) (bios, bmc string) {
	t.Helper()
	var sys redfish.ComputerSystem
	var mgr redfish.Manager
	require.Equal(t, http.StatusOK, e.get(t, "/redfish/v1/Systems/"+node, &sys))
	require.Equal(t, http.StatusOK, e.get(t, "/redfish/v1/Managers/"+node, &mgr))
	return sys.BIOSVersion, mgr.FirmwareVersion
}

func messageIDs(tk redfish.Task) []string {
	var ids []string
	for _, m := range tk.Messages {
		ids = append(ids, m.MessageID)
	}
	return ids
}

func TestUpdateServiceDocuments(t *testing.T) {
	e := newFwEnv(t, vbmc.FirmwareOptions{}, "node-1", "node-2")
	_, root := e.do(t, "GET", "/redfish/v1/", "")
	assert.Equal(t, "/redfish/v1/UpdateService", root["UpdateService"].(map[string]any)["@odata.id"])
	assert.Equal(t, "/redfish/v1/TaskService", root["TaskService"].(map[string]any)["@odata.id"])

	var us redfish.UpdateService
	require.Equal(t, http.StatusOK, e.get(t, "/redfish/v1/UpdateService", &us))
	assert.Equal(t, "#UpdateService.v1_11_0.UpdateService", us.ODataType)
	assert.True(t, us.ServiceEnabled)
	assert.Equal(t, []string{"HTTP", "HTTPS"}, us.TransferProtocol)
	_, raw := e.do(t, "GET", "/redfish/v1/UpdateService", "", basic("admin", "password"))
	assert.Equal(t, "/redfish/v1/UpdateService/FirmwareInventory", raw["FirmwareInventory"].(map[string]any)["@odata.id"])
	assert.Equal(t, "/redfish/v1/UpdateService/Actions/UpdateService.SimpleUpdate",
		raw["Actions"].(map[string]any)["#UpdateService.SimpleUpdate"].(map[string]any)["target"])

	_, coll := e.do(t, "GET", "/redfish/v1/UpdateService/FirmwareInventory", "", basic("admin", "password"))
	assert.EqualValues(t, 6, coll["Members@odata.count"], "BIOS, BMC and NIC of two nodes")

	tests := []struct{ id, softwareID, version, related string }{
		{"node-1-BIOS", "BIOS", "2.19.1", "/redfish/v1/Systems/node-1"},
		{"node-1-BMC", "BMC", "1.00.00", "/redfish/v1/Managers/node-1"},
		{"node-1-NIC.1", "NIC", "20.5.13", "/redfish/v1/Systems/node-1"},
		{"node-2-BIOS", "BIOS", "2.19.1", "/redfish/v1/Systems/node-2"},
	}
	for _, tc := range tests {
		t.Run(tc.id, func(t *testing.T) {
			inv := e.inventory(t, tc.id)
			assert.Equal(t, "#SoftwareInventory.v1_3_0.SoftwareInventory", inv.ODataType)
			assert.Equal(t, tc.id, inv.ID)
			assert.Equal(t, tc.version, inv.Version)
			assert.Equal(t, tc.softwareID, inv.SoftwareID)
			assert.True(t, inv.Updateable)
			assert.NotEmpty(t, inv.Name)
			_, raw := e.do(t, "GET", "/redfish/v1/UpdateService/FirmwareInventory/"+tc.id, "", basic("admin", "password"))
			assert.Equal(t, []any{map[string]any{"@odata.id": tc.related}}, raw["RelatedItem"])
		})
	}
	assert.Equal(t, http.StatusNotFound, e.get(t, "/redfish/v1/UpdateService/FirmwareInventory/nope", nil))

	bios, bmc := e.biosAndBMC(t, "node-1")
	assert.Equal(t, "2.19.1", bios)
	assert.Equal(t, "1.00.00", bmc)

	var ts redfish.TaskService
	require.Equal(t, http.StatusOK, e.get(t, "/redfish/v1/TaskService", &ts))
	assert.True(t, ts.ServiceEnabled)
	_, tasks := e.do(t, "GET", "/redfish/v1/TaskService/Tasks", "", basic("admin", "password"))
	assert.EqualValues(t, 0, tasks["Members@odata.count"])
	assert.Equal(t, http.StatusNotFound, e.get(t, "/redfish/v1/TaskService/Tasks/1", nil))
}

func TestSimpleUpdateGoodImages(t *testing.T) {
	images := imageServer(t, map[string][]byte{
		"/bios.fw": vbmc.FirmwareImage(vbmc.FirmwareBIOS, "2.1.0", []byte("bios payload")),
		"/bmc.fw":  vbmc.FirmwareImage(vbmc.FirmwareBMC, "7.10.30", []byte("bmc payload")),
		"/nic.fw":  vbmc.FirmwareImage(vbmc.FirmwareNIC, "22.0.1", []byte("nic payload")),
	})
	tests := []struct {
		name, body    string
		nodes         []string
		item, version string
		atReboot      bool
	}{
		{"BIOS", `{"ImageURI":"%s/bios.fw","Targets":["/redfish/v1/UpdateService/FirmwareInventory/n1-BIOS"]}`, []string{"n1", "n2"}, "n1-BIOS", "2.1.0", true},
		{"BMC", `{"ImageURI":"%s/bmc.fw","Targets":["/redfish/v1/UpdateService/FirmwareInventory/n1-BMC"],"TransferProtocol":"HTTP"}`, []string{"n1", "n2"}, "n1-BMC", "7.10.30", false},
		{"NIC", `{"ImageURI":"%s/nic.fw","Targets":["/redfish/v1/UpdateService/FirmwareInventory/n1-NIC.1"]}`, []string{"n1", "n2"}, "n1-NIC.1", "22.0.1", true},
		{"no Targets on a one-node BMC", `{"ImageURI":"%s/bios.fw"}`, []string{"n1"}, "n1-BIOS", "2.1.0", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newFwEnv(t, vbmc.FirmwareOptions{UpdateDuration: 200 * time.Millisecond}, tc.nodes...)
			old := e.inventory(t, tc.item).Version
			resp, body := e.simpleUpdate(t, fmt.Sprintf(tc.body, images.URL))
			require.Equal(t, http.StatusAccepted, resp.StatusCode, body)
			loc := resp.Header.Get("Location")
			require.True(t, strings.HasPrefix(loc, "/redfish/v1/TaskService/Tasks/"), loc)
			assert.Equal(t, "#Task.v1_4_3.Task", body["@odata.type"])
			assert.Equal(t, "New", body["TaskState"])
			assert.Equal(t, loc, body["@odata.id"])

			tk, seen := e.waitTask(t, loc)
			require.Equal(t, redfish.CompletedTaskState, tk.TaskState, tk.Messages)
			assert.EqualValues(t, "OK", tk.TaskStatus)
			assert.Equal(t, 100, tk.PercentComplete)
			assert.NotEmpty(t, tk.StartTime)
			assert.NotEmpty(t, tk.EndTime)
			assert.Contains(t, messageIDs(tk), "Update.1.0.UpdateSuccessful")
			assert.IsNonDecreasing(t, seen)
			assert.Greater(t, len(seen), 2, "progress is visible while it runs")

			inv := e.inventory(t, tc.item)
			if !tc.atReboot {
				assert.Equal(t, tc.version, inv.Version, "a BMC runs its new firmware after its restart")
				_, bmc := e.biosAndBMC(t, "n1")
				assert.Equal(t, tc.version, bmc)
				return
			}
			assert.Contains(t, messageIDs(tk), "Update.1.0.AwaitToActivate")
			assert.Equal(t, old, inv.Version, "staged until the next boot")
			assert.Contains(t, string(inv.OEM), tc.version, "pending version shown")
			active, pending := e.srv.FirmwareVersion("n1", inv.SoftwareID)
			assert.Equal(t, []string{old, tc.version}, []string{active, pending})

			for _, step := range []struct {
				reset   string
				version string
			}{
				{"ForceOff", old}, // powering off is no boot
				{"On", tc.version},
			} {
				resp, _ = e.do(t, "POST", "/redfish/v1/Systems/n1/Actions/ComputerSystem.Reset", `{"ResetType":"`+step.reset+`"}`, basic("admin", "password"))
				require.Equal(t, http.StatusNoContent, resp.StatusCode)
				assert.Equal(t, step.version, e.inventory(t, tc.item).Version, "after %s", step.reset)
			}
			assert.Empty(t, e.inventory(t, tc.item).OEM)
			if tc.item == "n1-BIOS" {
				bios, _ := e.biosAndBMC(t, "n1")
				assert.Equal(t, tc.version, bios, "System BiosVersion")
				assert.Equal(t, tc.version, e.attrs(t, "/redfish/v1/Systems/n1/Bios")["SystemBiosVersion"], "the BIOS's own attribute follows the flash")
			}
		})
	}
}

func TestResetOfARunningNodeActivatesStagedFirmware(t *testing.T) {
	images := imageServer(t, map[string][]byte{"/bios.fw": vbmc.FirmwareImage(vbmc.FirmwareBIOS, "3.0", nil)})
	e := newFwEnv(t, vbmc.FirmwareOptions{UpdateDuration: time.Millisecond}, "n1")
	reset := func(rt string) {
		resp, _ := e.do(t, "POST", "/redfish/v1/Systems/n1/Actions/ComputerSystem.Reset", `{"ResetType":"`+rt+`"}`, basic("admin", "password"))
		require.Equal(t, http.StatusNoContent, resp.StatusCode)
	}
	reset("On")
	resp, _ := e.simpleUpdate(t, `{"ImageURI":"`+images.URL+`/bios.fw"}`)
	require.Equal(t, http.StatusAccepted, resp.StatusCode)
	tk, _ := e.waitTask(t, resp.Header.Get("Location"))
	require.Equal(t, redfish.CompletedTaskState, tk.TaskState)
	e.mem.IgnoreShutdown = true
	for _, rt := range []string{"On", "GracefulShutdown", "Nmi"} { // the machine keeps running
		reset(rt)
		assert.Equal(t, "2.19.1", e.inventory(t, "n1-BIOS").Version, rt)
	}
	reset("ForceRestart")
	assert.Equal(t, "3.0", e.inventory(t, "n1-BIOS").Version)
}

func TestSimpleUpdateFailures(t *testing.T) {
	good := vbmc.FirmwareImage(vbmc.FirmwareBIOS, "2.0.0", []byte("payload"))
	corrupt := append([]byte{}, good...)
	corrupt[len(corrupt)-1] ^= 0xff
	images := imageServer(t, map[string][]byte{
		"/corrupt.fw": corrupt,
		"/bmc.fw":     vbmc.FirmwareImage(vbmc.FirmwareBMC, "9.9", []byte("x")),
		"/gpu.fw":     vbmc.FirmwareImage("GPU", "1", []byte("x")),
		"/random.bin": []byte("MZ\x90\x00 not a firmware image"),
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	unreachable := "http://" + ln.Addr().String() + "/bios.fw"
	require.NoError(t, ln.Close())

	tests := []struct {
		name, uri, messageID, text string
	}{
		{"checksum mismatch", images.URL + "/corrupt.fw", "Update.1.0.VerificationFailed", "checksum mismatch"},
		{"wrong component", images.URL + "/bmc.fw", "Update.1.0.VerificationFailed", "is for component BMC, not BIOS"},
		{"unknown component", images.URL + "/gpu.fw", "Update.1.0.VerificationFailed", "is for component GPU"},
		{"not an image", images.URL + "/random.bin", "Update.1.0.VerificationFailed", "not an anvil firmware image"},
		{"HTTP 404", images.URL + "/missing.fw", "Update.1.0.TransferFailed", "404 Not Found"},
		{"unreachable URL", unreachable, "Update.1.0.TransferFailed", "connection refused"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newFwEnv(t, vbmc.FirmwareOptions{UpdateDuration: 10 * time.Millisecond}, "n1", "n2")
			resp, body := e.simpleUpdate(t, `{"ImageURI":"`+tc.uri+`","Targets":["/redfish/v1/UpdateService/FirmwareInventory/n1-BIOS"]}`)
			require.Equal(t, http.StatusAccepted, resp.StatusCode, body)
			tk, _ := e.waitTask(t, resp.Header.Get("Location"))
			require.Equal(t, redfish.ExceptionTaskState, tk.TaskState)
			assert.EqualValues(t, "Critical", tk.TaskStatus)
			assert.NotEmpty(t, tk.EndTime)
			require.Len(t, tk.Messages, 1)
			assert.Equal(t, tc.messageID, tk.Messages[0].MessageID)
			assert.Contains(t, tk.Messages[0].Message, tc.text)
			assert.Equal(t, "Critical", tk.Messages[0].Severity)
			for _, id := range []string{"n1-BIOS", "n1-BMC"} {
				inv := e.inventory(t, id)
				assert.Contains(t, []string{"2.19.1", "1.00.00"}, inv.Version, "unchanged")
				assert.Empty(t, inv.OEM, "nothing staged")
			}
		})
	}
}

func TestSimpleUpdateBadRequests(t *testing.T) {
	e := newFwEnv(t, vbmc.FirmwareOptions{}, "n1", "n2")
	target := `"Targets":["/redfish/v1/UpdateService/FirmwareInventory/n1-BIOS"]`
	tests := []struct{ name, body, messageID string }{
		{"malformed JSON", `{`, "MalformedJSON"},
		{"no ImageURI", `{` + target + `}`, "ActionParameterMissing"},
		{"ftp URL", `{"ImageURI":"ftp://h/x.fw",` + target + `}`, "ActionParameterValueFormatError"},
		{"TransferProtocol not allowed", `{"ImageURI":"h/x.fw","TransferProtocol":"TFTP",` + target + `}`, "ActionParameterNotSupported"},
		{"no Targets with several nodes", `{"ImageURI":"http://h/x.fw"}`, "ActionParameterMissing"},
		{"unknown target", `{"ImageURI":"http://h/x.fw","Targets":["/redfish/v1/UpdateService/FirmwareInventory/n9-BIOS"]}`, "ActionParameterValueNotInList"},
		{"two targets", `{"ImageURI":"http://h/x.fw","Targets":["/redfish/v1/UpdateService/FirmwareInventory/n1-BIOS","/redfish/v1/UpdateService/FirmwareInventory/n2-BIOS"]}`, "ActionParameterValueNotInList"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := e.simpleUpdate(t, tc.body)
			require.Equal(t, http.StatusBadRequest, resp.StatusCode)
			info := body["error"].(map[string]any)["@Message.ExtendedInfo"].([]any)[0].(map[string]any)
			assert.Equal(t, "Base.1.8."+tc.messageID, info["MessageId"])
		})
	}
	_, tasks := e.do(t, "GET", "/redfish/v1/TaskService/Tasks", "", basic("admin", "password"))
	assert.EqualValues(t, 0, tasks["Members@odata.count"], "no task for a refused request")
}

func TestTransferProtocolCompletesImageURI(t *testing.T) {
	images := imageServer(t, map[string][]byte{"/nic.fw": vbmc.FirmwareImage(vbmc.FirmwareNIC, "23.1", []byte("n"))})
	e := newFwEnv(t, vbmc.FirmwareOptions{UpdateDuration: time.Millisecond}, "n1")
	host := strings.TrimPrefix(images.URL, "http://")
	resp, _ := e.simpleUpdate(t, `{"ImageURI":"`+host+`/nic.fw","TransferProtocol":"HTTP"}`)
	require.Equal(t, http.StatusAccepted, resp.StatusCode)
	tk, _ := e.waitTask(t, resp.Header.Get("Location"))
	assert.Equal(t, redfish.CompletedTaskState, tk.TaskState, tk.Messages)
	_, pending := e.srv.FirmwareVersion("n1", vbmc.FirmwareNIC)
	assert.Equal(t, "23.1", pending)
}
