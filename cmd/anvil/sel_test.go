package main

import (
	"bytes"
	"context"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/bmc"
	"github.com/anvil-metal/anvil/bmc/vbmc"
	"github.com/anvil-metal/anvil/controller/api"
	"github.com/anvil-metal/anvil/controller/conductor"
	"github.com/anvil-metal/anvil/controller/store/sqlite"
	"github.com/anvil-metal/anvil/controller/store/storetest"
)

// anvil node sel prints the BMC's event log; anvil node nmi sends an NMI
// and the log then shows it. fake-hardware cannot (Ironic's refusal).
func TestSELAndNMICLI(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st, err := sqlite.Open(ctx, ":memory:")
	require.NoError(t, err)
	defer st.Close()
	vs := vbmc.NewServer(nil, "admin", "pw", vbmc.NewNode("node-1", vbmc.NewMemory()))
	vts := httptest.NewServer(vs.Handler())
	defer vts.Close()
	vs.AddSEL("node-1", "Temperature CPU1", "Upper Critical going high")
	m := bmc.New(bmc.Config{MinInterval: -1, PollInterval: 10 * time.Millisecond, ConnectTimeout: 2 * time.Second})
	cond := conductor.New(st, conductor.Config{Host: "cli", CheckInterval: time.Hour}, conductor.FakeDriver{},
		conductor.NewBMCDriver(bmc.HardwareRedfish, m, nil))
	srv := httptest.NewServer(api.New(api.Config{Store: st, Conductor: cond}))
	defer srv.Close()
	n := storetest.NewNode("rf-node")
	n.Driver = "redfish"
	n.DriverInfo = map[string]any{"redfish_address": vts.URL, "redfish_username": "admin", "redfish_password": "pw",
		"redfish_system_id": "/redfish/v1/Systems/node-1"}
	require.NoError(t, st.CreateNode(ctx, n))
	require.NoError(t, st.CreateNode(ctx, storetest.NewNode("fake-node")))
	cli := func(args ...string) (string, error) {
		var out bytes.Buffer
		err := run(ctx, args, strings.NewReader(""), &out, func(k string) string {
			if k == "ANVIL_URL" {
				return srv.URL
			}
			return ""
		})
		return out.String(), err
	}

	out, err := cli("node", "sel", "rf-node")
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 5, out)
	assert.Regexp(t, `^ID\s+CREATED\s+SENSOR\s+MESSAGE$`, lines[0])
	assert.Regexp(t, `^4\s+\S+\s+Temperature CPU1\s+Upper Critical going high$`, lines[4])

	out, err = cli("node", "nmi", "rf-node")
	require.NoError(t, err)
	assert.Equal(t, "rf-node: NMI sent (see its console; anvil node sel rf-node shows what the BMC logged)\n", out)
	assert.Equal(t, 1, vs.NMIs("node-1"))

	out, err = cli("node", "sel", "rf-node", "--json")
	require.NoError(t, err)
	assert.Contains(t, out, `"message": "Diagnostic interrupt (NMI) asserted"`)

	_, err = cli("node", "nmi", "fake-node")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "does not support inject_nmi")
	_, err = cli("node", "sel")
	require.Error(t, err)
}
