package api

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/controller/simagent"
)

// ipaReport is what a stock ironic-python-agent posts: its inventory (in
// IPA's shape, with fields anvil does not read) and plugin data.
func ipaReport(macs ...string) map[string]any {
	var nics []any
	for i, m := range macs {
		nics = append(nics, map[string]any{"name": "eth" + string(rune('0'+i)), "mac_address": m, "ipv4_address": nil,
			"has_carrier": true, "lldp": nil, "vendor": "0x8086", "product": "0x1572", "client_id": nil, "biosdevname": nil, "speed_mbps": 10000})
	}
	return map[string]any{
		"inventory": map[string]any{
			"interfaces": nics,
			"cpu":        map[string]any{"model_name": "Xeon", "frequency": "2400.000", "count": 16, "architecture": "x86_64", "flags": []any{"vmx"}},
			"memory":     map[string]any{"total": 68719476736, "physical_mb": 65536},
			"disks": []any{map[string]any{"name": "/dev/sda", "model": "SSD", "size": 480103981056, "rotational": false,
				"wwn": nil, "serial": "S1", "vendor": "ATA", "hctl": "0:0:0:0", "by_path": "/dev/disk/by-path/pci-0000:00:1f.2-ata-1"}},
			"system_vendor": map[string]any{"product_name": "R640", "serial_number": "ABC123", "manufacturer": "Dell Inc.",
				"firmware": map[string]any{"vendor": "Dell", "version": "2.1", "build_date": "01/01/2024"}},
			"boot":          map[string]any{"current_boot_mode": "uefi", "pxe_interface": macs[0]},
			"hostname":      "localhost",
			"bmc_address":   "0.0.0.0",
			"bmc_v6address": "::/0",
		},
		"root_disk":      map[string]any{"name": "/dev/sda"},
		"boot_interface": macs[0],
		"logs":           strings.Repeat("H4sI", 1000),
	}
}

func (e *testEnv) postInspection(query, ver string, body any) resp {
	e.t.Helper()
	return e.do("POST", "/v1/continue_inspection"+query, ver, body)
}

// TestContinueInspectionNeedsTheBootsNonce: on a controller that served
// the boot (so the boot has a nonce), a report without the nonce, from a
// MAC no node has, or below 1.84 changes nothing; the report with the
// nonce gets the lookup's answer with the token and finishes the
// inspection as the agent's own inventory does.
func TestContinueInspectionNeedsTheBootsNonce(t *testing.T) {
	e := bootDirEnv(t)
	id := e.agentNode("ci", nil)
	require.Equal(t, 202, e.provision("ci", "inspect", nil).status)
	e.waitState("ci", "inspect wait")
	nonce, err := simagent.FirmwareBoot(context.Background(), http.DefaultClient, e.srv.URL, mac1)
	require.NoError(t, err)
	require.NotEmpty(t, nonce)

	r := e.postInspection("", "1.84", ipaReport(mac1, mac2))
	require.Equal(t, 403, r.status, string(r.body))
	assert.Contains(t, r.fault(t), "does not carry what this boot requires")
	r = e.postInspection("?nonce=wrong", "1.84", ipaReport(mac1, mac2))
	require.Equal(t, 403, r.status, string(r.body))
	r = e.postInspection("?nonce="+nonce, "1.84", ipaReport("52:54:00:aa:00:99"))
	require.Equal(t, 404, r.status, "a MAC no port has: %s", r.body)
	for _, ver := range []string{"1.83", "1.22", "1.82"} {
		r = e.postInspection("?nonce="+nonce, ver, ipaReport(mac1, mac2))
		require.Equal(t, 404, r.status, "%s: %s", ver, r.body)
		assert.Equal(t, "API version 1.84 or newer is required", r.fault(t))
	}
	n := e.do("GET", "/v1/nodes/ci", latest, nil).json(t)
	assert.Equal(t, "inspect wait", n["provision_state"], "the refused reports changed nothing")
	assert.NotContains(t, n["properties"], "cpus")
	assert.NotContains(t, historyText(e, "ci"), "SECURITY")

	r = e.postInspection("?nonce="+nonce, "1.84", ipaReport(mac1, mac2))
	require.Equal(t, 202, r.status, string(r.body))
	var answer struct {
		Node   struct{ UUID string }
		Config struct {
			AgentToken         string `json:"agent_token"`
			AgentTokenRequired bool   `json:"agent_token_required"`
		}
	}
	require.NoError(t, json.Unmarshal(r.body, &answer))
	assert.Equal(t, id, answer.Node.UUID)
	assert.NotEmpty(t, answer.Config.AgentToken)
	assert.True(t, answer.Config.AgentTokenRequired)

	n = e.waitState("ci", "manageable")
	props := n["properties"].(map[string]any)
	assert.Equal(t, float64(16), props["cpus"])
	assert.Equal(t, float64(65536), props["memory_mb"])
	assert.Equal(t, float64(446), props["local_gb"], "the largest disk in GiB less one")
	assert.Equal(t, "x86_64", props["cpu_arch"])
	assert.NotNil(t, n["inspection_finished_at"])
	assert.Nil(t, n["last_error"])
	ports := e.do("GET", "/v1/nodes/ci/ports", latest, nil).json(t)["ports"].([]any)
	assert.Len(t, ports, 2, "a port was created for the second NIC")
	inv := e.do("GET", "/v1/nodes/ci/inventory", latest, nil)
	require.Equal(t, 200, inv.status)
	assert.Contains(t, string(inv.body), `"serial_number":"ABC123"`)
	assert.NotContains(t, string(inv.body), "H4sI", "plugin data is not kept")
	assert.Contains(t, historyText(e, "ci"), "inventory posted to /v1/continue_inspection")

	r = e.postInspection("?nonce="+nonce, "1.84", ipaReport(mac1, mac2))
	assert.Equal(t, 404, r.status, "the inspection is over: %s", r.body)
}

// TestContinueInspectionWithoutNonce: where the controller serves no boot
// (the ramdisk boots some other way, so the boot has no nonce) the first
// report is the first claimant, as the first lookup is; at 1.1 the answer
// is ironic-inspector's. The BMC address finds a node whose MACs no port
// has.
func TestContinueInspectionWithoutNonce(t *testing.T) {
	e := newEnvWith(t, agentConfig(), ":memory:")
	id := e.agentNode("plain", nil)
	require.Equal(t, 202, e.provision("plain", "inspect", nil).status)
	e.waitState("plain", "inspect wait")
	r := e.postInspection("", "", ipaReport(mac1))
	require.Equal(t, 202, r.status, string(r.body))
	assert.JSONEq(t, `{"uuid":"`+id+`"}`, string(r.body))
	e.waitState("plain", "manageable")

	byBMC := e.createNode("bmc", map[string]any{"inspect_interface": "agent", "deploy_interface": "direct",
		"driver_info": map[string]any{"redfish_address": "https://192.0.2.10:8443/redfish/v1"}})
	require.Equal(t, 202, e.provision("bmc", "manage", nil).status)
	e.waitState("bmc", "manageable")
	require.Equal(t, 202, e.provision("bmc", "inspect", nil).status)
	e.waitState("bmc", "inspect wait")
	// a node with ports is found by them only, never by its BMC's address,
	// which anyone on the network can learn (the report's MACs would be
	// made its PXE ports)
	ported := e.createNode("ported", map[string]any{"inspect_interface": "agent", "deploy_interface": "direct",
		"driver_info": map[string]any{"redfish_address": "https://192.0.2.20:8443/redfish/v1"}})
	require.Equal(t, 201, e.do("POST", "/v1/ports", latest, map[string]any{"address": "52:54:00:cc:00:01", "node_uuid": ported["uuid"]}).status)
	require.Equal(t, 202, e.provision("ported", "manage", nil).status)
	e.waitState("ported", "manageable")
	require.Equal(t, 202, e.provision("ported", "inspect", nil).status)
	e.waitState("ported", "inspect wait")
	stranger := ipaReport("52:54:00:bb:00:99")
	stranger["inventory"].(map[string]any)["bmc_address"] = "192.0.2.20"
	assert.Equal(t, 404, e.postInspection("", "1.84", stranger).status, "unknown MACs and the BMC of a node with ports")

	rep := ipaReport("52:54:00:bb:00:01")
	rep["inventory"].(map[string]any)["bmc_address"] = "192.0.2.11"
	assert.Equal(t, 404, e.postInspection("", "1.84", rep).status, "another BMC")
	rep["inventory"].(map[string]any)["bmc_address"] = "192.0.2.10"
	r = e.postInspection("", "1.84", rep)
	require.Equal(t, 202, r.status, string(r.body))
	assert.Contains(t, string(r.body), byBMC["uuid"].(string))
	n := e.waitState("bmc", "manageable")
	assert.Equal(t, float64(16), n["properties"].(map[string]any)["cpus"])

	// node_uuid (1.84): a node that is not in inspect wait is not found
	r = e.postInspection("?node_uuid="+id, "1.84", ipaReport(mac1))
	assert.Equal(t, 404, r.status, string(r.body))
	r = e.postInspection("?node_uuid="+id, "", ipaReport(mac1))
	assert.Equal(t, 404, r.status, "node_uuid needs 1.84: %s", r.body)
}

// TestContinueInspectionBadReports: Ironic's schema checks, before any
// lookup, with 400s; a body past the bound is 413.
func TestContinueInspectionBadReports(t *testing.T) {
	e := newEnvWith(t, agentConfig(), ":memory:")
	tests := map[string]struct {
		query  string
		body   any
		status int
		fault  string
	}{
		"not an object":     {"", `[1]`, 400, "must be a JSON object"},
		"malformed":         {"", `{"inventory":`, 400, "must be a JSON object"},
		"no inventory":      {"", map[string]any{"logs": "x"}, 400, "'inventory' is a required property"},
		"no interfaces":     {"", map[string]any{"inventory": map[string]any{}}, 400, "'interfaces' is a required property"},
		"empty interfaces":  {"", map[string]any{"inventory": map[string]any{"interfaces": []any{}}}, 400, "should be non-empty"},
		"no mac_address":    {"", map[string]any{"inventory": map[string]any{"interfaces": []any{map[string]any{"name": "eth0"}}}}, 400, "needs a string 'mac_address'"},
		"mac not a string":  {"", map[string]any{"inventory": map[string]any{"interfaces": []any{map[string]any{"mac_address": 1}}}}, 400, "needs a string 'mac_address'"},
		"bmc not a string":  {"", map[string]any{"inventory": map[string]any{"interfaces": []any{map[string]any{"mac_address": mac1}}, "bmc_address": 1}}, 400, "Schema error"},
		"nothing to go by":  {"", map[string]any{"inventory": map[string]any{"interfaces": []any{map[string]any{"mac_address": "nope"}}}}, 400, "No lookup information provided"},
		"unknown parameter": {"?foo=1", ipaReport(mac1), 400, "foo"},
		"bad node_uuid":     {"?node_uuid=x", ipaReport(mac1), 400, "Invalid UUID"},
		"too large":         {"", map[string]any{"inventory": map[string]any{"interfaces": []any{map[string]any{"mac_address": mac1}}}, "logs": strings.Repeat("a", maxInspectionBody)}, 413, "larger than"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			r := e.postInspection(tc.query, "1.84", tc.body)
			require.Equal(t, tc.status, r.status, string(r.body))
			assert.Contains(t, r.fault(t), tc.fault)
		})
	}
	// the route without the /v1 prefix has the same 8 MiB bound: a 2 MiB
	// report is read, not refused as every other body over 1 MiB is
	big := map[string]any{"inventory": map[string]any{"interfaces": []any{map[string]any{"mac_address": "52:54:00:dd:00:01"}}}, "logs": strings.Repeat("a", 2<<20)}
	r := e.do("POST", "/continue_inspection", "1.84", big)
	assert.Equal(t, 404, r.status, "read and looked up (no node has the MAC), not 413: %s", r.body)
}

// TestContinueInspectionDiscovers: with discovery on, a report no node
// matches enrols a new node (Ironic's auto-discovery), within discovery's
// bounds; a report from a machine that is a node already, but not in
// inspect wait, is the lookup's 404 and changes nothing.
func TestContinueInspectionDiscovers(t *testing.T) {
	e := discoveryEnv(t, nil)
	r := e.postInspection("", "1.84", ipaReport("52:54:00:cc:00:01", "52:54:00:cc:00:02"))
	require.Equal(t, 202, r.status, string(r.body))
	var answer struct {
		Node   struct{ UUID string }
		Config map[string]any
	}
	require.NoError(t, json.Unmarshal(r.body, &answer))
	require.NotEmpty(t, answer.Node.UUID)
	assert.Empty(t, answer.Config["agent_token"], "no token for a node in enroll")
	n := e.do("GET", "/v1/nodes/"+answer.Node.UUID, latest, nil).json(t)
	assert.Equal(t, "enroll", n["provision_state"])
	assert.Equal(t, true, n["extra"].(map[string]any)["auto_discovered"])
	assert.Equal(t, float64(16), n["properties"].(map[string]any)["cpus"])
	ports := e.do("GET", "/v1/nodes/"+answer.Node.UUID+"/ports", latest, nil).json(t)["ports"].([]any)
	assert.Len(t, ports, 2)

	r = e.postInspection("", "1.84", ipaReport("52:54:00:cc:00:01"))
	assert.Equal(t, 404, r.status, "a node has the MAC: %s", r.body)
	nodes := e.do("GET", "/v1/nodes", latest, nil).json(t)["nodes"].([]any)
	assert.Len(t, nodes, 1, "no second node")
}
