package bmc_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/bmc"
)

// TestRedfishPowerHealth: the health comes with the power state, from the
// same ComputerSystem document (no request more than PowerState's), and
// follows what the BMC reports: a test changes it through anvil-vbmc's
// control endpoint (OK → Critical) or its Go API.
func TestRedfishPowerHealth(t *testing.T) {
	env := startVBMC(t, "n1", "n2")
	m := bmc.New(fastConfig(nil))
	ctx := context.Background()
	tg := env.target(t, "n1", testPass)

	ps, h, _, err := m.PowerHealth(ctx, tg)
	require.NoError(t, err)
	assert.Equal(t, bmc.PowerOff, ps)
	assert.Equal(t, bmc.HealthOK, h)

	before := env.srv.Requests()
	_, _, err = m.PowerState(ctx, tg)
	require.NoError(t, err)
	plain := env.srv.Requests() - before
	before = env.srv.Requests()
	_, _, _, err = m.PowerHealth(ctx, tg)
	require.NoError(t, err)
	assert.Equal(t, plain, env.srv.Requests()-before, "reading the health costs no request")
	t.Logf("Redfish requests per power state read: %d, with the health: %d", plain, env.srv.Requests()-before)

	req, err := http.NewRequest(http.MethodPost, env.url+"/control/n1/health", strings.NewReader("Critical"))
	require.NoError(t, err)
	req.SetBasicAuth(testUser, testPass)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusNoContent, resp.StatusCode)
	_, h, _, err = m.PowerHealth(ctx, tg)
	require.NoError(t, err)
	assert.Equal(t, bmc.HealthCritical, h)

	_, h, _, err = m.PowerHealth(ctx, env.target(t, "n2", testPass))
	require.NoError(t, err)
	assert.Equal(t, bmc.HealthOK, h, "the other system of the BMC is unaffected")

	require.NoError(t, env.srv.Node("n1").SetHealth("Warning"))
	_, h, _, err = m.PowerHealth(ctx, tg)
	require.NoError(t, err)
	assert.Equal(t, bmc.HealthWarning, h)
	assert.Error(t, env.srv.Node("n1").SetHealth("Degraded"))
}

// TestFakePowerHealth: the fake BMC reports the health a test sets.
func TestFakePowerHealth(t *testing.T) {
	f := bmc.NewFake()
	m := bmc.New(bmc.Config{Fake: f, MinInterval: -1})
	tg := bmc.Target{HardwareType: bmc.HardwareFake}.WithID("f1")
	_, h, _, err := m.PowerHealth(context.Background(), tg)
	require.NoError(t, err)
	assert.Equal(t, bmc.HealthUnknown, h)
	f.SetState("f1", bmc.FakeNodeState{Power: bmc.PowerOn, Health: bmc.HealthWarning})
	ps, h, _, err := m.PowerHealth(context.Background(), tg)
	require.NoError(t, err)
	assert.Equal(t, bmc.PowerOn, ps)
	assert.Equal(t, bmc.HealthWarning, h)
}

func TestParseHealth(t *testing.T) {
	for in, want := range map[string]bmc.Health{"OK": bmc.HealthOK, "Warning": bmc.HealthWarning, "Critical": bmc.HealthCritical,
		"": bmc.HealthUnknown, "ok": bmc.HealthUnknown, "Degraded": bmc.HealthUnknown} {
		assert.Equal(t, want, bmc.ParseHealth(in), in)
	}
}
