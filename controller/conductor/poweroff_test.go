package conductor

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/bmc"
	"github.com/anvil-metal/anvil/controller/state"
	"github.com/anvil-metal/anvil/controller/store"
	"github.com/anvil-metal/anvil/controller/store/sqlite"
	"github.com/anvil-metal/anvil/controller/store/storetest"
)

// TestPowerOff: what each flow's power-off does to a node with and
// without disable_power_off, and the targets the worker and the boots use.
func TestPowerOff(t *testing.T) {
	for _, c := range []struct {
		name          string
		disable       bool
		rebootInstead bool
		wantSets      []string
		wantRecorded  string
	}{
		{"plain node, end of a flow", false, offReboot, []string{PowerOff}, PowerOff},
		{"plain node, before a power-on", false, offLeaveOn, []string{PowerOff}, PowerOff},
		{"disable_power_off, end of a flow: reboot", true, offReboot, []string{Rebooting}, PowerOn},
		{"disable_power_off, before a power-on: left on", true, offLeaveOn, nil, PowerOn},
	} {
		t.Run(c.name, func(t *testing.T) {
			stub := &bmcStub{actual: map[string]string{}, fail: map[string]bool{}, reads: map[string]int{}}
			n := &store.Node{UUID: "n1", DisablePowerOff: c.disable}
			got, err := powerOff(context.Background(), stub, n, c.rebootInstead)
			require.NoError(t, err)
			assert.Equal(t, c.wantRecorded, got)
			var want []string
			for _, s := range c.wantSets {
				want = append(want, "n1="+s)
			}
			assert.Equal(t, want, stub.sets)
			if c.disable {
				assert.Equal(t, Rebooting, offTarget(n))
				assert.Equal(t, Rebooting, bootTarget(n))
				require.Error(t, refusePowerOff(n, SoftPowerOff))
				assert.Equal(t, "Failed to set node power state to soft power off.", refusePowerOff(n, SoftPowerOff).Error())
				assert.NoError(t, refusePowerOff(n, Rebooting))
			} else {
				assert.Equal(t, PowerOff, offTarget(n))
				assert.Equal(t, PowerOn, bootTarget(n))
				assert.NoError(t, refusePowerOff(n, PowerOff))
			}
		})
	}
}

// TestPowerSyncDisablePowerOff: power sync never forces a node with
// disable_power_off (Ironic's sync skips force_power_state_during_sync for
// it): found off, it is recorded off; a node without the flag is restored.
func TestPowerSyncDisablePowerOff(t *testing.T) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, ":memory:")
	require.NoError(t, err)
	defer st.Close()
	stub := &bmcStub{actual: map[string]string{}, fail: map[string]bool{}, reads: map[string]int{}}
	c := New(st, Config{Host: "c1", Now: time.Now}, stub)
	mk := func(disable bool) string {
		n := storetest.NewNode("")
		n.Driver, n.ProvisionState, n.PowerState, n.DisablePowerOff = "stub", string(state.Active), strp(PowerOn), disable
		require.NoError(t, st.CreateNode(ctx, n))
		stub.actual[n.UUID] = PowerOff // found off
		return n.UUID
	}
	kept, plain := mk(true), mk(false)
	cfg := PowerSyncConfig{Ticks: 1, MaxFailures: 3, Enforce: true}
	c.powerSyncTick(ctx, &powerSync{failures: map[string]int{}, next: map[string]time.Time{}}, cfg)
	assert.Equal(t, []string{plain + "=" + PowerOn}, stub.sets, "only the plain node is forced back on")
	n, err := st.GetNode(ctx, kept)
	require.NoError(t, err)
	assert.Equal(t, PowerOff, *n.PowerState, "the flagged node's state follows the BMC")
}

// TestBIOSApplyDisablePowerOff: a bios step on a node found off powers it
// on to apply the settings and, with disable_power_off, leaves it on
// instead of powering it off again.
func TestBIOSApplyDisablePowerOff(t *testing.T) {
	e := startBIOS(t, bmc.HardwareFake)
	id := e.node(t)
	_, err := store.MutateNode(context.Background(), e.st, id, func(n *store.Node) error { n.DisablePowerOff = true; return nil })
	require.NoError(t, err)
	require.NoError(t, e.clean(t, id, applyStep([2]any{"ProcVirtualization", "Disabled"})))
	n := e.wait(t, id, state.Manageable)
	require.Nil(t, n.LastError)
	assert.Equal(t, "Disabled", e.f.BIOS(id).Current["ProcVirtualization"])
	assert.Equal(t, bmc.PowerOn, e.f.State(id).Power, "left on")
	assert.NotContains(t, commands(e.f, id), "set_power off")
	assert.Contains(t, commands(e.f, id), "set_power on")
}

// TestFirmwareUpdateDisablePowerOff: a BIOS image on a node found off is
// activated by a power-on; with disable_power_off the node is left on
// instead of being powered off again.
func TestFirmwareUpdateDisablePowerOff(t *testing.T) {
	e := startBIOS(t, bmc.HardwareFake, fwConfig())
	id := e.node(t)
	_, err := store.MutateNode(context.Background(), e.st, id, func(n *store.Node) error { n.DisablePowerOff = true; return nil })
	require.NoError(t, err)
	e.f.SetFirmwareImage("http://images.test/bios-2.bin", bmc.FakeFirmwareImage{Component: "bios", Version: "2.0.0"})
	require.NoError(t, e.clean(t, id, updateStep(fwSetting("bios", "http://images.test/bios-2.bin"))))
	n := e.wait(t, id, state.Manageable)
	require.Nil(t, n.LastError)
	active, _ := e.f.FirmwareVersions(id)
	assert.Equal(t, "2.0.0", active["bios"])
	assert.Equal(t, bmc.PowerOn, e.f.State(id).Power, "left on")
	assert.NotContains(t, commands(e.f, id), "set_power off")
}
