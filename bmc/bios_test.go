package bmc_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/bmc"
	"github.com/anvil-metal/anvil/bmc/vbmc"
)

func TestRedfishBIOSReadsValuesAndRegistry(t *testing.T) {
	env := startVBMC(t, "node-1", "node-2")
	m := bmc.New(fastConfig(nil))
	b, out, err := m.BIOS(context.Background(), env.target(t, "node-2", testPass))
	require.NoError(t, err)
	assert.Equal(t, "gofish", out.Provider)

	want := env.srv.Node("node-2").Bios().Current
	assert.Equal(t, want["SystemServiceTag"], b.Current["SystemServiceTag"], "node-2's BIOS, not node-1's")
	assert.NotEqual(t, env.srv.Node("node-1").Bios().Current["SystemServiceTag"], b.Current["SystemServiceTag"])
	assert.Equal(t, "Uefi", b.Current["BootMode"])
	assert.Equal(t, int64(1), b.Current["PxeDev1VlanId"], "integers are int64")
	assert.Equal(t, true, b.Current["WakeOnLan"])
	assert.Contains(t, b.Current, "SetupPassword")
	assert.Nil(t, b.Current["SetupPassword"], "passwords read null")
	assert.Empty(t, b.Pending)
	assert.Equal(t, []string{"OnReset"}, b.SupportedApplyTimes)

	require.NotNil(t, b.Registry, b.NoRegistry)
	assert.Equal(t, vbmc.BiosRegistryID, b.Registry.ID)
	assert.Equal(t, vbmc.BiosRegistryID, b.RegistryID)
	assert.Len(t, b.Registry.Attributes, len(want))
	boot := b.Registry.Attributes["BootMode"]
	assert.Equal(t, bmc.AttrEnumeration, boot.Type)
	assert.Equal(t, []string{"Uefi", "Bios"}, boot.AllowableValues)
	assert.Equal(t, "Uefi", boot.Default)
	assert.True(t, boot.ResetRequired)
	delay := b.Registry.Attributes["PowerCycleDelaySecs"]
	assert.Equal(t, bmc.AttrInteger, delay.Type)
	require.NotNil(t, delay.LowerBound)
	require.NotNil(t, delay.UpperBound)
	require.NotNil(t, delay.ScalarIncrement)
	assert.Equal(t, []int64{0, 300, 15}, []int64{*delay.LowerBound, *delay.UpperBound, *delay.ScalarIncrement})
	tag := b.Registry.Attributes["AssetTag"]
	require.NotNil(t, tag.MaxLength)
	assert.Equal(t, int64(63), *tag.MaxLength)
	assert.Equal(t, `^[ -~]*$`, tag.ValueExpression)
	st := b.Registry.Attributes["SystemServiceTag"]
	assert.True(t, st.ReadOnly && st.Immutable)
	assert.False(t, b.Registry.Attributes["WakeOnLan"].ResetRequired)
	assert.True(t, b.Registry.Attributes["SetupPassword"].WriteOnly)
}

// applyRebootReadBack is the conductor step's sequence: diff, apply,
// reboot through the power path, read back and verify.
func applyRebootReadBack(t *testing.T, m *bmc.Manager, tg bmc.Target, settings map[string]any) bmc.BIOS {
	t.Helper()
	ctx := context.Background()
	before, _, err := m.BIOS(ctx, tg)
	require.NoError(t, err)
	changed := bmc.Diff(before.Current, settings)
	require.Equal(t, settings, changed)
	_, err = m.ApplyBIOS(ctx, tg, changed)
	require.NoError(t, err)
	_, err = m.SetPower(ctx, tg, bmc.ActionReboot)
	require.NoError(t, err)
	after, _, err := m.BIOS(ctx, tg)
	require.NoError(t, err)
	require.NoError(t, bmc.VerifyApplied(settings, after.Current))
	assert.Empty(t, after.Pending)
	assert.Empty(t, bmc.Diff(after.Current, settings), "a second run is a no-op")
	return after
}

func TestRedfishBIOSApplyRebootReadBack(t *testing.T) {
	env := startVBMC(t, "node-1", "node-2")
	m := bmc.New(fastConfig(nil))
	ctx := context.Background()
	tg := env.target(t, "node-1", testPass)
	// 42.0 is what encoding/json gives an API handler for 42.
	settings := map[string]any{"BootMode": "Bios", "PxeDev1VlanId": 42.0, "AssetTag": "rack-7 u12"}

	_, err := m.ApplyBIOS(ctx, tg, settings)
	require.NoError(t, err)
	b, _, err := m.BIOS(ctx, tg)
	require.NoError(t, err)
	assert.Equal(t, map[string]any{"BootMode": "Bios", "PxeDev1VlanId": int64(42), "AssetTag": "rack-7 u12"}, b.Pending)
	assert.Equal(t, "Uefi", b.Current["BootMode"], "nothing applies before a reboot")
	assert.Error(t, bmc.VerifyApplied(settings, b.Current))

	_, err = m.SetPower(ctx, tg, bmc.ActionReboot)
	require.NoError(t, err)
	b, _, err = m.BIOS(ctx, tg)
	require.NoError(t, err)
	require.NoError(t, bmc.VerifyApplied(settings, b.Current))
	assert.Empty(t, b.Pending)
	assert.Equal(t, "Uefi", env.srv.Node("node-2").Bios().Current["BootMode"], "the other system is untouched")

	applyRebootReadBack(t, m, tg, map[string]any{"ProcVirtualization": "Disabled", "PowerCycleDelaySecs": 45, "QuietBoot": true})
}

func TestRedfishBIOSApplyTimeQuirk(t *testing.T) {
	env := startVBMC(t, "idrac")
	env.srv.Node("idrac").SetQuirks(vbmc.Quirks{BiosApplyTimeRequired: true})
	m := bmc.New(fastConfig(nil))
	tg := env.target(t, "idrac", testPass)

	_, err := m.ApplyBIOS(context.Background(), tg, map[string]any{"SriovGlobalEnable": "Enabled"})
	require.NoError(t, err)
	assert.True(t, env.srv.Node("idrac").Bios().Committed, "ApplyBIOS sent @Redfish.SettingsApplyTime")

	applyRebootReadBack(t, m, tg, map[string]any{"LogicalProc": "Disabled", "MemTest": "Enabled", "AcPwrRcvryUserDelay": int64(120)})
	assert.Equal(t, "Enabled", env.srv.Node("idrac").Bios().Current["SriovGlobalEnable"])
}

func TestRedfishBIOSSystemIDIsUUID(t *testing.T) {
	env := startVBMC(t, "hpe-1", "hpe-2")
	n := env.srv.Node("hpe-1")
	n.SetQuirks(vbmc.Quirks{SystemIDIsUUID: true})
	m := bmc.New(fastConfig(nil))
	tg := env.target(t, n.UUID(), testPass).WithID("hpe-1")

	// bmclib v2.3.0's GetBiosConfiguration only tries System.Embedded.1, 1,
	// Self and system, and would return an empty map here.
	b, _, err := m.BIOS(context.Background(), tg)
	require.NoError(t, err)
	assert.Equal(t, n.Bios().Current["SystemServiceTag"], b.Current["SystemServiceTag"])
	require.NotNil(t, b.Registry)
	applyRebootReadBack(t, m, tg, map[string]any{"BootMode": "Bios", "NumLock": "Off", "PxeDev1VlanId": 7})
	assert.Equal(t, "Uefi", env.srv.Node("hpe-2").Bios().Current["BootMode"])
}

func TestRedfishBIOSSingleSystemNeedsNoSystemID(t *testing.T) {
	env := startVBMC(t, "only")
	env.srv.Node("only").SetQuirks(vbmc.Quirks{SystemIDIsUUID: true})
	m := bmc.New(fastConfig(nil))
	b, _, err := m.BIOS(context.Background(), env.target(t, "", testPass))
	require.NoError(t, err)
	assert.Equal(t, "Uefi", b.Current["BootMode"])
}

func TestRedfishResetBIOSRestoresDefaultsAtBoot(t *testing.T) {
	env := startVBMC(t, "node-1")
	m := bmc.New(fastConfig(nil))
	ctx := context.Background()
	tg := env.target(t, "node-1", testPass)
	defaults := env.srv.Node("node-1").Bios().Current

	applyRebootReadBack(t, m, tg, map[string]any{"BootMode": "Bios", "SerialComm": "OnConRedirCom1", "AssetTag": "x"})
	_, err := m.ResetBIOS(ctx, tg)
	require.NoError(t, err)
	b, _, err := m.BIOS(ctx, tg)
	require.NoError(t, err)
	assert.Equal(t, "Bios", b.Current["BootMode"], "defaults wait for the boot")

	_, err = m.SetPower(ctx, tg, bmc.ActionReboot)
	require.NoError(t, err)
	b, _, err = m.BIOS(ctx, tg)
	require.NoError(t, err)
	for name, def := range defaults {
		if b.Registry.Attributes[name].Type == bmc.AttrPassword {
			continue // read null
		}
		assert.Equal(t, def, b.Current[name], name)
	}
}

func TestRedfishBIOSRefusesBadSettingsBeforeSending(t *testing.T) {
	env := startVBMC(t, "node-1")
	m := bmc.New(fastConfig(nil))
	ctx := context.Background()
	tg := env.target(t, "node-1", testPass)
	b, _, err := m.BIOS(ctx, tg)
	require.NoError(t, err)

	bad := map[string]any{"SystemServiceTag": "ABCDEFG", "PowerCycleDelaySecs": 20, "BootMode": "Legacy", "NoSuchThing": 1}
	verr := bmc.ValidateBIOS(*b.Registry, bad)
	var se *bmc.BIOSSettingsError
	require.ErrorAs(t, verr, &se)
	assert.Equal(t, []string{"BootMode", "NoSuchThing", "PowerCycleDelaySecs", "SystemServiceTag"}, problemNames(se))

	_, err = m.ApplyBIOS(ctx, tg, map[string]any{"SystemServiceTag": "ABCDEFG"})
	require.ErrorIs(t, err, bmc.ErrInvalidBIOSSettings)
	require.ErrorAs(t, err, &se)
	assert.Contains(t, err.Error(), "SystemServiceTag: read-only")
	assert.Empty(t, env.srv.Node("node-1").Bios().Pending, "nothing was sent")
}

func problemNames(e *bmc.BIOSSettingsError) []string {
	var names []string
	for _, p := range e.Problems {
		names = append(names, p.Name)
	}
	return names
}

func TestIPMIHasNoBIOS(t *testing.T) {
	tg, err := bmc.ParseDriverInfo("ipmi", map[string]any{
		"ipmi_address": "192.0.2.1", "ipmi_username": "admin", "ipmi_password": "x",
	})
	require.NoError(t, err)
	m := bmc.New(fastConfig(nil))
	ctx := context.Background()
	_, _, err = m.BIOS(ctx, tg)
	require.ErrorIs(t, err, bmc.ErrUnsupported)
	assert.Contains(t, err.Error(), "not supported by the ipmi driver")
	_, err = m.ApplyBIOS(ctx, tg, map[string]any{"BootMode": "Bios"})
	require.ErrorIs(t, err, bmc.ErrUnsupported)
	_, err = m.ResetBIOS(ctx, tg)
	require.ErrorIs(t, err, bmc.ErrUnsupported)
}

func TestFakeHardwareBIOS(t *testing.T) {
	m := bmc.New(fastConfig(nil))
	tg := fakeTarget(t, "f1")
	settings := map[string]any{"BootMode": "Bios", "PxeDev1VlanId": 100, "QuietBoot": true}
	applyRebootReadBack(t, m, tg, settings)
	assert.Equal(t, "Bios", m.Fake().BIOS("f1").Current["BootMode"])

	_, err := m.ApplyBIOS(context.Background(), tg, map[string]any{"SystemServiceTag": "X"})
	require.ErrorIs(t, err, bmc.ErrInvalidBIOSSettings)

	_, err = m.ResetBIOS(context.Background(), tg)
	require.NoError(t, err)
	_, err = m.SetPower(context.Background(), tg, bmc.ActionReboot)
	require.NoError(t, err)
	assert.Equal(t, "Uefi", m.Fake().BIOS("f1").Current["BootMode"])

	t.Run("settings that never apply fail verification", func(t *testing.T) {
		m.Fake().SetKnobs("f1", bmc.FakeKnobs{IgnoreBIOS: true})
		_, err := m.ApplyBIOS(context.Background(), tg, map[string]any{"LogicalProc": "Disabled"})
		require.NoError(t, err, "pending is what ApplyBIOS checks")
		_, err = m.SetPower(context.Background(), tg, bmc.ActionReboot)
		require.NoError(t, err)
		b, _, err := m.BIOS(context.Background(), tg)
		require.NoError(t, err)
		err = bmc.VerifyApplied(map[string]any{"LogicalProc": "Disabled"}, b.Current)
		require.ErrorIs(t, err, bmc.ErrVerify)
		assert.Contains(t, err.Error(), `LogicalProc: asked "Disabled", read back "Enabled"`)
	})
	t.Run("no registry: values only", func(t *testing.T) {
		m.Fake().SetBIOS("f2", nil, map[string]any{"Foo": "a"})
		b, _, err := m.BIOS(context.Background(), fakeTarget(t, "f2"))
		require.NoError(t, err)
		assert.Nil(t, b.Registry)
		assert.NotEmpty(t, b.NoRegistry)
		assert.Equal(t, "a", b.Current["Foo"])
	})
}

type seenRequest struct {
	Method, Path, IfMatch string
	Body                  map[string]any
}

// startWrappedVBMC serves one vbmc node through wrap, which sees every
// request first and may answer it itself (returning true).
func startWrappedVBMC(t *testing.T, node string, wrap func(w http.ResponseWriter, r *http.Request) bool) (*vbmc.Server, bmc.Target, func() []seenRequest) {
	t.Helper()
	srv := vbmc.NewServer(nil, testUser, testPass, vbmc.NewNode(node, vbmc.NewMemory()))
	var mu sync.Mutex
	var seen []seenRequest
	h := srv.Handler()
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPatch || r.Method == http.MethodPost {
			raw, _ := io.ReadAll(r.Body)
			var body map[string]any
			_ = json.Unmarshal(raw, &body)
			r.Body = io.NopCloser(bytes.NewReader(raw))
			mu.Lock()
			seen = append(seen, seenRequest{r.Method, r.URL.Path, r.Header.Get("If-Match"), body})
			mu.Unlock()
		}
		if wrap != nil && wrap(w, r) {
			return
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(ts.Close)
	env := &vbmcEnv{srv: srv, url: ts.URL}
	return srv, env.target(t, node, testPass), func() []seenRequest {
		mu.Lock()
		defer mu.Unlock()
		return append([]seenRequest(nil), seen...)
	}
}

func TestRedfishBIOSWireFormat(t *testing.T) {
	_, tg, seen := startWrappedVBMC(t, "node-1", nil)
	m := bmc.New(fastConfig(nil))
	_, err := m.ApplyBIOS(context.Background(), tg, map[string]any{"BootMode": "Bios", "PxeDev1VlanId": 42.0})
	require.NoError(t, err)
	var patches []seenRequest
	for _, r := range seen() {
		switch r.Method {
		case http.MethodPatch:
			patches = append(patches, r)
		case http.MethodPost:
			assert.Contains(t, r.Path, "/SessionService/Sessions", "one session, shared by bmclib and gofish")
		}
	}
	require.Len(t, patches, 1)
	p := patches[0]
	assert.Equal(t, "/redfish/v1/Systems/node-1/Bios/Settings", p.Path)
	assert.NotEmpty(t, p.IfMatch, "the Settings ETag is sent back")
	assert.Equal(t, map[string]any{
		"Attributes":                 map[string]any{"BootMode": "Bios", "PxeDev1VlanId": 42.0},
		"@Redfish.SettingsApplyTime": map[string]any{"ApplyTime": "OnReset"},
	}, p.Body)
}

func TestRedfishBIOSWithoutRegistry(t *testing.T) {
	srv, tg, _ := startWrappedVBMC(t, "node-1", func(w http.ResponseWriter, r *http.Request) bool {
		if strings.HasPrefix(r.URL.Path, "/redfish/v1/Registries") {
			http.NotFound(w, r)
			return true
		}
		return false
	})
	m := bmc.New(fastConfig(nil))
	ctx := context.Background()
	b, _, err := m.BIOS(ctx, tg)
	require.NoError(t, err, "values only, no error")
	assert.Nil(t, b.Registry)
	assert.Contains(t, b.NoRegistry, "no registries")
	assert.Equal(t, "Uefi", b.Current["BootMode"])

	// Unvalidated, the BMC's own refusal comes back readable.
	_, err = m.ApplyBIOS(ctx, tg, map[string]any{"BootMode": "Legacy"})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "HTTP 400")
	assert.Contains(t, err.Error(), "Legacy for the property BootMode is not in the list")
	assert.NotContains(t, err.Error(), "@Message.ExtendedInfo", "not the raw body")
	assert.Empty(t, srv.Node("node-1").Bios().Pending)

	_, err = m.ApplyBIOS(ctx, tg, map[string]any{"BootMode": "Bios"})
	require.NoError(t, err)
	assert.Equal(t, "Bios", srv.Node("node-1").Bios().Pending["BootMode"])
}

func TestRedfishBIOSStaleETagIsRetried(t *testing.T) {
	var once sync.Once
	_, tg, seen := startWrappedVBMC(t, "node-1", func(w http.ResponseWriter, r *http.Request) bool {
		stale := false
		if r.Method == http.MethodPatch {
			once.Do(func() { stale = true })
		}
		if stale {
			w.WriteHeader(http.StatusPreconditionFailed)
			return true
		}
		return false
	})
	m := bmc.New(fastConfig(nil))
	_, err := m.ApplyBIOS(context.Background(), tg, map[string]any{"NumLock": "Off"})
	require.NoError(t, err)
	n := 0
	for _, r := range seen() {
		if r.Method == http.MethodPatch {
			n++
		}
	}
	assert.Equal(t, 2, n)
}

// TestRedfishBIOSRegistryLayouts: the registry file need not be named
// after the registry (HPE), may point at the document with PublicationUri
// only, and may sit among files that are missing or about other
// registries.
func TestRedfishBIOSRegistryLayouts(t *testing.T) {
	doc := "/redfish/v1/Registries/" + vbmc.BiosRegistryID + "/" + vbmc.BiosRegistryID
	layout := func(members ...string) func(w http.ResponseWriter, r *http.Request) bool {
		return func(w http.ResponseWriter, r *http.Request) bool {
			var body any
			switch r.URL.Path {
			case "/redfish/v1/Registries":
				var ms []any
				for _, m := range members {
					ms = append(ms, map[string]any{"@odata.id": "/redfish/v1/Registries/" + m})
				}
				body = map[string]any{"Members": ms, "Members@odata.count": len(ms)}
			case "/redfish/v1/Registries/Base":
				body = map[string]any{"Id": "Base.1.8.1", "Registry": "Base.1.8", "Location": []any{map[string]any{"Language": "en", "Uri": "/nope"}}}
			case "/redfish/v1/Registries/BiosFile":
				body = map[string]any{"Id": vbmc.BiosRegistryID, "Registry": "BiosAttributeRegistry.1.0",
					"Location": []any{map[string]any{"Language": "en", "PublicationUri": doc}}}
			case "/redfish/v1/Registries/Missing":
				http.NotFound(w, r)
				return true
			default:
				return false
			}
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(body)
			return true
		}
	}
	m := bmc.New(fastConfig(nil))
	t.Run("found by Id, PublicationUri on the BMC", func(t *testing.T) {
		_, tg, _ := startWrappedVBMC(t, "n", layout("Base", "Missing", "BiosFile"))
		b, _, err := m.BIOS(context.Background(), tg)
		require.NoError(t, err)
		require.NotNil(t, b.Registry, b.NoRegistry)
		assert.Contains(t, b.Registry.Attributes, "BootMode")
	})
	t.Run("not listed", func(t *testing.T) {
		_, tg, _ := startWrappedVBMC(t, "n", layout("Base", "Missing"))
		b, _, err := m.BIOS(context.Background(), tg)
		require.NoError(t, err)
		assert.Nil(t, b.Registry)
		assert.Contains(t, b.NoRegistry, "is not among the BMC's registries")
		assert.Equal(t, "Uefi", b.Current["BootMode"])
	})
}

func TestRedfishBIOSOverBasicAuth(t *testing.T) {
	srv, tg, _ := startWrappedVBMC(t, "node-1", func(w http.ResponseWriter, r *http.Request) bool {
		if r.Method == http.MethodPost && strings.HasPrefix(r.URL.Path, "/redfish/v1/SessionService") {
			http.Error(w, "sessions not supported", http.StatusMethodNotAllowed)
			return true
		}
		return false
	})
	m := bmc.New(fastConfig(nil))
	_, err := m.ApplyBIOS(context.Background(), tg, map[string]any{"BootMode": "Bios"})
	require.NoError(t, err)
	assert.Equal(t, "Bios", srv.Node("node-1").Bios().Pending["BootMode"])
}

func TestRedfishBIOSWrongPassword(t *testing.T) {
	env := startVBMC(t, "node-1")
	m := bmc.New(fastConfig(nil))
	_, out, err := m.BIOS(context.Background(), env.target(t, "node-1", "wrong"))
	require.ErrorIs(t, err, bmc.ErrAuth)
	assert.Equal(t, 1, out.Attempts)
	assert.NotContains(t, err.Error(), "wrong")
}

func TestRedfishBIOSSystemSelection(t *testing.T) {
	env := startVBMC(t, "node-1", "node-2")
	m := bmc.New(fastConfig(nil))
	_, _, err := m.BIOS(context.Background(), env.target(t, "node-9", testPass))
	require.ErrorIs(t, err, bmc.ErrInvalidDriverInfo)
	assert.Contains(t, err.Error(), "node-9")
	_, _, err = m.BIOS(context.Background(), env.target(t, "", testPass))
	require.ErrorIs(t, err, bmc.ErrInvalidDriverInfo)
	assert.Contains(t, err.Error(), "set redfish_system_id")
}

// ApplyBIOSWith uses the registry the caller read: it is not read again.
func TestApplyBIOSWithReadsTheRegistryOnce(t *testing.T) {
	env := startVBMC(t, "node-1")
	var registryReads int
	var mu sync.Mutex
	count := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.Contains(r.URL.Path, "/Registries/") {
			mu.Lock()
			registryReads++
			mu.Unlock()
		}
		env.srv.Handler().ServeHTTP(w, r)
	}))
	t.Cleanup(count.Close)
	env.url = count.URL
	m := bmc.New(fastConfig(nil))
	tg := env.target(t, "node-1", testPass)
	ctx := context.Background()
	b, _, err := m.BIOS(ctx, tg)
	require.NoError(t, err)
	mu.Lock()
	afterRead := registryReads
	mu.Unlock()
	require.Positive(t, afterRead)
	_, err = m.ApplyBIOSWith(ctx, tg, b, map[string]any{"LogicalProc": "Disabled"})
	require.NoError(t, err)
	mu.Lock()
	assert.Equal(t, afterRead, registryReads, "no second registry read")
	mu.Unlock()
	_, err = m.ApplyBIOSWith(ctx, tg, b, map[string]any{"SystemServiceTag": "X"})
	require.ErrorIs(t, err, bmc.ErrInvalidBIOSSettings, "still validated against the registry given")
}
