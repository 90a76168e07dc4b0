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

// ipmiTarget returns driver_info for the simulator's admin user, as Ironic
// would hold it (the port as a string on purpose).
func ipmiTarget(t *testing.T, port int, password string) bmc.Target {
	t.Helper()
	return ipmiUserTarget(t, port, "admin", password, nil)
}

// ipmiUserTarget is ipmiTarget for any user, with further driver_info keys
// (ipmi_priv_level, ipmi_cipher_suite).
func ipmiUserTarget(t *testing.T, port int, user, password string, extra map[string]any) bmc.Target {
	t.Helper()
	info := map[string]any{
		"ipmi_address": "127.0.0.1", "ipmi_port": fmt.Sprint(port),
		"ipmi_username": user, "ipmi_password": password,
	}
	for k, v := range extra {
		info[k] = v
	}
	tg, err := bmc.ParseDriverInfo("ipmi", info)
	require.NoError(t, err)
	return tg.WithID("node-1")
}

// startIPMISim starts ipmi_sim (admin user ipmiPass, plus users) driving
// node-1 of an in-memory anvil-vbmc, and a Manager paced for it that logs
// to logs. Skips the test without ipmi_sim/ipmitool.
func startIPMISim(t *testing.T, logs *syncBuffer, users ...ipmisim.User) (*vbmcEnv, *ipmisim.Sim, *bmc.Manager) {
	t.Helper()
	ipmisim.SkipIfMissing(t)
	env := startVBMC(t, "node-1")
	sim := ipmisim.Start(t, ipmisim.Options{
		ChassisControl: fmt.Sprintf("%s chassis-control --url %s/control/node-1 --username %s --password %s", ipmisim.BuildVBMC(t), env.url, testUser, testPass),
		Password:       ipmiPass,
		Users:          users,
	})
	cfg := fastConfig(logs)
	cfg.MinInterval = 20 * time.Millisecond
	cfg.PollInterval = 50 * time.Millisecond
	cfg.VerifyTimeout = 3 * time.Second
	return env, sim, bmc.New(cfg)
}

// bmclib with our ipmitool provider against a real ipmi_sim whose chassis
// control drives an in-memory anvil-vbmc node.
func TestIPMIAgainstIPMISim(t *testing.T) {
	var logs syncBuffer
	env, sim, m := startIPMISim(t, &logs)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
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

	// ipmi_sim keeps an empty SEL and refuses "chassis power diag" (it
	// has no NMI): a permanent refusal, reported at once in the BMC's words.
	t.Run("sel and nmi", func(t *testing.T) {
		sel, _, err := m.SystemEventLog(ctx, tg)
		require.NoError(t, err)
		assert.Empty(t, sel)
		out, err := m.InjectNMI(ctx, tg)
		require.Error(t, err)
		assert.Contains(t, err.Error(), "Set Chassis Power Control to Diag failed: Invalid data field in request")
		assert.NotErrorIs(t, err, bmc.ErrBusy)
		assert.Equal(t, 1, out.Attempts)
	})

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

// When the chassis command itself fails inside a good session, the BMC's
// own answer reaches the operator: not an authentication failure, and not
// the session error of a retry with another cipher suite (bmclib's provider
// retried every failed command with -C 17, which ipmi_sim rejects).
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
	out, err := bmc.New(cfg).SetPower(ctx, ipmiTarget(t, sim.Port, ipmiPass), bmc.ActionOn)
	require.Error(t, err)
	assert.NotErrorIs(t, err, bmc.ErrAuth)
	assert.Contains(t, err.Error(), "Set Chassis Power Control to Up/On failed: Unspecified error")
	assert.NotContains(t, err.Error(), "cipher suite 17")
	// Completion code 0xFF is not among the failures Ironic retries
	// (IPMITOOL_RETRYABLE_FAILURES): one read, one command.
	assert.Equal(t, 2, out.Attempts)
}

const (
	operPass   = "0per-Pa55-word"
	viewerPass = "V1ewer-Pa55-word"
)

// ipmi_priv_level and ipmi_cipher_suite reach ipmitool and the BMC: an
// OPERATOR account drives power and boot at OPERATOR, a USER account can
// only read, and a cipher suite the BMC refuses fails at once.
func TestIPMIPrivilegeLevelAndCipherSuite(t *testing.T) {
	var logs syncBuffer
	env, sim, m := startIPMISim(t, &logs,
		ipmisim.User{Name: "oper", Password: operPass, Priv: "operator"},
		ipmisim.User{Name: "viewer", Password: viewerPass, Priv: "user"})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	node := env.nodes["node-1"]
	isOn := func(t *testing.T) bool {
		on, err := node.On(ctx)
		require.NoError(t, err)
		return on
	}

	t.Run("OPERATOR account at ipmi_priv_level OPERATOR", func(t *testing.T) {
		tg := ipmiUserTarget(t, sim.Port, "oper", operPass, map[string]any{"ipmi_priv_level": "operator"})
		out, err := m.Verify(ctx, tg)
		require.NoError(t, err)
		assert.Equal(t, "ipmitool", out.Provider)
		st, _, err := m.PowerState(ctx, tg)
		require.NoError(t, err)
		assert.Equal(t, bmc.PowerOff, st)

		_, err = m.SetBootDevice(ctx, tg, bmc.BootDisk, bmc.BootOptions{Persistent: true, EFI: true})
		require.NoError(t, err, "chassis bootdev with options needs OPERATOR, not ADMINISTRATOR")
		assert.Equal(t, "Hdd", env.srv.Node("node-1").Boot().Target)
		_, err = m.SetBootDevice(ctx, tg, bmc.BootPXE, bmc.BootOptions{})
		require.NoError(t, err)

		out, err = m.SetPower(ctx, tg, bmc.ActionOn)
		require.NoError(t, err)
		assert.True(t, isOn(t))
		_, dev := node.Boots()
		assert.Equal(t, vbmc.BootPXE, dev)
		t.Logf("on at OPERATOR: %s (%d commands)", out.Duration, out.Attempts)
		_, err = m.SetPower(ctx, tg, bmc.ActionReboot)
		require.NoError(t, err)
		_, err = m.SetPower(ctx, tg, bmc.ActionOff)
		require.NoError(t, err)
		assert.False(t, isOn(t))
	})

	// The USER session's refusal also proves -L reaches the BMC: without
	// it ipmitool asks for ADMINISTRATOR, which ipmi_sim grants to any user
	// (see ipmisim.User).
	t.Run("USER account reads but cannot set", func(t *testing.T) {
		tg := ipmiUserTarget(t, sim.Port, "viewer", viewerPass, map[string]any{"ipmi_priv_level": "USER"})
		st, _, err := m.PowerState(ctx, tg)
		require.NoError(t, err)
		assert.Equal(t, bmc.PowerOff, st)

		out, err := m.SetPower(ctx, tg, bmc.ActionOn)
		require.ErrorIs(t, err, bmc.ErrAuth)
		assert.Contains(t, err.Error(), "Insufficient privilege level")
		assert.Contains(t, err.Error(), "privilege level USER (ipmi_priv_level)")
		assert.NotContains(t, err.Error(), "HPM.x", "ipmitool's probe noise stays out of last_error")
		assert.Equal(t, 2, out.Attempts, "one read, one refused command, no retry")
		assert.False(t, isOn(t))
		t.Logf("USER power on: %v", err)

		out, err = m.SetBootDevice(ctx, tg, bmc.BootDisk, bmc.BootOptions{})
		require.ErrorIs(t, err, bmc.ErrAuth, "ipmitool exits 0 here; its output tells")
		assert.Contains(t, err.Error(), "Insufficient privilege level")
		assert.Equal(t, 1, out.Attempts)
	})

	t.Run("ipmi_cipher_suite", func(t *testing.T) {
		_, err := m.Verify(ctx, ipmiUserTarget(t, sim.Port, "admin", ipmiPass, map[string]any{"ipmi_cipher_suite": "3"}))
		require.NoError(t, err)

		// ipmi_sim has no SHA-256: suite 17 is refused, and with
		// ipmi_cipher_suite set no other suite is tried.
		out, err := m.Verify(ctx, ipmiUserTarget(t, sim.Port, "admin", ipmiPass, map[string]any{"ipmi_cipher_suite": 17}))
		require.ErrorIs(t, err, bmc.ErrAuth)
		assert.Contains(t, err.Error(), "cipher suite 17 (ipmi_cipher_suite)")
		assert.Contains(t, err.Error(), "invalid authentication algorithm")
		assert.NotContains(t, err.Error(), "cipher suite 3")
		assert.Equal(t, 1, out.Attempts)
		t.Logf("suite 17: %v", err)
	})

	assert.NotContains(t, logs.String(), operPass)
	assert.NotContains(t, logs.String(), viewerPass)
	assert.NotContains(t, logs.String(), ipmiPass)
}
