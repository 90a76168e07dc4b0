package vbmc_test

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"fmt"
	"io"
	"mime/multipart"
	"net"
	"net/http"
	"net/textproto"
	"strings"
	"testing"
	"time"

	"github.com/stmcginnis/gofish/redfish"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/bmc/vbmc"
)

const pushPath = "/redfish/v1/UpdateService/MultipartUpload"

// pushPart is one part of a push body: its form name, an optional file
// name and its content.
type pushPart struct{ name, file, content string }

// push POSTs a multipart body made of parts to the push URI.
func (e *env) push(t *testing.T, parts ...pushPart) (*http.Response, map[string]any) {
	t.Helper()
	var buf bytes.Buffer
	w := multipart.NewWriter(&buf)
	for _, p := range parts {
		h := textproto.MIMEHeader{}
		cd := `form-data; name="` + p.name + `"`
		if p.file != "" {
			cd += `; filename="` + p.file + `"`
		}
		h.Set("Content-Disposition", cd)
		pw, err := w.CreatePart(h)
		require.NoError(t, err)
		_, err = pw.Write([]byte(p.content))
		require.NoError(t, err)
	}
	require.NoError(t, w.Close())
	return e.do(t, "POST", pushPath, buf.String(), basic("admin", "password"),
		func(r *http.Request) { r.Header.Set("Content-Type", w.FormDataContentType()) })
}

func params(targets ...string) pushPart {
	q := make([]string, len(targets))
	for i, t := range targets {
		q[i] = `"` + t + `"`
	}
	return pushPart{name: "UpdateParameters", content: `{"Targets":[` + strings.Join(q, ",") + `],"@Redfish.OperationApplyTime":"Immediate"}`}
}

func file(b []byte) pushPart {
	return pushPart{name: "UpdateFile", file: "image.fw", content: string(b)}
}

func TestUpdateServiceOffersPush(t *testing.T) {
	for _, pushOnly := range []bool{false, true} {
		e := newFwEnv(t, vbmc.FirmwareOptions{PushOnly: pushOnly}, "n1")
		_, raw := e.do(t, "GET", "/redfish/v1/UpdateService", "", basic("admin", "password"))
		assert.Equal(t, pushPath, raw["MultipartHttpPushUri"])
		assert.NotZero(t, raw["MaxImageSizeBytes"])
		_, simple := raw["Actions"].(map[string]any)["#UpdateService.SimpleUpdate"]
		assert.Equal(t, !pushOnly, simple, "push-only %v: SimpleUpdate offered %v", pushOnly, simple)
		var us redfish.UpdateService
		require.Equal(t, http.StatusOK, e.get(t, "/redfish/v1/UpdateService", &us))
		assert.Equal(t, pushOnly, us.TransferProtocol == nil, "gofish reads no SimpleUpdate when push-only")
	}
}

func TestPushOnlyRefusesSimpleUpdate(t *testing.T) {
	images := imageServer(t, map[string][]byte{"/bmc.fw": vbmc.FirmwareImage(vbmc.FirmwareBMC, "7.0", []byte("b"))})
	e := newFwEnv(t, vbmc.FirmwareOptions{PushOnly: true, UpdateDuration: time.Millisecond}, "n1")
	resp, _ := e.simpleUpdate(t, `{"ImageURI":"`+images.URL+`/bmc.fw"}`)
	assert.Equal(t, http.StatusNotFound, resp.StatusCode)
	_, tasks := e.do(t, "GET", "/redfish/v1/TaskService/Tasks", "", basic("admin", "password"))
	assert.EqualValues(t, 0, tasks["Members@odata.count"])
}

func TestMultipartPush(t *testing.T) {
	bios := vbmc.FirmwareImage(vbmc.FirmwareBIOS, "3.0", []byte("bios payload"))
	bmcImg := vbmc.FirmwareImage(vbmc.FirmwareBMC, "7.0", []byte("bmc payload"))
	corrupt := append(vbmc.FirmwareImage(vbmc.FirmwareBMC, "9.9", []byte("x")), 'z')
	big := vbmc.FirmwareImage(vbmc.FirmwareBMC, "8.0", bytes.Repeat([]byte("0123456789abcdef"), 1<<16)) // 1 MiB
	const inv = "/redfish/v1/UpdateService/FirmwareInventory/"
	tests := []struct {
		name      string
		parts     []pushPart
		status    int
		messageID string // the refusal's, or the task's last message
		state     redfish.TaskState
		bmc, bios string // versions after the task, pending BIOS included
	}{
		{name: "bmc image to the BMC", parts: []pushPart{params(inv + "n1-BMC"), file(bmcImg)}, status: http.StatusAccepted,
			state: redfish.CompletedTaskState, messageID: "Update.1.0.UpdateSuccessful", bmc: "7.0", bios: ""},
		{name: "a 1 MiB image, beyond what other requests may carry", parts: []pushPart{params(inv + "n1-BMC"), file(big)}, status: http.StatusAccepted,
			state: redfish.CompletedTaskState, messageID: "Update.1.0.UpdateSuccessful", bmc: "8.0"},
		{name: "file first, then parameters", parts: []pushPart{file(bios), params(inv + "n1-BIOS")}, status: http.StatusAccepted,
			state: redfish.CompletedTaskState, messageID: "Update.1.0.AwaitToActivate", bmc: "1.00.00", bios: "3.0"},
		{name: "an Oem part is read past", parts: []pushPart{params(inv + "n1-BMC"), {name: "OemParameters", content: `{}`}, file(bmcImg)},
			status: http.StatusAccepted, state: redfish.CompletedTaskState, messageID: "Update.1.0.UpdateSuccessful", bmc: "7.0"},
		{name: "corrupt upload fails the task", parts: []pushPart{params(inv + "n1-BMC"), file(corrupt)}, status: http.StatusAccepted,
			state: redfish.ExceptionTaskState, messageID: "Update.1.0.VerificationFailed", bmc: "1.00.00"},
		{name: "empty upload fails the task", parts: []pushPart{params(inv + "n1-BMC"), file(nil)}, status: http.StatusAccepted,
			state: redfish.ExceptionTaskState, messageID: "Update.1.0.VerificationFailed", bmc: "1.00.00"},
		{name: "image for another component", parts: []pushPart{params(inv + "n1-BIOS"), file(bmcImg)}, status: http.StatusAccepted,
			state: redfish.ExceptionTaskState, messageID: "Update.1.0.VerificationFailed", bmc: "1.00.00"},
		{name: "no UpdateFile", parts: []pushPart{params(inv + "n1-BMC")}, status: http.StatusBadRequest, messageID: "Base.1.8.ActionParameterMissing"},
		{name: "no UpdateParameters", parts: []pushPart{file(bmcImg)}, status: http.StatusBadRequest, messageID: "Base.1.8.ActionParameterMissing"},
		{name: "bad JSON", parts: []pushPart{{name: "UpdateParameters", content: `{"Targets":`}, file(bmcImg)}, status: http.StatusBadRequest,
			messageID: "Base.1.8.MalformedJSON"},
		{name: "unknown target", parts: []pushPart{params(inv + "n9-BMC"), file(bmcImg)}, status: http.StatusBadRequest,
			messageID: "Base.1.8.ActionParameterValueNotInList"},
		{name: "two targets", parts: []pushPart{params(inv+"n1-BMC", inv+"n2-BMC"), file(bmcImg)}, status: http.StatusBadRequest,
			messageID: "Base.1.8.ActionParameterValueNotInList"},
		{name: "no target with two nodes", parts: []pushPart{params(), file(bmcImg)}, status: http.StatusBadRequest,
			messageID: "Base.1.8.ActionParameterMissing"},
		{name: "apply time not supported", parts: []pushPart{{name: "UpdateParameters", content: `{"Targets":[],"@Redfish.OperationApplyTime":"OnStartUpdateRequest"}`}, file(bmcImg)},
			status: http.StatusBadRequest, messageID: "Base.1.8.ActionParameterValueNotInList"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newFwEnv(t, vbmc.FirmwareOptions{PushOnly: true, UpdateDuration: time.Millisecond}, "n1", "n2")
			resp, body := e.push(t, tt.parts...)
			require.Equal(t, tt.status, resp.StatusCode, "%v", body)
			if tt.status != http.StatusAccepted {
				ext := body["error"].(map[string]any)["@Message.ExtendedInfo"].([]any)
				assert.Equal(t, tt.messageID, ext[0].(map[string]any)["MessageId"], "%v", body)
				_, tasks := e.do(t, "GET", "/redfish/v1/TaskService/Tasks", "", basic("admin", "password"))
				assert.EqualValues(t, 0, tasks["Members@odata.count"], "no task for a refused push")
				return
			}
			loc := resp.Header.Get("Location")
			assert.Equal(t, loc, body["@odata.id"])
			tk, _ := e.waitTask(t, loc)
			assert.Equal(t, tt.state, tk.TaskState)
			ids := messageIDs(tk)
			assert.Equal(t, tt.messageID, ids[len(ids)-1], "%v", tk.Messages)
			for _, m := range tk.Messages {
				if m.MessageID == "Update.1.0.TargetDetermined" {
					assert.Contains(t, m.Message, "image.fw", "the pushed file's name")
				}
			}
			bmcV, _ := e.srv.FirmwareVersion("n1", vbmc.FirmwareBMC)
			assert.Equal(t, tt.bmc, bmcV)
			_, pending := e.srv.FirmwareVersion("n1", vbmc.FirmwareBIOS)
			assert.Equal(t, tt.bios, pending)
			other, _ := e.srv.FirmwareVersion("n2", vbmc.FirmwareBMC)
			assert.Equal(t, "1.00.00", other, "n2 untouched")
		})
	}
}

func TestMultipartPushNeedsMultipart(t *testing.T) {
	e := newFwEnv(t, vbmc.FirmwareOptions{PushOnly: true}, "n1")
	resp, body := e.do(t, "POST", pushPath, `{"ImageURI":"http://x/y"}`, basic("admin", "password"),
		func(r *http.Request) { r.Header.Set("Content-Type", "application/json") })
	assert.Equal(t, http.StatusUnsupportedMediaType, resp.StatusCode)
	assert.Contains(t, body["error"].(map[string]any)["message"], "multipart/form-data")
	resp, _ = e.do(t, "POST", pushPath, "--x\r\nbroken", basic("admin", "password"),
		func(r *http.Request) { r.Header.Set("Content-Type", "multipart/form-data; boundary=x") })
	assert.Equal(t, http.StatusBadRequest, resp.StatusCode)
	resp, _ = e.do(t, "POST", pushPath, "", func(r *http.Request) { r.Header.Set("Content-Type", "multipart/form-data; boundary=x") })
	assert.Equal(t, http.StatusUnauthorized, resp.StatusCode, "credentials first")
}

func TestMultipartPushTooLarge(t *testing.T) {
	e := newFwEnv(t, vbmc.FirmwareOptions{PushOnly: true}, "n1")
	// The announced length is enough to refuse: the body is never sent.
	conn, err := net.Dial("tcp", e.ts.Listener.Addr().String())
	require.NoError(t, err)
	defer conn.Close()
	_, err = fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: bmc\r\nAuthorization: Basic %s\r\n"+
		"Content-Type: multipart/form-data; boundary=x\r\nContent-Length: %d\r\n\r\n",
		pushPath, base64.StdEncoding.EncodeToString([]byte("admin:password")), int64(1)<<40)
	require.NoError(t, err)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	require.NoError(t, err)
	defer resp.Body.Close()
	assert.Equal(t, http.StatusRequestEntityTooLarge, resp.StatusCode)
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	assert.Contains(t, string(raw), "MaxImageSizeBytes")
}
