package bmc_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/bmc"
	"github.com/anvil-metal/anvil/bmc/vbmc"
	"github.com/anvil-metal/anvil/bmc/vbmc/ipmisim"
)

const ipmiPass = "ipmi-Pa55-word"

// ipmiTarget returns driver_info for the simulator, as Ironic would hold it
// (the port as a string on purpose).
func ipmiTarget(t *testing.T, port int, password string) bmc.Target {
	t.Helper()
	tg, err := bmc.ParseDriverInfo("ipmi", map[string]any{
		"ipmi_address": "127.0.0.1", "ipmi_port": fmt.Sprint(port),
		"ipmi_username": "admin", "ipmi_password": password,
	})
	require.NoError(t, err)
	return tg.WithID("node-1")
}

// bmclib's ipmitool provider against a real ipmi_sim whose chassis control
// drives an in-memory anvil-vbmc node. Skipped without ipmi_sim/ipmitool.
func TestIPMIAgainstIPMISim(t *testing.T) {
	ipmisim.SkipIfMissing(t)
	env := startVBMC(t, "node-1")
	bin := ipmisim.BuildVBMC(t)
	sim := ipmisim.Start(t, ipmisim.Options{
		ChassisControl: fmt.Sprintf("%s chassis-control --url %s/control/node-1 --username %s --password %s", bin, env.url, testUser, testPass),
		Password:       ipmiPass,
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var logs syncBuffer
	cfg := fastConfig(&logs)
	cfg.MinInterval = 20 * time.Millisecond
	cfg.PollInterval = 50 * time.Millisecond
	cfg.VerifyTimeout = 3 * time.Second
	m := bmc.New(cfg)
	tg := ipmiTarget(t, sim.Port, ipmiPass)

	t.Run("verify and status", func(t *testing.T) {
		out, err := m.Verify(ctx, tg)
		require.NoError(t, err)
		assert.Equal(t, "ipmitool", out.Provider)
		st, out, err := m.PowerState(ctx, tg)
		require.NoError(t, err)
		assert.Equal(t, bmc.PowerOff, st)
		t.Logf("ipmitool power status: %s", out.Duration)
	})

	t.Run("boot device", func(t *testing.T) {
		for _, dev := range []bmc.BootDevice{bmc.BootDisk, bmc.BootCDROM, bmc.BootBIOS, bmc.BootPXE} {
			out, err := m.SetBootDevice(ctx, tg, dev, bmc.BootOptions{})
			require.NoError(t, err, dev)
			t.Logf("ipmitool bootdev %s + bootparam get 5: %s", dev, out.Duration)
		}
		assert.Equal(t, "Pxe", env.srv.Node("node-1").Boot().Target)
	})

	for _, tc := range []struct {
		action bmc.PowerAction
		wantOn bool
	}{
		{bmc.ActionOn, true},
		{bmc.ActionReboot, true},
		{bmc.ActionCycle, true},
		{bmc.ActionSoftOff, false},
		{bmc.ActionCycle, true}, // from off: powers on
		{bmc.ActionOff, false},
	} {
		t.Run("power "+string(tc.action), func(t *testing.T) {
			out, err := m.SetPower(ctx, tg, tc.action)
			require.NoError(t, err)
			on, err := env.nodes["node-1"].On(ctx)
			require.NoError(t, err)
			assert.Equal(t, tc.wantOn, on)
			if tc.action == bmc.ActionOn {
				_, dev := env.nodes["node-1"].Boots()
				assert.Equal(t, vbmc.BootPXE, dev, "the first boot after 'bootdev pxe' used PXE")
				assert.Equal(t, "None", env.srv.Node("node-1").Boot().Target, "one-time override consumed")
			}
			t.Logf("ipmitool %s verified: %s (%d commands)", tc.action, out.Duration, out.Attempts)
		})
	}
	boots, _ := env.nodes["node-1"].Boots()
	assert.GreaterOrEqual(t, boots, 4, "on, reboot, cycle, cycle-from-off each started the machine")

	t.Run("wrong password fails fast without leaking", func(t *testing.T) {
		const wrong = "Wr0ng-ipmi-XYZZY"
		start := time.Now()
		out, err := m.SetPower(ctx, ipmiTarget(t, sim.Port, wrong), bmc.ActionOn)
		require.ErrorIs(t, err, bmc.ErrAuth)
		assert.Equal(t, 1, out.Attempts)
		assert.Less(t, time.Since(start), 3*time.Second)
		assert.NotContains(t, logs.String(), wrong)
		assert.NotContains(t, logs.String(), ipmiPass)
		assert.NotContains(t, err.Error(), wrong)
	})
}

func TestIPMIUnreachable(t *testing.T) {
	ipmisim.SkipIfMissing(t)
	c, err := net.ListenPacket("udp4", "127.0.0.1:0")
	require.NoError(t, err)
	port := c.LocalAddr().(*net.UDPAddr).Port
	require.NoError(t, c.Close()) // nothing answers there now

	cfg := fastConfig(nil)
	cfg.ConnectTimeout = 700 * time.Millisecond
	cfg.Retry = bmc.RetryPolicy{Attempts: 2, Initial: 50 * time.Millisecond, Max: 50 * time.Millisecond, MaxElapsed: 3 * time.Second}
	m := bmc.New(cfg)
	start := time.Now()
	out, err := m.Verify(context.Background(), ipmiTarget(t, port, ipmiPass))
	require.ErrorIs(t, err, bmc.ErrUnreachable)
	assert.Equal(t, 2, out.Attempts)
	assert.Less(t, time.Since(start), 3*time.Second)
}

// failingBackend is a machine whose power button is broken.
type failingBackend struct{ *vbmc.Memory }

func (failingBackend) PowerOn(context.Context, string) error { return errors.New("PSU failure") }

// When the chassis command itself fails, bmclib retries it with cipher
// suite 17, which ipmi_sim rejects, and reports that session error; the
// Manager must not call it an authentication failure.
func TestIPMIFailingChassisIsNotAnAuthError(t *testing.T) {
	ipmisim.SkipIfMissing(t)
	node := vbmc.NewNode("node-1", failingBackend{vbmc.NewMemory()})
	srv := vbmc.NewServer(nil, testUser, testPass, node)
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(ts.Close)
	sim := ipmisim.Start(t, ipmisim.Options{
		ChassisControl: fmt.Sprintf("%s chassis-control --url %s/control/node-1 --username %s --password %s", ipmisim.BuildVBMC(t), ts.URL, testUser, testPass),
		Password:       ipmiPass,
	})
	cfg := fastConfig(nil)
	cfg.Retry = bmc.RetryPolicy{Attempts: 2, Initial: 10 * time.Millisecond, Max: 10 * time.Millisecond, MaxElapsed: 5 * time.Second}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := bmc.New(cfg).SetPower(ctx, ipmiTarget(t, sim.Port, ipmiPass), bmc.ActionOn)
	require.Error(t, err)
	assert.NotErrorIs(t, err, bmc.ErrAuth)
	assert.ErrorIs(t, err, bmc.ErrBusy)
}
