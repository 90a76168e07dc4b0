package bmc_test

// The BMC misbehaviours anvil-vbmc can produce (vbmc.Faults), each against
// the Manager: retried, read back or refused, and never a false success.

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/bmc"
	"github.com/anvil-metal/anvil/bmc/vbmc"
)

// A boot override the BMC drops once is set again and then holds; one it
// never keeps fails, after as many sets as a busy BMC gets, saying what
// was set and what the BMC reports.
func TestRedfishBootOverrideNotKept(t *testing.T) {
	ctx := context.Background()
	t.Run("dropped once, set again", func(t *testing.T) {
		env := startVBMC(t, "node-1")
		env.srv.SetFaults(vbmc.Faults{IgnoreBootPatch: true})
		time.AfterFunc(40*time.Millisecond, func() { env.srv.SetFaults(vbmc.Faults{}) })
		m := bmc.New(fastConfig(nil))
		_, err := m.SetBootDevice(ctx, env.target(t, "node-1", testPass), bmc.BootPXE, bmc.BootOptions{Persistent: true})
		require.NoError(t, err)
		assert.Equal(t, "Pxe", env.srv.Node("node-1").Boot().Target)
		assert.Equal(t, "Continuous", env.srv.Node("node-1").Boot().Enabled)
	})
	t.Run("never kept", func(t *testing.T) {
		env := startVBMC(t, "node-1")
		env.srv.SetFaults(vbmc.Faults{IgnoreBootPatch: true})
		cfg := fastConfig(nil)
		cfg.VerifyTimeout = 300 * time.Millisecond
		cfg.Retry.Attempts = 3
		m := bmc.New(cfg)
		_, err := m.SetBootDevice(ctx, env.target(t, "node-1", testPass), bmc.BootPXE, bmc.BootOptions{})
		require.ErrorIs(t, err, bmc.ErrVerify)
		assert.Contains(t, err.Error(), "boot device set to pxe persistent=false efi=false but the BMC reports none")
		assert.Contains(t, err.Error(), "set 3 time(s)")
	})
}

// 409 for a while after a power-off (iDRAC): the power-on is retried
// until the BMC takes it, and counts only once it reads back on.
func TestRedfishConflictAfterPowerOffThenOn(t *testing.T) {
	env := startVBMC(t, "node-1")
	ctx := context.Background()
	require.NoError(t, env.nodes["node-1"].PowerOn(ctx, vbmc.BootDisk))
	env.srv.SetFaults(vbmc.Faults{BusyAfterPowerOff: 300 * time.Millisecond})
	m := bmc.New(fastConfig(nil))
	tg := env.target(t, "node-1", testPass)
	_, err := m.SetPower(ctx, tg, bmc.ActionOff)
	require.NoError(t, err)
	start := time.Now()
	_, err = m.SetPower(ctx, tg, bmc.ActionOn)
	require.NoError(t, err)
	assert.GreaterOrEqual(t, time.Since(start), 200*time.Millisecond, "it waited out the 409s")
	assert.True(t, env.on(t, "node-1"))
}

// 20 operations at once on 20 nodes of one BMC that allows 4 sessions:
// all succeed, never more than 4 sessions are open, and the sessions are
// reused rather than one per operation. With a cap above the BMC's limit
// the refused logins (503) are retried and still nothing fails.
func TestRedfishSessionLimit(t *testing.T) {
	for _, tc := range []struct {
		name       string
		concurrent int
	}{
		{"default cap", 0},
		{"cap above the BMC's limit", 8},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var names []string
			for i := range 20 {
				names = append(names, fmt.Sprintf("node-%d", i))
			}
			env := startVBMC(t, names...)
			env.srv.SetFaults(vbmc.Faults{SessionLimit: 4})
			cfg := fastConfig(nil)
			cfg.RedfishMaxConcurrent = tc.concurrent
			cfg.Retry = bmc.RetryPolicy{Attempts: 20, Initial: 10 * time.Millisecond, Max: 50 * time.Millisecond, MaxElapsed: 10 * time.Second}
			m := bmc.New(cfg)
			ctx := context.Background()
			var wg sync.WaitGroup
			errs := make([]error, len(names))
			for i, n := range names {
				wg.Add(1)
				go func() {
					defer wg.Done()
					_, errs[i] = m.SetPower(ctx, env.target(t, n, testPass), bmc.ActionOn)
				}()
			}
			wg.Wait()
			for i, err := range errs {
				require.NoError(t, err, names[i])
				assert.True(t, env.on(t, names[i]))
			}
			peak, logins := env.srv.PeakSessions()
			assert.LessOrEqual(t, peak, 4)
			if tc.concurrent == 0 {
				assert.LessOrEqual(t, peak, 2, "the default cap is 2 per BMC")
				assert.LessOrEqual(t, logins, 4, "sessions are reused across the BMC's systems, not one per operation")
			}
			t.Logf("peak sessions %d, logins %d for %d operations", peak, logins, len(names))
			m.Close(ctx)
		})
	}
}

// Sessions are kept between operations and logged out by Close; one the
// BMC forgot (expired, or lost in a restart) is replaced by a new login
// rather than reported as bad credentials.
func TestRedfishSessionReuseAndRelogin(t *testing.T) {
	env := startVBMC(t, "node-1")
	m := bmc.New(fastConfig(nil))
	ctx := context.Background()
	tg := env.target(t, "node-1", testPass)
	for range 5 {
		_, _, err := m.PowerState(ctx, tg)
		require.NoError(t, err)
	}
	_, logins := env.srv.PeakSessions()
	assert.Equal(t, 1, logins, "one login for five operations")

	// The BMC drops the session behind the Manager's back.
	req, err := http.NewRequest(http.MethodDelete, env.url+"/redfish/v1/SessionService/Sessions/1", nil)
	require.NoError(t, err)
	req.SetBasicAuth(testUser, testPass)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusNoContent, resp.StatusCode)

	_, _, err = m.PowerState(ctx, tg)
	require.NoError(t, err)
	_, logins = env.srv.PeakSessions()
	assert.Equal(t, 2, logins)

	m.Close(ctx)
	assert.Equal(t, 0, env.openSessions(t))
}

// Without reuse (SessionIdle < 0) every operation logs in and out.
func TestRedfishSessionPerOperation(t *testing.T) {
	env := startVBMC(t, "node-1")
	cfg := fastConfig(nil)
	cfg.SessionIdle = -1
	m := bmc.New(cfg)
	for range 3 {
		_, _, err := m.PowerState(context.Background(), env.target(t, "node-1", testPass))
		require.NoError(t, err)
	}
	_, logins := env.srv.PeakSessions()
	assert.Equal(t, 3, logins)
	assert.Equal(t, 0, env.openSessions(t))
}

// A kept session is logged out once idle for SessionIdle.
func TestRedfishIdleSessionLoggedOut(t *testing.T) {
	env := startVBMC(t, "node-1")
	cfg := fastConfig(nil)
	cfg.SessionIdle = 50 * time.Millisecond
	m := bmc.New(cfg)
	_, _, err := m.PowerState(context.Background(), env.target(t, "node-1", testPass))
	require.NoError(t, err)
	assert.Equal(t, 1, env.openSessions(t))
	assert.Eventually(t, func() bool { return env.openSessions(t) == 0 }, 2*time.Second, 10*time.Millisecond)
}

func (e *vbmcEnv) openSessions(t *testing.T) int {
	t.Helper()
	return e.srv.OpenSessions()
}

// The agent's boot ISO (InsertMedia) is read back too: a BMC that reports
// the CD inserted without an image fails, after inserting it again; one
// that drops the first insert and takes the second succeeds.
func TestRedfishInsertMediaReadBack(t *testing.T) {
	ctx := context.Background()
	iso := isoServer(t) + "/data.iso"
	t.Run("inserted without an image", func(t *testing.T) {
		env := startVBMC(t, "node-1")
		env.srv.SetFaults(vbmc.Faults{MediaInsertedWithoutImage: true})
		cfg := fastConfig(nil)
		cfg.VerifyTimeout = 300 * time.Millisecond
		cfg.Retry.Attempts = 2
		m := bmc.New(cfg)
		_, err := m.InsertMedia(ctx, env.target(t, "node-1", testPass), iso)
		require.ErrorIs(t, err, bmc.ErrVerify)
		assert.Contains(t, err.Error(), `but the BMC reports Cd Inserted=true Image="" (inserted 2 time(s))`)
	})
	t.Run("first insert dropped", func(t *testing.T) {
		env := startVBMC(t, "node-1")
		env.srv.SetFaults(vbmc.Faults{IgnoreMediaInsert: true})
		time.AfterFunc(40*time.Millisecond, func() { env.srv.SetFaults(vbmc.Faults{}) })
		m := bmc.New(fastConfig(nil))
		_, err := m.InsertMedia(ctx, env.target(t, "node-1", testPass), iso)
		require.NoError(t, err)
		assert.Equal(t, iso, env.srv.Node("node-1").Media().Image)
	})
}
