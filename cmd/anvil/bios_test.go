package main

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/controller/api"
	"github.com/anvil-metal/anvil/controller/conductor"
	"github.com/anvil-metal/anvil/controller/store"
	"github.com/anvil-metal/anvil/controller/store/sqlite"
	"github.com/anvil-metal/anvil/controller/ui"
)

// TestBIOSAndFirmwareCLI: anvil node bios and anvil node firmware against
// the real API and dashboard over SQLite, mounted as the controller mounts
// them, with a node whose cache has a pending setting and firmware, and
// nodes whose cache is empty for each reason.
func TestBIOSAndFirmwareCLI(t *testing.T) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, ":memory:")
	require.NoError(t, err)
	defer st.Close()
	cond := conductor.New(st, conductor.Config{Host: "cli", CheckInterval: time.Hour}, conductor.FakeDriver{})
	apiSrv := api.New(api.Config{Store: st, Conductor: cond})
	dash := ui.New(ui.Config{API: apiSrv, Counts: st, BIOS: st})
	root := http.NewServeMux()
	root.Handle("/ui/", dash)
	root.Handle("/", apiSrv)
	srv := httptest.NewServer(root)
	defer srv.Close()

	addNode := func(name, driver, state, biosIface string) string {
		n := &store.Node{UUID: uuid.NewString(), Name: &name, Driver: driver, ProvisionState: state, CreatedAt: time.Now().UTC()}
		n.Interfaces.BIOS = biosIface
		require.NoError(t, st.CreateNode(ctx, n))
		return n.UUID
	}
	r740 := addNode("r740", "redfish", "manageable", "redfish")
	addNode("old-ipmi", "ipmi", "manageable", "")
	addNode("no-bios", "redfish", "manageable", "no-bios")
	addNode("fresh", "redfish", "enroll", "redfish")
	addNode("unread", "redfish", "manageable", "redfish")
	yes, no := true, false
	lo, hi, maxLen := 0, 4094, 7
	disabled := "Disabled"
	require.NoError(t, st.ReplaceBIOSSettings(ctx, r740, []store.BIOSSetting{
		{Name: "ProcVirtualization", Value: "Enabled", PendingValue: &disabled, AttributeType: "Enumeration",
			AllowableValues: []string{"Enabled", "Disabled"}, ReadOnly: &no, ResetRequired: &yes, Unique: &no},
		{Name: "PxeDev1VlanId", Value: "0", AttributeType: "Integer", LowerBound: &lo, UpperBound: &hi, ReadOnly: &no, ResetRequired: &yes, Unique: &no},
		{Name: "SystemServiceTag", Value: "ABC1234", AttributeType: "String", MaxLength: &maxLen, ReadOnly: &yes, ResetRequired: &no, Unique: &yes},
	}))
	flashed := "2.20.0"
	require.NoError(t, st.ReplaceFirmwareComponents(ctx, r740, []store.FirmwareComponent{
		{Component: "bios", InitialVersion: "2.19.1", CurrentVersion: "2.20.0", LastVersionFlashed: &flashed},
		{Component: "bmc", CurrentVersion: "7.00.00.171"},
	}))

	env := func(k string) string {
		if k == "ANVIL_URL" {
			return srv.URL
		}
		return ""
	}
	cli := func(args ...string) (string, error) {
		var out bytes.Buffer
		err := run(ctx, args, strings.NewReader(""), &out, env)
		return out.String(), err
	}

	out, err := cli("node", "bios", "r740")
	require.NoError(t, err)
	assert.Regexp(t, `NAME\s+VALUE\s+PENDING\s+TYPE\s+ALLOWED\s+FLAGS\n`, out)
	assert.Regexp(t, `ProcVirtualization\s+Enabled\s+Disabled\s+Enumeration\s+Enabled,Disabled\s+reset-required\n`, out)
	assert.Regexp(t, `PxeDev1VlanId\s+0\s+-\s+Integer\s+0\.\.4094\s+reset-required\n`, out)
	assert.Regexp(t, `SystemServiceTag\s+ABC1234\s+-\s+String\s+length \.\.7\s+read-only,unique\n`, out)
	assert.Contains(t, out, "1 of 3 settings pending: the BMC applies them at the node's next boot")
	out, err = cli("node", "bios", r740, "--json")
	require.NoError(t, err)
	assert.Contains(t, out, `"pending_value": "Disabled"`)
	assert.Contains(t, out, `"allowable_values": [`)

	// Ironic's own view of the same cache has no pending value.
	var ironic map[string]any
	require.NoError(t, newClient(srv.URL).Do(ctx, "GET", "/v1/nodes/r740/bios?detail=True", nil, &ironic))
	require.Len(t, ironic["bios"], 3)
	assert.NotContains(t, ironic["bios"].([]any)[0], "pending_value")

	for node, why := range map[string]string{
		"old-ipmi": "no BIOS settings cached: the ipmi driver has none",
		"no-bios":  "no BIOS settings cached: the node's bios_interface is no-bios",
		"fresh":    "no BIOS settings cached: the node has not been managed yet",
		"unread":   "no BIOS settings cached yet: they are read from the BMC when the node becomes manageable",
	} {
		out, err := cli("node", "bios", node)
		require.NoError(t, err, node)
		assert.Contains(t, out, why, node)
	}
	_, err = cli("node", "bios", "missing")
	assert.ErrorContains(t, err, "HTTP 404: Node missing could not be found.")

	// The firmware list is Ironic's 1.86 resource.
	out, err = cli("node", "firmware", "r740")
	require.NoError(t, err)
	assert.Regexp(t, `COMPONENT\s+INITIAL\s+CURRENT\s+LAST FLASHED\s+UPDATED\n`, out)
	assert.Regexp(t, `bios\s+2\.19\.1\s+2\.20\.0\s+2\.20\.0\s+-\n`, out)
	assert.Regexp(t, `bmc\s+7\.00\.00\.171\s+7\.00\.00\.171\s+-\s+-\n`, out)
	out, err = cli("node", "firmware", "r740", "--json")
	require.NoError(t, err)
	assert.Contains(t, out, `"last_version_flashed": "2.20.0"`)
	out, err = cli("node", "firmware", "old-ipmi")
	require.NoError(t, err)
	assert.Contains(t, out, "no firmware versions cached: the ipmi driver has none")
	_, err = cli("node", "firmware", "missing")
	assert.ErrorContains(t, err, "HTTP 404: Node missing could not be found.")

	// An older controller, whose API serves less than 1.86, refuses the
	// version (its answer, in Ironic's format): the command says why.
	old := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		assert.Equal(t, "1.86", r.Header.Get("X-OpenStack-Ironic-API-Version"))
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotAcceptable)
		_, _ = w.Write([]byte(`{"error_message": "{\"faultcode\": \"Client\", \"faultstring\": \"Version 1.86 was requested but the minor version is not supported by this service. The supported version range is: [1.1, 1.82].\", \"debuginfo\": null}"}`))
	}))
	defer old.Close()
	var stdout bytes.Buffer
	err = run(ctx, []string{"--url", old.URL, "node", "firmware", "r740"}, strings.NewReader(""), &stdout, func(string) string { return "" })
	require.Error(t, err)
	assert.Equal(t, "the controller's API does not serve firmware versions (they need API 1.86): HTTP 406: Version 1.86 was requested "+
		"but the minor version is not supported by this service. The supported version range is: [1.1, 1.82].", err.Error())
	assert.Empty(t, stdout.String())
}
