package bmc_test

import (
	"context"
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
