package bmc_test

import (
	"context"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/bmc"
)

func fakeTarget(t *testing.T, id string) bmc.Target {
	t.Helper()
	tg, err := bmc.ParseDriverInfo("fake-hardware", nil)
	require.NoError(t, err)
	return tg.WithID(id)
}

func TestFakeHardwarePowerAndBoot(t *testing.T) {
	m := bmc.New(fastConfig(nil))
	ctx := context.Background()
	tg := fakeTarget(t, "n1")

	st, out, err := m.PowerState(ctx, tg)
	require.NoError(t, err)
	assert.Equal(t, bmc.PowerOff, st)
	assert.Equal(t, "fake", out.Provider)

	for _, tc := range []struct {
		action bmc.PowerAction
		want   bmc.PowerState
	}{
		{bmc.ActionOn, bmc.PowerOn},
		{bmc.ActionReboot, bmc.PowerOn},
		{bmc.ActionSoftOff, bmc.PowerOff},
		{bmc.ActionCycle, bmc.PowerOn},
		{bmc.ActionOff, bmc.PowerOff},
		{bmc.ActionSoftReboot, bmc.PowerOn},
	} {
		_, err := m.SetPower(ctx, tg, tc.action)
		require.NoError(t, err, tc.action)
		assert.Equal(t, tc.want, m.Fake().State("n1").Power, tc.action)
	}

	_, err = m.SetBootDevice(ctx, tg, bmc.BootPXE, bmc.BootOptions{Persistent: true, EFI: true})
	require.NoError(t, err)
	assert.Equal(t, bmc.FakeNodeState{Power: bmc.PowerOn, Boot: bmc.BootPXE, Opts: bmc.BootOptions{Persistent: true, EFI: true}}, m.Fake().State("n1"))

	_, err = m.SetPower(ctx, tg, bmc.PowerAction("explode"))
	require.ErrorIs(t, err, bmc.ErrUnsupported)
	_, err = m.SetBootDevice(ctx, tg, bmc.BootDevice("floppy"), bmc.BootOptions{})
	require.ErrorIs(t, err, bmc.ErrUnsupported)
}

func TestFakeKnobs(t *testing.T) {
	tests := []struct {
		name         string
		knobs        bmc.FakeKnobs
		boot         bool
		wantErr      error
		wantAttempts int // 0: do not check
		minAttempts  int
	}{
		{name: "auth failure is not retried", knobs: bmc.FakeKnobs{FailAuth: true}, wantErr: bmc.ErrAuth, wantAttempts: 1},
		{name: "two transient errors then success", knobs: bmc.FakeKnobs{TransientErrors: 2}, wantAttempts: 5},
		// busy answers are retried past the attempt cap (6 here), until
		// the time budget (300 ms here) is spent
		{name: "busy beyond the time budget", knobs: bmc.FakeKnobs{TransientErrors: 1000}, wantErr: bmc.ErrBusy, minAttempts: 7},
		{name: "ignored power change fails verification", knobs: bmc.FakeKnobs{IgnorePower: true}, wantErr: bmc.ErrVerify},
		{name: "ignored boot override fails verification", knobs: bmc.FakeKnobs{IgnoreBootOverride: true}, boot: true, wantErr: bmc.ErrVerify},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := fastConfig(nil)
			cfg.VerifyTimeout = 50 * time.Millisecond
			cfg.Retry.Initial = 5 * time.Millisecond
			cfg.Retry.Max = 20 * time.Millisecond
			cfg.Retry.MaxElapsed = 300 * time.Millisecond
			m := bmc.New(cfg)
			tg := fakeTarget(t, "n1")
			m.Fake().SetKnobs("n1", tc.knobs)
			var out bmc.Outcome
			var err error
			if tc.boot {
				out, err = m.SetBootDevice(context.Background(), tg, bmc.BootPXE, bmc.BootOptions{})
			} else {
				out, err = m.SetPower(context.Background(), tg, bmc.ActionOn)
			}
			if tc.wantErr != nil {
				require.ErrorIs(t, err, tc.wantErr)
			} else {
				require.NoError(t, err)
			}
			if tc.wantAttempts > 0 {
				assert.Equal(t, tc.wantAttempts, out.Attempts)
			}
			assert.GreaterOrEqual(t, out.Attempts, tc.minAttempts)
		})
	}
}

func TestVerifyErrorNamesExpectedAndObserved(t *testing.T) {
	cfg := fastConfig(nil)
	cfg.VerifyTimeout = 30 * time.Millisecond
	m := bmc.New(cfg)
	tg := fakeTarget(t, "n1")
	m.Fake().SetKnobs("n1", bmc.FakeKnobs{IgnorePower: true})
	_, err := m.SetPower(context.Background(), tg, bmc.ActionOn)
	require.ErrorIs(t, err, bmc.ErrVerify)
	assert.Contains(t, err.Error(), "power requested power on but the BMC reports power off")
}

// Commands to one BMC never overlap and are spaced by MinInterval. The
// assertion uses only the order of recorded timestamps, so a slow machine
// cannot make it flaky.
func TestCommandsToOneBMCAreSerialisedAndSpaced(t *testing.T) {
	cfg := fastConfig(nil)
	cfg.MinInterval = 15 * time.Millisecond
	m := bmc.New(cfg)
	tg := fakeTarget(t, "n1")
	// Make each command take a while so that overlaps would show.
	m.Fake().SetKnobs("n1", bmc.FakeKnobs{OnCall: func(string, string) { time.Sleep(2 * time.Millisecond) }})

	var wg sync.WaitGroup
	for i := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var err error
			if i%2 == 0 {
				_, err = m.SetPower(context.Background(), tg, bmc.ActionOn)
			} else {
				_, _, err = m.PowerState(context.Background(), tg)
			}
			assert.NoError(t, err)
		}()
	}
	wg.Wait()

	calls := m.Fake().Calls("n1")
	require.Greater(t, len(calls), 6)
	sort.Slice(calls, func(i, j int) bool { return calls[i].Start.Before(calls[j].Start) })
	for i := 1; i < len(calls); i++ {
		gap := calls[i].Start.Sub(calls[i-1].End)
		assert.GreaterOrEqual(t, gap, cfg.MinInterval, "call %d (%s) started %s after call %d (%s) ended", i, calls[i].Command, gap, i-1, calls[i-1].Command)
	}
}

// Different BMCs are not serialised against each other: a command to n1
// blocks until a command to n2 has started, which deadlocks (and times out)
// if the Manager had one global lock.
func TestDifferentBMCsRunConcurrently(t *testing.T) {
	m := bmc.New(fastConfig(nil))
	n1Entered, n2Started := make(chan struct{}), make(chan struct{})
	var once1, once2 sync.Once
	m.Fake().SetKnobs("n2", bmc.FakeKnobs{OnCall: func(string, string) { once2.Do(func() { close(n2Started) }) }})
	m.Fake().SetKnobs("n1", bmc.FakeKnobs{OnCall: func(string, string) {
		once1.Do(func() { close(n1Entered) })
		select {
		case <-n2Started:
		case <-time.After(5 * time.Second):
		}
	}})

	ctx := context.Background()
	done := make(chan error, 1)
	start := time.Now()
	go func() {
		_, _, err := m.PowerState(ctx, fakeTarget(t, "n1"))
		done <- err
	}()
	<-n1Entered // n1's command holds n1's lock and blocks
	_, _, err := m.PowerState(ctx, fakeTarget(t, "n2"))
	require.NoError(t, err)
	require.NoError(t, <-done)
	assert.Less(t, time.Since(start), 4*time.Second, "n1 waited for its timeout: n2 was blocked behind it")
}

func TestLockWaitHonoursContext(t *testing.T) {
	m := bmc.New(fastConfig(nil))
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	m.Fake().SetKnobs("n1", bmc.FakeKnobs{OnCall: func(string, string) {
		once.Do(func() { close(entered); <-release })
	}})
	first := make(chan error, 1)
	go func() { _, _, err := m.PowerState(context.Background(), fakeTarget(t, "n1")); first <- err }()
	<-entered // the first operation holds the lock

	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, _, err := m.PowerState(ctx, fakeTarget(t, "n1"))
	require.ErrorIs(t, err, context.DeadlineExceeded)
	close(release)
	require.NoError(t, <-first)
}

func TestUnknownHardwareType(t *testing.T) {
	m := bmc.New(fastConfig(nil))
	_, _, err := m.PowerState(context.Background(), bmc.Target{HardwareType: "idrac"})
	require.ErrorIs(t, err, bmc.ErrUnsupported)
}

func TestActionForTarget(t *testing.T) {
	for target, want := range map[string]bmc.PowerAction{
		"power on": bmc.ActionOn, "power off": bmc.ActionOff, "rebooting": bmc.ActionReboot,
		"soft rebooting": bmc.ActionSoftReboot, "soft power off": bmc.ActionSoftOff,
	} {
		got, err := bmc.ActionForTarget(target)
		require.NoError(t, err)
		assert.Equal(t, want, got)
		assert.True(t, got.Valid())
	}
	_, err := bmc.ActionForTarget("on")
	require.ErrorIs(t, err, bmc.ErrUnsupported)
}
