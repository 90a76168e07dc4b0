package vbmc_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	bmcredfish "github.com/bmc-toolbox/bmclib/v2/providers/redfish"
	"github.com/go-logr/logr"
	"github.com/stmcginnis/gofish"
	"github.com/stmcginnis/gofish/common"
	"github.com/stmcginnis/gofish/redfish"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/bmc/vbmc"
)

const (
	biosPath     = "/redfish/v1/Systems/node-1/Bios"
	settingsPath = biosPath + "/Settings"
	onReset      = `,"@Redfish.SettingsApplyTime":{"ApplyTime":"OnReset"}`
)

func gofishClient(t *testing.T, e *env) *gofish.APIClient {
	t.Helper()
	c, err := gofish.ConnectContext(context.Background(), gofish.ClientConfig{
		Endpoint: e.ts.URL, Username: "admin", Password: "password", BasicAuth: true, HTTPClient: e.ts.Client(),
	})
	require.NoError(t, err)
	t.Cleanup(c.Logout)
	return c
}

func gofishSystem(t *testing.T, c *gofish.APIClient, id string) *redfish.ComputerSystem {
	t.Helper()
	systems, err := c.Service.Systems()
	require.NoError(t, err)
	for _, s := range systems {
		if s.ID == id {
			return s
		}
	}
	require.Failf(t, "no system", "%s not among %d systems", id, len(systems))
	return nil
}

func (e *env) resetSystem(t *testing.T, path, resetType string) {
	t.Helper()
	resp, _ := e.do(t, "POST", path+"/Actions/ComputerSystem.Reset", `{"ResetType":"`+resetType+`"}`, basic("admin", "password"))
	require.Equal(t, http.StatusNoContent, resp.StatusCode)
}

func (e *env) attrs(t *testing.T, path string) map[string]any {
	t.Helper()
	resp, b := e.do(t, "GET", path, "", basic("admin", "password"))
	require.Equal(t, http.StatusOK, resp.StatusCode)
	return b["Attributes"].(map[string]any)
}

func TestBiosAndRegistryThroughGofish(t *testing.T) {
	e := newEnv(t)
	c := gofishClient(t, e)
	bios, err := gofishSystem(t, c, "node-1").Bios()
	require.NoError(t, err)
	require.NotNil(t, bios)
	assert.Equal(t, vbmc.BiosRegistryID, bios.AttributeRegistry)
	assert.Equal(t, []common.ApplyTime{common.OnResetApplyTime}, bios.AllowedAttributeUpdateApplyTimes())
	assert.Equal(t, "Uefi", bios.Attributes.String("BootMode"))
	assert.Equal(t, 60, bios.Attributes.Int("AcPwrRcvryUserDelay"))
	assert.Nil(t, bios.Attributes["SetupPassword"], "passwords read as null")
	assert.Len(t, bios.Attributes.String("SystemServiceTag"), 7)

	files, err := c.Service.Registries()
	require.NoError(t, err)
	require.Len(t, files, 1)
	assert.Equal(t, vbmc.BiosRegistryID, files[0].ID)
	require.NotEmpty(t, files[0].Location)
	reg, err := redfish.GetAttributeRegistry(c, files[0].Location[0].URI)
	require.NoError(t, err)
	assert.Equal(t, "#AttributeRegistry.v1_3_0.AttributeRegistry", reg.ODataType)
	assert.Equal(t, vbmc.BiosRegistryID, reg.ID)

	byName := map[string]redfish.Attribute{}
	types := map[redfish.AttributeType]int{}
	for _, a := range reg.RegistryEntries.Attributes {
		byName[a.AttributeName] = a
		types[a.Type]++
		_, inBios := bios.Attributes[a.AttributeName]
		assert.True(t, inBios, "registry attribute %s is in Bios", a.AttributeName)
	}
	assert.Len(t, bios.Attributes, len(byName), "Bios has no attribute the registry lacks")
	assert.GreaterOrEqual(t, len(byName), 30)
	for _, typ := range []redfish.AttributeType{redfish.EnumerationAttributeType, redfish.StringAttributeType,
		redfish.IntegerAttributeType, redfish.BooleanAttributeType, redfish.PasswordAttributeType} {
		assert.Positive(t, types[typ], "attributes of type %s", typ)
	}
	delay := byName["AcPwrRcvryUserDelay"]
	assert.EqualValues(t, 60, delay.LowerBound)
	assert.EqualValues(t, 600, delay.UpperBound.Int64())
	assert.False(t, delay.ResetRequired)
	assert.EqualValues(t, 63, byName["AssetTag"].MaxLength)
	assert.True(t, byName["SystemServiceTag"].ReadOnly)
	assert.True(t, byName["BootMode"].ResetRequired)
	assert.Equal(t, "Uefi", byName["BootMode"].DefaultValue)
	var names []string
	for _, v := range byName["BootMode"].Value {
		names = append(names, v.ValueName)
	}
	assert.Equal(t, []string{"Uefi", "Bios"}, names)
	assert.NotEmpty(t, reg.RegistryEntries.Menus)
}

// TestBiosGofishUpdateAndReset drives the BIOS as bmclib's generic code
// does: UpdateBiosAttributesApplyAt (GET Settings, PATCH with its ETag),
// a reset, then ResetBios.
func TestBiosGofishUpdateAndReset(t *testing.T) {
	e := newEnv(t)
	c := gofishClient(t, e)
	sys := gofishSystem(t, c, "node-1")
	bios, err := sys.Bios()
	require.NoError(t, err)
	require.NoError(t, bios.UpdateBiosAttributesApplyAt(redfish.SettingsAttributes{"BootMode": "Bios", "AcPwrRcvryUserDelay": 120}, common.OnResetApplyTime))
	assert.Equal(t, map[string]any{"BootMode": "Bios", "AcPwrRcvryUserDelay": float64(120)}, e.attrs(t, settingsPath))

	require.NoError(t, sys.Reset(redfish.OnResetType))
	bios, err = sys.Bios()
	require.NoError(t, err)
	assert.Equal(t, "Bios", bios.Attributes.String("BootMode"))
	assert.Equal(t, 120, bios.Attributes.Int("AcPwrRcvryUserDelay"))

	require.NoError(t, bios.ResetBios())
	sys = gofishSystem(t, c, "node-1") // a fresh ETag: the power state changed
	require.NoError(t, sys.Reset(redfish.ForceRestartResetType))
	bios, err = sys.Bios()
	require.NoError(t, err)
	assert.Equal(t, "Uefi", bios.Attributes.String("BootMode"))
}

func TestBiosSettingsPatchValidation(t *testing.T) {
	tests := []struct {
		name, attrs, wantID, wantAttr string
		wantStored                    map[string]any // pending after a good PATCH
	}{
		{name: "enumeration", attrs: `{"SriovGlobalEnable":"Enabled"}`, wantStored: map[string]any{"SriovGlobalEnable": "Enabled"}},
		{name: "enumeration not in list", attrs: `{"BootMode":"Legacy"}`, wantID: "PropertyValueNotInList", wantAttr: "BootMode"},
		{name: "enumeration wrong type", attrs: `{"ProcTurboMode":true}`, wantID: "PropertyValueTypeError", wantAttr: "ProcTurboMode"},
		{name: "integer", attrs: `{"AcPwrRcvryUserDelay":600}`, wantStored: map[string]any{"AcPwrRcvryUserDelay": float64(600)}},
		{name: "integer below bound", attrs: `{"AcPwrRcvryUserDelay":59}`, wantID: "PropertyValueOutOfRange", wantAttr: "AcPwrRcvryUserDelay"},
		{name: "integer above bound", attrs: `{"PxeDev1VlanId":4095}`, wantID: "PropertyValueOutOfRange", wantAttr: "PxeDev1VlanId"},
		{name: "integer off increment", attrs: `{"PowerCycleDelaySecs":20}`, wantID: "PropertyValueOutOfRange", wantAttr: "PowerCycleDelaySecs"},
		{name: "integer on increment", attrs: `{"PowerCycleDelaySecs":45}`, wantStored: map[string]any{"PowerCycleDelaySecs": float64(45)}},
		{name: "integer fraction", attrs: `{"AcPwrRcvryUserDelay":60.5}`, wantID: "PropertyValueTypeError", wantAttr: "AcPwrRcvryUserDelay"},
		{name: "integer as string", attrs: `{"AcPwrRcvryUserDelay":"90"}`, wantID: "PropertyValueTypeError", wantAttr: "AcPwrRcvryUserDelay"},
		{name: "string", attrs: `{"AssetTag":"rack-4 u12"}`, wantStored: map[string]any{"AssetTag": "rack-4 u12"}},
		{name: "string too long", attrs: `{"AssetTag":"` + strings.Repeat("x", 64) + `"}`, wantID: "PropertyValueFormatError", wantAttr: "AssetTag"},
		{name: "string not matching expression", attrs: `{"HttpDev1Uri":"ftp://x/y"}`, wantID: "PropertyValueFormatError", wantAttr: "HttpDev1Uri"},
		{name: "boolean", attrs: `{"QuietBoot":true}`, wantStored: map[string]any{"QuietBoot": true}},
		{name: "boolean wrong type", attrs: `{"QuietBoot":"true"}`, wantID: "PropertyValueTypeError", wantAttr: "QuietBoot"},
		{name: "password shows as null", attrs: `{"SetupPassword":"s3cret"}`, wantStored: map[string]any{"SetupPassword": nil}},
		{name: "password too long", attrs: `{"SysPassword":"` + strings.Repeat("p", 33) + `"}`, wantID: "PropertyValueFormatError", wantAttr: "SysPassword"},
		{name: "read-only", attrs: `{"SystemServiceTag":"ABCDEFG"}`, wantID: "PropertyNotWritable", wantAttr: "SystemServiceTag"},
		{name: "read-only boolean", attrs: `{"TpmPresent":false}`, wantID: "PropertyNotWritable", wantAttr: "TpmPresent"},
		{name: "unknown", attrs: `{"HyperDrive":"Enabled"}`, wantID: "PropertyUnknown", wantAttr: "HyperDrive"},
		{name: "one bad rejects all", attrs: `{"MemTest":"Enabled","NumLock":"Maybe"}`, wantID: "PropertyValueNotInList", wantAttr: "NumLock"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			resp, body := e.do(t, "PATCH", settingsPath, `{"Attributes":`+tt.attrs+onReset+`}`, basic("admin", "password"))
			if tt.wantID == "" {
				require.Equal(t, http.StatusOK, resp.StatusCode, "%v", body)
				assert.Equal(t, tt.wantStored, e.attrs(t, settingsPath))
				return
			}
			require.Equal(t, http.StatusBadRequest, resp.StatusCode)
			info := body["error"].(map[string]any)["@Message.ExtendedInfo"].([]any)
			require.Len(t, info, 1)
			msg := info[0].(map[string]any)
			assert.Equal(t, "Base.1.8."+tt.wantID, msg["MessageId"])
			assert.Equal(t, []any{"#/Attributes/" + tt.wantAttr}, msg["RelatedProperties"])
			assert.Contains(t, msg["Message"], tt.wantAttr)
			assert.NotContains(t, fmt.Sprint(body), strings.Repeat("p", 33), "a password is never echoed")
			assert.Empty(t, e.attrs(t, settingsPath), "nothing stored")
		})
	}
}

func TestBiosSettingsPatchRequestErrors(t *testing.T) {
	tests := []struct{ name, body, wantID string }{
		{"immediate unsupported", `{"Attributes":{"MemTest":"Enabled"},"@Redfish.SettingsApplyTime":{"ApplyTime":"Immediate"}}`, "PropertyValueNotInList"},
		{"maintenance window unsupported", `{"Attributes":{"MemTest":"Enabled"},"@Redfish.SettingsApplyTime":{"ApplyTime":"AtMaintenanceWindowStart"}}`, "PropertyValueNotInList"},
		{"no attributes", `{"@Redfish.SettingsApplyTime":{"ApplyTime":"OnReset"}}`, "PropertyMissing"},
		{"attributes not an object", `{"Attributes":["MemTest"]}`, "PropertyValueTypeError"},
		{"unknown top-level property", `{"Attributes":{},"Bogus":1}`, "PropertyUnknown"},
		{"malformed", `{"Attributes":`, "MalformedJSON"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			resp, body := e.do(t, "PATCH", settingsPath, tt.body, basic("admin", "password"))
			require.Equal(t, http.StatusBadRequest, resp.StatusCode)
			msg := body["error"].(map[string]any)["@Message.ExtendedInfo"].([]any)[0].(map[string]any)
			assert.Equal(t, "Base.1.8."+tt.wantID, msg["MessageId"])
			assert.Empty(t, e.attrs(t, settingsPath))
		})
	}
}

func TestBiosSettingsStalePreconditionRefused(t *testing.T) {
	e := newEnv(t)
	resp, _ := e.do(t, "GET", settingsPath, "", basic("admin", "password"))
	etag := resp.Header.Get("ETag")
	require.NotEmpty(t, etag)
	ifMatch := func(r *http.Request) { r.Header.Set("If-Match", etag) }
	resp, _ = e.do(t, "PATCH", settingsPath, `{"Attributes":{"MemTest":"Enabled"}}`, basic("admin", "password"), ifMatch)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	resp, _ = e.do(t, "PATCH", settingsPath, `{"Attributes":{"NumLock":"Off"}}`, basic("admin", "password"), ifMatch)
	assert.Equal(t, http.StatusPreconditionFailed, resp.StatusCode)
}

// TestBiosPendingAppliesAtBoot: pending values apply when the system
// boots (on from off, restart, cycle), not at power off, NMI or an On of a
// running system.
func TestBiosPendingAppliesAtBoot(t *testing.T) {
	tests := []struct {
		name    string
		startOn bool
		resets  []string
		applied bool
	}{
		{"On from off", false, []string{"On"}, true},
		{"ForceRestart", true, []string{"ForceRestart"}, true},
		{"ForceRestart of an off system", false, []string{"ForceRestart"}, true},
		{"PowerCycle", true, []string{"PowerCycle"}, true},
		{"GracefulShutdown then On", true, []string{"GracefulShutdown", "On"}, true},
		{"ForceOff only", true, []string{"ForceOff"}, false},
		{"GracefulShutdown only", true, []string{"GracefulShutdown"}, false},
		{"On while on", true, []string{"On"}, false},
		{"Nmi", true, []string{"Nmi"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			sys := "/redfish/v1/Systems/node-1"
			if tt.startOn {
				e.resetSystem(t, sys, "On")
			}
			resp, _ := e.do(t, "PATCH", settingsPath, `{"Attributes":{"ProcVirtualization":"Disabled","NumLock":"Off"}`+onReset+`}`, basic("admin", "password"))
			require.Equal(t, http.StatusOK, resp.StatusCode)
			assert.Equal(t, "Enabled", e.attrs(t, biosPath)["ProcVirtualization"], "pending is not current")
			for _, rt := range tt.resets {
				e.resetSystem(t, sys, rt)
			}
			cur := e.attrs(t, biosPath)
			if !tt.applied {
				assert.Equal(t, "Enabled", cur["ProcVirtualization"])
				assert.Len(t, e.attrs(t, settingsPath), 2, "still pending")
				return
			}
			assert.Equal(t, "Disabled", cur["ProcVirtualization"])
			assert.Equal(t, "Off", cur["NumLock"], "ResetRequired false also applies at reset")
			assert.Empty(t, e.attrs(t, settingsPath))
		})
	}
}

func TestBiosAppliesOnIPMIPowerOn(t *testing.T) {
	e := newEnv(t)
	resp, _ := e.do(t, "PATCH", settingsPath, `{"Attributes":{"BootMode":"Bios"}`+onReset+`}`, basic("admin", "password"))
	require.Equal(t, http.StatusOK, resp.StatusCode)
	resp, _ = e.do(t, "POST", "/control/node-1/power", "1", basic("admin", "password"))
	require.Equal(t, http.StatusNoContent, resp.StatusCode)
	assert.Equal(t, "Bios", e.node.Bios().Current["BootMode"])
}

func TestResetBios(t *testing.T) {
	e := newEnv(t)
	sys := "/redfish/v1/Systems/node-1"
	patch := func(attrs string) {
		resp, _ := e.do(t, "PATCH", settingsPath, `{"Attributes":`+attrs+onReset+`}`, basic("admin", "password"))
		require.Equal(t, http.StatusOK, resp.StatusCode)
	}
	patch(`{"BootMode":"Bios","MemTest":"Enabled","AssetTag":"rack-1"}`)
	e.resetSystem(t, sys, "On")
	require.Equal(t, "Bios", e.attrs(t, biosPath)["BootMode"])
	tag := e.attrs(t, biosPath)["SystemServiceTag"]

	patch(`{"NumLock":"Off"}`) // dropped by ResetBios
	resp, _ := e.do(t, "POST", biosPath+"/Actions/Bios.ResetBios", `{}`, basic("admin", "password"))
	require.Equal(t, http.StatusNoContent, resp.StatusCode)
	patch(`{"QuietBoot":true}`) // after ResetBios: applies on top of the defaults
	assert.Equal(t, "Bios", e.attrs(t, biosPath)["BootMode"], "defaults wait for the reset")

	e.resetSystem(t, sys, "ForceRestart")
	cur := e.attrs(t, biosPath)
	assert.Equal(t, "Uefi", cur["BootMode"])
	assert.Equal(t, "Disabled", cur["MemTest"])
	assert.Equal(t, "", cur["AssetTag"])
	assert.Equal(t, "On", cur["NumLock"])
	assert.Equal(t, true, cur["QuietBoot"])
	assert.Equal(t, tag, cur["SystemServiceTag"], "read-only facts survive")
	assert.Empty(t, e.attrs(t, settingsPath))
}

func TestQuirkBiosApplyTimeRequired(t *testing.T) {
	for _, quirk := range []bool{false, true} {
		t.Run(fmt.Sprintf("quirk=%t", quirk), func(t *testing.T) {
			e := newEnv(t)
			e.node.SetQuirks(vbmc.Quirks{BiosApplyTimeRequired: quirk})
			resp, _ := e.do(t, "PATCH", settingsPath, `{"Attributes":{"LogicalProc":"Disabled"}}`, basic("admin", "password"))
			require.Equal(t, http.StatusOK, resp.StatusCode)
			assert.Equal(t, map[string]any{"LogicalProc": "Disabled"}, e.attrs(t, settingsPath), "accepted either way")
			e.resetSystem(t, "/redfish/v1/Systems/node-1", "On")
			e.resetSystem(t, "/redfish/v1/Systems/node-1", "ForceRestart")
			if !quirk {
				assert.Equal(t, "Disabled", e.attrs(t, biosPath)["LogicalProc"], "no apply time means OnReset")
				return
			}
			assert.Equal(t, "Enabled", e.attrs(t, biosPath)["LogicalProc"], "never applied")
			assert.Equal(t, map[string]any{"LogicalProc": "Disabled"}, e.attrs(t, settingsPath), "still pending")

			// A PATCH with an apply time commits everything pending, as an
			// iDRAC configuration job does.
			resp, _ = e.do(t, "PATCH", settingsPath, `{"Attributes":{"MemTest":"Enabled"}`+onReset+`}`, basic("admin", "password"))
			require.Equal(t, http.StatusOK, resp.StatusCode)
			e.resetSystem(t, "/redfish/v1/Systems/node-1", "ForceRestart")
			cur := e.attrs(t, biosPath)
			assert.Equal(t, "Disabled", cur["LogicalProc"])
			assert.Equal(t, "Enabled", cur["MemTest"])
		})
	}
}

func TestQuirkSystemIDIsUUID(t *testing.T) {
	for _, quirk := range []bool{false, true} {
		t.Run(fmt.Sprintf("quirk=%t", quirk), func(t *testing.T) {
			e := newEnv(t)
			e.node.SetQuirks(vbmc.Quirks{SystemIDIsUUID: quirk})
			uuid := e.node.UUID()
			require.Regexp(t, `^[0-9a-f]{8}-[0-9a-f]{4}-5[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`, uuid)
			want, gone := "node-1", uuid
			if quirk {
				want, gone = uuid, "node-1"
			}
			_, coll := e.do(t, "GET", "/redfish/v1/Systems", "", basic("admin", "password"))
			assert.Contains(t, coll["Members"], map[string]any{"@odata.id": "/redfish/v1/Systems/" + want})
			assert.Contains(t, coll["Members"], map[string]any{"@odata.id": "/redfish/v1/Systems/node-2"}, "other nodes keep their names")

			resp, sys := e.do(t, "GET", "/redfish/v1/Systems/"+want, "", basic("admin", "password"))
			require.Equal(t, http.StatusOK, resp.StatusCode)
			assert.Equal(t, want, sys["Id"])
			assert.Equal(t, uuid, sys["UUID"])
			assert.Equal(t, "/redfish/v1/Systems/"+want+"/Bios", sys["Bios"].(map[string]any)["@odata.id"])
			for _, p := range []string{"", "/Bios", "/Bios/Settings"} {
				resp, _ = e.do(t, "GET", "/redfish/v1/Systems/"+gone+p, "", basic("admin", "password"))
				assert.Equal(t, http.StatusNotFound, resp.StatusCode, p)
			}
			_, bios := e.do(t, "GET", "/redfish/v1/Systems/"+want+"/Bios", "", basic("admin", "password"))
			assert.Equal(t, "/redfish/v1/Systems/"+want+"/Bios/Settings", bios["@Redfish.Settings"].(map[string]any)["SettingsObject"].(map[string]any)["@odata.id"])
			_, mgr := e.do(t, "GET", "/redfish/v1/Managers/node-1", "", basic("admin", "password"))
			assert.Equal(t, []any{map[string]any{"@odata.id": "/redfish/v1/Systems/" + want}}, mgr["Links"].(map[string]any)["ManagerForServers"])
			_, inv := e.do(t, "GET", "/redfish/v1/UpdateService/FirmwareInventory/node-1-BIOS", "", basic("admin", "password"))
			assert.Equal(t, []any{map[string]any{"@odata.id": "/redfish/v1/Systems/" + want}}, inv["RelatedItem"], "the BIOS firmware is the system's, wherever it is")

			// The whole BIOS flow works at the UUID path, through gofish too.
			sysObj := gofishSystem(t, gofishClient(t, e), want)
			b, err := sysObj.Bios()
			require.NoError(t, err)
			require.NoError(t, b.UpdateBiosAttributesApplyAt(redfish.SettingsAttributes{"SysProfile": "PerfOptimized"}, common.OnResetApplyTime))
			require.NoError(t, sysObj.Reset(redfish.OnResetType))
			assert.Equal(t, "PerfOptimized", e.node.Bios().Current["SysProfile"])
		})
	}
}

func TestBiosConcurrent(t *testing.T) {
	e := newEnv(t)
	// Not e.do: require must not fail a test from another goroutine.
	send := func(method, path, body string) {
		req, err := http.NewRequest(method, e.ts.URL+path, strings.NewReader(body))
		if err != nil {
			t.Error(err)
			return
		}
		req.SetBasicAuth("admin", "password")
		resp, err := e.ts.Client().Do(req)
		if err != nil {
			t.Error(err)
			return
		}
		resp.Body.Close()
	}
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range 10 {
				switch (i + j) % 4 {
				case 0:
					send("PATCH", settingsPath, fmt.Sprintf(`{"Attributes":{"PxeDev1VlanId":%d}}`, 1+i*10+j))
				case 1:
					send("GET", biosPath, "")
				case 2:
					send("POST", "/redfish/v1/Systems/node-1/Actions/ComputerSystem.Reset", `{"ResetType":"PowerCycle"}`)
				case 3:
					send("GET", settingsPath, "")
				}
			}
		}()
	}
	wg.Wait()
	e.resetSystem(t, "/redfish/v1/Systems/node-1", "PowerCycle")
	assert.Empty(t, e.attrs(t, settingsPath))
}

func TestBiosRegistryNotFound(t *testing.T) {
	e := newEnv(t)
	for _, p := range []string{"/redfish/v1/Registries/Base.1.8", "/redfish/v1/Registries/" + vbmc.BiosRegistryID + "/other"} {
		resp, _ := e.do(t, "GET", p, "", basic("admin", "password"))
		assert.Equal(t, http.StatusNotFound, resp.StatusCode, p)
	}
	resp, _ := e.do(t, "GET", "/redfish/v1/Registries", "")
	assert.Equal(t, http.StatusUnauthorized, resp.StatusCode)
}

// TestQuirkSystemIDIsUUIDHidesBiosFromBmclib shows what the quirk is for:
// bmclib v2.3.0's generic BIOS calls only use systems at ids it knows
// (System.Embedded.1, 1, Self, system), so a node with such a name has
// its BIOS read, and the same node behind a UUID has none.
func TestQuirkSystemIDIsUUIDHidesBiosFromBmclib(t *testing.T) {
	for _, quirk := range []bool{false, true} {
		t.Run(fmt.Sprintf("quirk=%t", quirk), func(t *testing.T) {
			node := vbmc.NewNode("System.Embedded.1", vbmc.NewMemory())
			node.SetQuirks(vbmc.Quirks{SystemIDIsUUID: quirk})
			ts := httptest.NewServer(vbmc.NewServer(nil, "admin", "password", node).Handler())
			t.Cleanup(ts.Close)
			u, err := url.Parse(ts.URL)
			require.NoError(t, err)
			conn := bmcredfish.New("http://"+u.Hostname(), "admin", "password", logr.Discard(),
				bmcredfish.WithHttpClient(ts.Client()), bmcredfish.WithPort(u.Port()))
			ctx := context.Background()
			require.NoError(t, conn.Open(ctx))
			t.Cleanup(func() { _ = conn.Close(ctx) })

			cfg, err := conn.GetBiosConfiguration(ctx)
			require.NoError(t, err)
			if quirk {
				assert.Empty(t, cfg, "bmclib skips the UUID system")
				return
			}
			assert.Equal(t, "Uefi", cfg["BootMode"])
			// bmclib sends every value as a string: enumerations pass.
			require.NoError(t, conn.SetBiosConfiguration(ctx, map[string]string{"BootMode": "Bios"}))
			assert.Equal(t, map[string]any{"BootMode": "Bios"}, node.Bios().Pending)
			// An integer as a string is refused, as iDRAC does.
			require.Error(t, conn.SetBiosConfiguration(ctx, map[string]string{"AcPwrRcvryUserDelay": "120"}))
		})
	}
}

func TestConfigQuirks(t *testing.T) {
	p := filepath.Join(t.TempDir(), "c.json")
	require.NoError(t, os.WriteFile(p, []byte(`{"nodes":[{"name":"a","quirks":{"system_id_is_uuid":true,"bios_apply_time_required":true}},{"name":"b"}]}`), 0o600))
	c, err := vbmc.LoadConfig(p)
	require.NoError(t, err)
	nodes, err := vbmc.BuildNodes(slog.New(slog.DiscardHandler), c)
	require.NoError(t, err)
	t.Cleanup(func() { vbmc.CloseNodes(nodes) })
	assert.Equal(t, vbmc.Quirks{SystemIDIsUUID: true, BiosApplyTimeRequired: true}, nodes[0].Quirks())
	assert.Equal(t, nodes[0].UUID(), nodes[0].SystemID())
	assert.Equal(t, vbmc.Quirks{}, nodes[1].Quirks())
	assert.Equal(t, "b", nodes[1].SystemID())
}
