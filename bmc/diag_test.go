package bmc_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/bmc"
)

// The SEL is read from the node's manager (only its own: the transport
// narrows the managers to the node's), and an NMI reaches the node's
// system and shows in its SEL.
func TestRedfishSELAndNMI(t *testing.T) {
	env := startVBMC(t, "node-1", "node-2")
	env.srv.AddSEL("node-1", "Memory DIMM A1", "Correctable ECC logging limit reached")
	m := bmc.New(fastConfig(nil))
	ctx := context.Background()
	tg := env.target(t, "node-1", testPass)

	sel, _, err := m.SystemEventLog(ctx, tg)
	require.NoError(t, err)
	require.Len(t, sel, 4)
	assert.Equal(t, "Memory DIMM A1", sel[3].Sensor)
	assert.Equal(t, "Correctable ECC logging limit reached", sel[3].Message)
	assert.Equal(t, "4", sel[3].ID)
	assert.NotEmpty(t, sel[3].Created)

	_, err = m.InjectNMI(ctx, tg)
	require.NoError(t, err)
	assert.Equal(t, 1, env.srv.NMIs("node-1"))
	assert.Equal(t, 0, env.srv.NMIs("node-2"), "only the target system")
	sel, _, err = m.SystemEventLog(ctx, tg)
	require.NoError(t, err)
	assert.Equal(t, "Diagnostic interrupt (NMI) asserted", sel[len(sel)-1].Message)
}

func TestFakeSELAndNMI(t *testing.T) {
	m := bmc.New(bmc.Config{MinInterval: -1})
	ctx := context.Background()
	tg := bmc.Target{HardwareType: bmc.HardwareFake, ID: "n1"}
	sel, _, err := m.SystemEventLog(ctx, tg)
	require.NoError(t, err)
	assert.Empty(t, sel)
	_, err = m.InjectNMI(ctx, tg)
	require.NoError(t, err)
	assert.Equal(t, 1, m.Fake().State("n1").NMIs)
	sel, _, err = m.SystemEventLog(ctx, tg)
	require.NoError(t, err)
	require.Len(t, sel, 1)
	assert.Equal(t, "NMI", sel[0].Sensor)
}
